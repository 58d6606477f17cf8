"""`acbslurm demo`: clear the sandbox, run the three phases, tell what happened.

Every Slurm call and the usage report get the sandbox's environment explicitly (see
``target.py``); nothing here changes this process's environment.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from acbslurm.demo import show
from acbslurm.demo.accounted import usage_report, wait_until_stored
from acbslurm.demo.experiment import Phase, run_phase
from acbslurm.demo.target import Target, sandbox_target
from acbslurm.errors import SetupError
from acbslurm.render import render
from acbslurm.resources import conf_dir
from acbslurm.slurm.jobs import cancel_and_wait
from acbslurm.slurm.jobtypes import JobInfo
from acbslurm.spec import load_spec
from acbslurm.values import field, frozen, mutable

EXAMPLE = conf_dir() / "examples" / "sandbox-gpu.yaml"
COUNTS = (1, 2, 4)  # jobs per phase, on a node with 2 GPUs: fits, fills, queues
Say = Callable[[str], None]


@frozen
class DemoOptions:
    sandbox_dir: str | None = None
    spec: str | None = None  # default: EXAMPLE
    hold: float = 6.0  # seconds each job holds its GPU
    container: bool = True  # False: hold the GPU with a plain `sleep`
    timeout: float = 180.0  # seconds each phase may take


@mutable
class DemoResult:
    gpus: int
    phases: list[Phase] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(p.problems for p in self.phases)

    def as_json(self) -> str:
        return show.as_json(self.ok, self.gpus, self.phases)


def hold_pattern(count: int, hold: float) -> list[float]:
    # In the 4-job phase the first job is short, so one GPU is freed while the other is
    # still busy: the hand-over to a waiting job is then visible on its own.
    return [hold, 2 * hold, hold, hold][:count] if count == 4 else [hold] * count


def job_script(
    spec: Path, *, account: str, acbslurm_cmd: tuple[str, ...], seconds: float, container: bool
) -> str:
    """The sbatch script of one job holding its GPU for ``seconds``."""
    hold_text = f"{seconds:g}"
    if container:
        overrides = [f"container.env.HOLD_SECONDS={hold_text}"]
    else:
        overrides = ["container=", f"command=[sleep, '{hold_text}']"]
    job = load_spec(spec, [f"account={account}", *overrides])
    return render(job, acbslurm=acbslurm_cmd)


def run_demo(opts: DemoOptions, say: Say | None = None) -> DemoResult:
    """Run the experiment on the sandbox; with ``say``, tell it as it happens.

    The told story ends, after a run that behaved as expected, with the jobs'
    GPU-hours from `acbslurm report`. Without ``say`` (JSON output) nothing is told
    and the report is skipped: the result holds only the phases.
    """
    target = sandbox_target(opts.sandbox_dir)
    spec = Path(opts.spec) if opts.spec else EXAMPLE
    if not spec.is_file():
        raise SetupError(f"example spec {spec} not found; pass --spec")
    return run_experiment(target, spec, opts, say)


def run_experiment(target: Target, spec: Path, opts: DemoOptions, say: Say | None) -> DemoResult:
    """``run_demo`` once the sandbox is found: phases, then (told runs) the usage."""
    gpus = len(target.inventory)
    if say:
        say(show.header(target.root, gpus, target.user, str(spec), opts.container))
    cancel_and_wait(env=target.slurm_env, timeout=60)
    started = int(time.time())
    result = DemoResult(gpus)

    def progress(info: JobInfo) -> None:
        if say:
            say(show.progress(info))

    for count in COUNTS:
        if say:
            say(show.submitting(count))
        scripts = [
            (
                job_script(
                    spec,
                    account=target.user,
                    acbslurm_cmd=target.acbslurm_cmd,
                    seconds=h,
                    container=opts.container,
                ),
                h,
            )
            for h in hold_pattern(count, opts.hold)
        ]
        phase = run_phase(
            scripts,
            user=target.uid,
            env=target.job_env,
            slurm_env=target.slurm_env,
            cwd=target.home,
            record_dir=target.record_dir,
            inventory=target.inventory,
            timeout=opts.timeout,
            on_update=progress,
        )
        result.phases.append(phase)
        if say:
            say(show.phase_table(phase, gpus))
    if say and result.ok:
        say(show.SEED_OK)
        ids = [j.job_id for p in result.phases for j in p.jobs]
        # After the wait the report runs anyway: a late record only makes it shorter.
        wait_until_stored(ids, env=target.slurm_env)
        say(show.USAGE_TITLE)
        say(usage_report(target.acbslurm_cmd, target.user, started, env=target.slurm_env))
    return result
