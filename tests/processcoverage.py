"""Coverage of the processes the tests start, not only of the test process.

Most of acbslurm runs in processes of its own: the Slurm hooks (slurmd runs them as
root, with an environment of Slurm's making), the commands the sandbox's users run,
`acbslurm run` under the job's step, the broker, the pool's workers. `make test`
measures the test process with pytest-cov; this measures those too, and gives their
data to pytest-cov's combine, so that the figure and its floor count what runs.

How: while the session runs, a ``.pth`` file in this interpreter's site-packages (the
environment every one of those processes starts from: the hook wrappers, `acbslurm`,
the workers) points coverage's own start-up hook (``COVERAGE_PROCESS_START``, read by
the ``a1_coverage.pth`` coverage installs) at a configuration file, whatever the
environment the process was given. A ``.pth`` file and not an environment variable:
slurmd builds the hooks' environment itself, and sudo-like switches of user clear it.
Each process writes its data beside the configuration (a folder every user may write
in); at the session's end the ``.pth`` goes and the data files join pytest-cov's.
Nothing here runs without ``--cov``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import site
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
# Beside the checkout (its .gitignore has it): every user of the sandbox reads the
# checkout already, and a job's private /tmp (if a site gives one) would hide /tmp.
FOLDER = REPO / ".coverage-processes"
RC = FOLDER / "coveragerc"
# "a0": before coverage's own a1_coverage.pth, which reads the variable this one sets.
PTH_NAME = "a0_acbslurm_process_coverage.pth"
MEASURED = pytest.StashKey[int]()  # how many processes' data joined the run's

# For a process a test starts to look at the interpreter itself (which modules an entry
# point imports): not measured, since coverage's own imports would count as the entry's.
# An empty value: the .pth file sets the variable only where it is not set at all.
UNMEASURED = {"COVERAGE_PROCESS_START": ""}

# The measured processes' stderr must stay theirs: tests read it. The warnings a
# process that ran no acbslurm code (a user's program) would print are off.
RC_TEXT = """\
[run]
source = {source}
omit = {source}/broker/_generated/*
data_file = {folder}/.coverage
parallel = true
patch = _exit
    execv
disable_warnings =
    no-data-collected
    module-not-measured
    module-not-imported
    no-ctracer
    couldnt-parse
    already-imported
"""


def _site_packages() -> Path:
    """This interpreter's site-packages (a virtual environment's, where make setup put
    acbslurm)."""
    for path in site.getsitepackages():
        if path.startswith(sys.prefix):
            return Path(path)
    raise RuntimeError(f"no site-packages under {sys.prefix}")


def _data_dir(config: pytest.Config) -> Path | None:
    """Where pytest-cov keeps the data it combines, when it measures this run."""
    plugin = config.pluginmanager.getplugin("_cov")
    controller = getattr(plugin, "cov_controller", None)
    cov = getattr(controller, "combining_cov", None)
    if cov is None:
        return None
    return Path(cov.config.data_file).resolve().parent


def _install() -> Path:
    """From now on every process of this environment's Python is measured: the
    configuration, the folder its data goes to, and the ``.pth`` file (returned)."""
    shutil.rmtree(FOLDER, ignore_errors=True)  # a killed run's leftovers
    FOLDER.mkdir()
    FOLDER.chmod(0o1777)  # root's hooks and every user's commands write here
    RC.write_text(RC_TEXT.format(source=REPO / "acbslurm", folder=FOLDER))
    RC.chmod(0o644)
    pth = _site_packages() / PTH_NAME
    # While this session lives: a session killed before its clean-up leaves a .pth
    # file that does nothing.
    alive = f"/proc/{os.getpid()}"
    pth.write_text(
        "import os; "
        f"os.path.exists({str(RC)!r}) and os.path.exists({alive!r}) and "
        f"os.environ.setdefault('COVERAGE_PROCESS_START', {str(RC)!r})\n"
    )
    return pth


def _collect(data_dir: Path) -> int:
    """Move the processes' data files into ``data_dir`` (pytest-cov's, which it
    combines from ``.coverage.*``); how many there were."""
    moved = 0
    for f in FOLDER.glob(".coverage.*"):
        with contextlib.suppress(OSError):
            shutil.move(str(f), data_dir / f".coverage.process-{f.name[len('.coverage.') :]}")
            moved += 1
    return moved


@pytest.fixture(scope="session", autouse=True)
def _process_coverage(request: pytest.FixtureRequest) -> Iterator[None]:
    data_dir = _data_dir(request.config)
    if data_dir is None:  # no --cov
        yield
        return
    pth = _install()
    try:
        yield
    finally:
        pth.unlink(missing_ok=True)
        RC.unlink(missing_ok=True)  # a process that starts now is not measured
        request.config.stash[MEASURED] = _collect(data_dir)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if MEASURED in config.stash:
        n = config.stash[MEASURED]
        terminalreporter.write_line(f"coverage: {n} processes the tests started were measured too")
