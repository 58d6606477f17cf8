"""An upgrade of the Debian package with a job running, on the sandbox (run as root).

Builds the previous commit's package (``--from``, default HEAD~1's tree through a git
worktree) and this checkout's, installs the old one, brings the sandbox up on the
installed package (ACBSLURM_INSTALLED=1), starts a one-GPU job whose container waits
for a file, upgrades to the new package while it runs, lets the job end, and checks
that end: the epilog ran (after the upgrade, exit 0, the record gone, no container
left), slurmdbd has the job COMPLETED 0:0, and `acbslurm report` (the new package's)
shows its GPU. Prints one JSON line; exit 0 when every check holds.

    sudo ACBSLURM_SANDBOX_DIR=... ACBSLURM_SANDBOX_PORT_BASE=... \\
        .venv/bin/python scripts/deb_upgrade_check.py [--from REV] [--without-conffile]

--without-conffile installs without /etc/acbslurm/acbslurm.yaml (dpkg --path-exclude),
for a shared machine whose other checkouts' tests must not find a settings file there;
the sandbox names its own settings either way. The package stays installed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts"), str(ROOT / "tests")]
os.environ["ACBSLURM_INSTALLED"] = "1"

import build_deb  # noqa: E402
import sandboxtest as st  # noqa: E402

from acbslurm.sandbox import Sandbox  # noqa: E402


def log(msg: str) -> None:
    print(f"deb-upgrade: {msg}", file=sys.stderr, flush=True)


def install(deb: Path, without_conffile: bool) -> float:
    t0 = time.monotonic()
    if without_conffile:
        argv = ["dpkg", "--path-exclude=/etc/acbslurm/*", "-i", str(deb)]
    else:
        argv = ["apt-get", "install", "-y", "-q", "--allow-downgrades", f"./{deb.name}"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(argv, check=True, cwd=deb.parent, env=env, stdout=subprocess.DEVNULL)
    return time.monotonic() - t0


def previous_package(rev: str, out: Path) -> Path:
    tree = Path(tempfile.mkdtemp(prefix="acbslurm-prev."))
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(tree), rev],
                   check=True)  # fmt: skip
    try:
        return build_deb.build(tree, out, None)
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                       check=False)  # fmt: skip


def epilog_runs(sb: Sandbox, job: str) -> list[str]:
    """The hook-times log's lines of the job's epilog: ``acbslurm-epilog JOB CODE MS``."""
    path = sb.layout.log_file("hook-times")
    lines = path.read_text().splitlines() if path.exists() else []
    return [ln for ln in lines if ln.startswith(f"acbslurm-epilog {job} ")]


def job_end(sb: Sandbox, job: str) -> dict[str, str]:
    out = sb.run_slurm(
        ["sacct", "-X", "-n", "-P", "-j", job, "-o", "State,ExitCode,AllocTRES"], check=False
    ).stdout.strip()
    state, _, rest = out.partition("|")
    code, _, tres = rest.partition("|")
    return {"state": state, "exit": code, "tres": tres}


def run_job_across_upgrade(sb: Sandbox, new: Path, without_conffile: bool) -> dict[str, Any]:
    api = st.docker_api(sb)
    work = Path(tempfile.mkdtemp(prefix="deb-upgrade.", dir="/tmp"))
    work.chmod(0o777)
    go = work / "go"
    body = "exec " + st.acbslurm_run(
        "--mount", f"{work}:/w", st.IMAGE, "sh", "-c", "until [ -e /w/go ]; do sleep 0.2; done"
    )
    job, container = st.container_job(sb, api, work, body)
    record = Path(json.loads(sb.layout.acbslurm_conf.read_text())["record_dir"]) / f"{job}.json"
    uuid = json.loads(record.read_text())["gpus"][0]["uuid"]
    log(f"job {job} runs container {container['Id'][:12]} on {uuid}; upgrading")
    upgrade_s = install(new, without_conffile)
    go.touch()
    st.wait_until(f"job {job} to end", lambda: st.job_state(sb, job) in ("COMPLETED", ""), 120)
    st.wait_until(f"job {job}'s epilog", lambda: epilog_runs(sb, job), 60)
    st.wait_until(f"job {job} in slurmdbd", lambda: job_end(sb, job)["state"] == "COMPLETED", 60)
    rows = st.wait_until(
        f"job {job} in the report",
        lambda: [j for j in st.report_json(sb, "--start", "now-1h")["jobs"]
                 if str(j.get("job_id_raw")) == job] or None,
        60,
    )  # fmt: skip
    return {
        "job": job,
        "upgrade_s": round(upgrade_s, 1),
        "epilog": epilog_runs(sb, job),
        "record_left": record.exists(),
        "containers_left": len(st.job_containers(api, job)),
        "sacct": job_end(sb, job),
        "report_gpus": rows[0]["gpus"],
        "report_gpu_devices": rows[0]["gpu_devices"],
        "gpu": uuid,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="rev", default="HEAD~1", help="the previous commit")
    ap.add_argument("--without-conffile", action="store_true", help="see the docstring")
    args = ap.parse_args()
    out = Path(tempfile.mkdtemp(prefix="deb-upgrade-pkgs."))
    old = previous_package(args.rev, out)
    new = build_deb.build(ROOT, out, None)
    log(f"{old.name} -> {new.name}")
    old_s = install(old, args.without_conffile)
    sb = Sandbox(os.environ.get("ACBSLURM_SANDBOX_DIR") or None)
    port = os.environ.get("ACBSLURM_SANDBOX_PORT_BASE")
    sb.up(port_base=int(port) if port else None)
    st.no_jobs(sb)
    result = {"old": old.name, "new": new.name, "install_old_s": round(old_s, 1)}
    result.update(run_job_across_upgrade(sb, new, args.without_conffile))
    ok = (
        len(result["epilog"]) == 1
        and result["epilog"][0].split()[2] == "0"
        and not result["record_left"]
        and result["containers_left"] == 0
        and result["sacct"]["state"] == "COMPLETED"
        and result["sacct"]["exit"] == "0:0"
        and result["report_gpus"] == 1
        and bool(result["report_gpu_devices"])
    )
    result["ok"] = ok
    print(json.dumps(result))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
