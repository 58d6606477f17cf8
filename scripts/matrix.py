"""`make matrix`: the integration suite on every supported Slurm release, then the
22.05 -> 23.11 -> 25.11 upgrade path; writes docs/compatibility.md.

Each release gets its own sandbox (ACBSLURM_MATRIX_DIR/<release>, default
/var/lib/acbslurm/matrix-<release>) on one port base (ACBSLURM_SANDBOX_PORT_BASE,
default 16897), brought up by the suite's fixture and stopped after it. Releases built
from source come from ACBSLURM_SLURM_SOURCES (the Makefile points it at
../shared/slurm-src) and are built once into the cache. ACBSLURM_MATRIX_RELEASES
(comma list) runs a subset.

    sudo make matrix
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from acbslurm.sandbox import Sandbox  # noqa: E402
from acbslurm.slurm.versions import DEBIAN_RELEASE, SUPPORTED  # noqa: E402

OUT = ROOT / "docs" / "compatibility.md"


def run_release(release: str, port_base: str) -> dict[str, object]:
    base = os.environ.get("ACBSLURM_MATRIX_DIR", "/var/lib/acbslurm/matrix")
    sandbox_dir = f"{base}-{release}"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "ACBSLURM_SANDBOX_DIR": sandbox_dir,
        "ACBSLURM_SANDBOX_PORT_BASE": port_base,
        "ACBSLURM_SANDBOX_SLURM": "debian" if release == DEBIAN_RELEASE else release,
    }
    t = time.monotonic()
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/integration", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    seconds = round(time.monotonic() - t)
    Sandbox(sandbox_dir).down()
    tail = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else res.stderr[-300:]
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|error|errors)", tail)}
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", res.stdout, re.M)
    log = ROOT / "build" / f"matrix-{release}.log"
    log.parent.mkdir(exist_ok=True)
    log.write_text(res.stdout + res.stderr)
    print(f"matrix: Slurm {release}: {tail} ({seconds} s, log {log})", flush=True)
    return {"release": release, "ok": res.returncode == 0, "counts": counts,
            "failed": failed, "seconds": seconds}  # fmt: skip


def upgrade_path(port_base: str) -> tuple[bool, list[dict[str, object]], int]:
    t = time.monotonic()
    res = subprocess.run(
        [sys.executable, "scripts/upgrade_path.py", "--port-base", port_base, "--dir",
         os.environ.get("ACBSLURM_MATRIX_DIR", "/var/lib/acbslurm/matrix") + "-upgrade-path"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    steps = [json.loads(ln) for ln in res.stdout.splitlines() if ln.startswith("{")]
    if res.returncode != 0:
        print(res.stderr[-2000:], file=sys.stderr)
    return res.returncode == 0, steps, round(time.monotonic() - t)


def write(
    results: list[dict[str, object]], upgrade: tuple[bool, list[dict[str, object]], int]
) -> None:
    ok, steps, seconds = upgrade
    lines = [
        "# Compatibility: acbslurm on each Slurm release",
        "",
        f"Written by `make matrix` on {time.strftime('%Y-%m-%d %H:%M %Z')} on this project's",
        "2-core Debian 12 machine: the integration suite (`tests/integration`) on a sandbox",
        "running each release (22.05.8 is Debian's package; the others are built from",
        "SchedMD's release tarballs in ../shared/slurm-src). Release differences and the",
        "release that needed each are in `acbslurm/slurm/versions.py`.",
        "",
        "| Slurm | result | passed | failed | seconds | failing tests |",
        "|---|---|---|---|---|---|",
    ]
    by_release = {r["release"]: r for r in results}
    for release in SUPPORTED:
        r = by_release.get(release)
        if r is None:
            lines.append(f"| {release} | not run | | | | |")
            continue
        c = r["counts"]
        assert isinstance(c, dict)
        bad = c.get("failed", 0) + c.get("error", 0) + c.get("errors", 0)
        names = ", ".join(str(f) for f in r["failed"]) or "-"  # type: ignore[attr-defined]
        lines.append(
            f"| {r['release']} | {'pass' if r['ok'] else 'FAIL'} | {c.get('passed', 0)} "
            f"| {bad} | {r['seconds']} | {names} |"
        )
    lines += [
        "",
        "## Upgrade path 22.05 -> 23.11 -> 25.11",
        "",
        f"`scripts/upgrade_path.py` ({seconds} s): {'pass' if ok else 'FAIL'}. Three jobs",
        "recorded on 22.05; at each step the report's GPUs and GPU-seconds for them must",
        "equal the first step's and sacct's.",
        "",
        "| Slurm | schema | same numbers | jobs (gpus, gpu_seconds) | columns changed |",
        "|---|---|---|---|---|",
    ]
    for s in steps:
        jobs = s["jobs"]
        assert isinstance(jobs, dict)
        shown = "; ".join(
            f"{k}: {v['gpus']}, {v['gpu_seconds']}" if v else f"{k}: missing"
            for k, v in jobs.items()
        )
        lines.append(
            f"| {s['slurm']} | {s['schema']} | {s['equal_to_first_and_sacct']} | {shown} |"
        )
    OUT.write_text("\n".join(lines) + "\n")
    print(f"matrix: wrote {OUT}")


def main() -> int:
    port_base = os.environ.get("ACBSLURM_SANDBOX_PORT_BASE", "16897")
    wanted = os.environ.get("ACBSLURM_MATRIX_RELEASES", "")
    releases = [r for r in SUPPORTED if not wanted or r in wanted.split(",")]
    results = [run_release(r, port_base) for r in releases]
    upgrade = upgrade_path(port_base)
    write(results, upgrade)
    return 0 if all(r["ok"] for r in results) and upgrade[0] else 1


if __name__ == "__main__":
    sys.exit(main())
