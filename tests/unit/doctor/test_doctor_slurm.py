"""slurm.conf's hook lines, PrologFlags, KillWait; the Slurm version."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import hook_script
from fake_slurm import FakeSlurm

from acbslurm.doctor import slurmconf, version
from acbslurm.doctor.context import Context


def _hooks(ctx: Context) -> tuple[str, str]:
    c = slurmconf.check_hooks(slurmconf.load(ctx))
    return c.status, c.summary


def test_hook_lines_ok_through_include_and_any_key_case(make_ctx: Callable[..., Context]) -> None:
    ctx = make_ctx()
    conf = slurmconf.load(ctx)
    status, summary = _hooks(ctx)
    assert status == "ok", summary
    assert slurmconf.check_prolog_flags(conf).status == "ok"
    assert conf.node_gpu_count("n1") == 2 and conf.node_gpu_count("n2") is None


def test_slurm_conf_env_beats_the_setting(
    node: Path, make_ctx: Callable[..., Context], tmp_path: Path
) -> None:
    other = tmp_path / "other.conf"
    other.write_text("PrologFlags=Alloc\n")
    ctx = make_ctx(env={"SLURM_CONF": str(other)})
    status, summary = _hooks(ctx)
    assert status == "fail"
    assert "Prolog= is not set; Epilog= is not set; TaskProlog= is not set" in summary


@pytest.mark.parametrize(
    ("body", "mode", "problem"),
    [
        ("#!/bin/sh\n/etc/slurm/site-prolog.sh\n", 0o755, "does not run acbslurm-prolog"),
        ("#!/bin/sh\nexec /opt/acbslurm/bin/acbslurm-prolog\n", 0o755, "calls /opt/acbslurm/"),
        ("#!/opt/gone/python -sE\nprolog_main()\n", 0o755, "interpreter /opt/gone/python"),
        ("#!/bin/sh\nacbslurm-prolog\n", 0o775, "writable by others than root"),
        ("#!/bin/sh\nacbslurm-prolog\n", 0o644, "not an executable file"),
        # a task prolog's code is not the prolog's
        ("#!/bin/sh\nexec acbslurm-task-prolog\n", 0o755, "does not run acbslurm-prolog"),
    ],
)
def test_a_broken_prolog_is_named(
    node: Path, make_ctx: Callable[..., Context], body: str, mode: int, problem: str
) -> None:
    hook_script(node / "libexec" / "acbslurm-prolog", body, mode)
    status, summary = _hooks(make_ctx())
    assert status == "fail"
    assert f"Prolog={node}/libexec/acbslurm-prolog" in summary and problem in summary


def test_a_chained_prolog_is_fine(node: Path, make_ctx: Callable[..., Context]) -> None:
    site = hook_script(node / "site-prolog", "#!/bin/sh\nexit 0\n")
    acb = node / "libexec" / "acbslurm-prolog"
    hook_script(node / "chain", f"#!/bin/sh\n{site} || exit $?\nexec {acb}\n")
    (node / "hooks.conf").write_text(
        (node / "hooks.conf").read_text().replace(f"Prolog={acb}", f"Prolog={node}/chain")
    )
    assert _hooks(make_ctx()) == ("ok", _hooks(make_ctx())[1])
    assert f"Prolog={node}/chain" in _hooks(make_ctx())[1]


def test_prolog_flags_and_kill_wait(node: Path, make_ctx: Callable[..., Context]) -> None:
    (node / "slurm.conf").write_text("PrologFlags=Contain\nKillWait=3\n")
    conf = slurmconf.load(make_ctx())
    assert slurmconf.check_prolog_flags(conf).status == "ok"  # Contain implies Alloc
    kw = slurmconf.check_kill_wait(make_ctx(), conf)
    assert kw.status == "warn" and "KillWait=3 s is not above stop_grace=5 s" in kw.summary
    (node / "slurm.conf").write_text("PrologFlags=X11\n")
    conf = slurmconf.load(make_ctx())
    c = slurmconf.check_prolog_flags(conf)
    assert c.status == "fail" and "PrologFlags=X11" in c.summary and "Alloc" in c.fix
    assert slurmconf.check_kill_wait(make_ctx(), conf).status == "ok"  # Slurm's default 30


def _fake_scontrol(fake: FakeSlurm, text: str, code: int = 0) -> dict[str, str]:
    """scontrol prints ``text`` and exits ``code``; the environment that finds it."""
    fake.respond("scontrol", stdout=text + "\n", rc=code)
    return {"PATH": f"{fake.bin_dir}:/usr/bin:/bin"}


def test_configless_asks_scontrol(
    node: Path, make_ctx: Callable[..., Context], tmp_path: Path, fake_slurm: FakeSlurm
) -> None:
    env = _fake_scontrol(
        fake_slurm,
        f"Prolog                  = {node}/libexec/acbslurm-prolog\n"
        "PrologFlags             = Alloc,Contain\nTaskProlog              = (null)\n"
        "KillWait                = 30 sec",
    )
    ctx = make_ctx(env={**env, "SLURM_CONF": str(tmp_path / "none.conf")})
    conf = slurmconf.load(ctx)
    assert conf.source == "scontrol show config"
    status, summary = _hooks(ctx)
    assert status == "fail" and "TaskProlog= is not set" in summary
    assert "Prolog=" not in summary.split(";")[0]  # the Prolog itself is fine
    assert slurmconf.check_kill_wait(ctx, conf).status == "ok"


@pytest.mark.parametrize(
    ("text", "code", "status", "words"),
    [
        ("slurm 22.05.8", 0, "ok", "slurm 22.05.8"),
        ("slurm 23.11.1", 0, "ok", "slurm 23.11.1"),
        ("slurm 21.08.5", 0, "warn", "tested with Slurm 22.05"),
        ("", 1, "fail", "scontrol --version` failed"),
    ],
)
def test_slurm_version(
    make_ctx: Callable[..., Context],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    text: str,
    code: int,
    status: str,
    words: str,
    fake_slurm: FakeSlurm,
) -> None:
    env = _fake_scontrol(fake_slurm, text, code)
    env["PATH"] = env["PATH"].split(":")[0]  # no slurmd to compare with
    monkeypatch.setattr(version, "SBIN", "")
    c = version.check_slurm_version(make_ctx(env=env))
    assert c.status == status and words in c.summary, c


def test_scontrol_missing(make_ctx: Callable[..., Context], tmp_path: Path) -> None:
    c = version.check_slurm_version(make_ctx(env={"PATH": str(tmp_path)}))
    assert c.status == "fail" and "scontrol not found" in c.summary


def test_scontrol_and_slurmd_disagree(
    make_ctx: Callable[..., Context],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fake_slurm: FakeSlurm,
) -> None:
    env = _fake_scontrol(fake_slurm, "slurm 23.02.1")
    (tmp_path / "sbin").mkdir()
    hook_script(tmp_path / "sbin" / "slurmd", "#!/bin/sh\necho slurm 22.05.8\n")
    env["PATH"] += f":{tmp_path}/sbin"
    monkeypatch.setattr(version, "SBIN", "")
    c = version.check_slurm_version(make_ctx(env=env))
    assert c.status == "warn" and "slurmd is slurm 22.05.8" in c.summary


def test_a_task_prolog_users_cannot_run(node: Path, make_ctx: Callable[..., Context]) -> None:
    private = node / "root-only"
    private.mkdir(mode=0o700)
    hook_script(private / "python3", "#!/bin/sh\n")
    task = node / "libexec" / "acbslurm-task-prolog"
    hook_script(task, f"#!{private}/python3 -sE\ntask_prolog_main()\n")
    status, summary = _hooks(make_ctx())
    assert status == "fail" and f"{private}/python3 cannot be run by job users" in summary


def test_scontrol_gets_the_slurm_conf_setting(
    node: Path,
    make_ctx: Callable[..., Context],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fake_slurm: FakeSlurm,
) -> None:
    # Slurm's clients read slurm.conf even for --version; sudo drops SLURM_CONF, so the
    # setting must reach scontrol (a real 22.05 scontrol failed on DNS SRV records here).
    env = _fake_scontrol(fake_slurm, "slurm 22.05.8")
    monkeypatch.setattr(version, "SBIN", "")
    c = version.check_slurm_version(make_ctx(env=env))
    assert c.status == "ok" and "22.05.8" in c.summary, c
    assert fake_slurm.calls("scontrol")[-1].env["SLURM_CONF"] == str(node / "slurm.conf")
    # No file at the setting: nothing to pass, and scontrol's failure is explained.
    fake_slurm.respond("scontrol", stderr="no config\n", rc=1)
    gone = make_ctx(env=env, slurm_conf=str(tmp_path / "none.conf"))
    c = version.check_slurm_version(gone)
    assert "SLURM_CONF" not in fake_slurm.calls("scontrol")[-1].env
    assert c.status == "fail" and "no config" in c.summary and "SLURM_CONF" in c.fix, c


def test_cgroups_of_a_gpu_site_and_what_lacks(node: Path, make_ctx: Callable[..., Context]) -> None:
    (node / "slurm.conf").write_text(
        "ProctrackType=proctrack/cgroup\nTaskPlugin=task/cgroup,task/affinity\n"
    )
    (node / "cgroup.conf").write_text("ConstrainCores=yes\nConstrainDevices=yes  # GPUs\n")
    c = slurmconf.check_cgroups(slurmconf.load(make_ctx()))
    assert c.status == "ok" and "held to its GPUs" in c.summary, c.summary
    (node / "cgroup.conf").unlink()
    (node / "slurm.conf").write_text("ProctrackType=proctrack/linuxproc\n")
    c = slurmconf.check_cgroups(slurmconf.load(make_ctx()))
    assert c.status == "warn", c.summary
    for gap in ("ProctrackType=proctrack/linuxproc", "TaskPlugin=(not set)", "ConstrainDevices="):
        assert gap in c.summary
    assert "ConstrainDevices=yes" in c.fix
