"""`make matrix`: the integration suite on every supported Slurm release, then the
22.05 -> 23.11 -> 25.11 upgrade path; writes docs/compatibility.md.

Each release gets its own sandbox (ACBSLURM_MATRIX_DIR/<release>, default
/var/lib/acbslurm/matrix-<release>) on one port base (ACBSLURM_SANDBOX_PORT_BASE,
default 16897), brought up by the suite's fixture and stopped after it. The suite's
lifecycle and failure tests add sandboxes on the port bases +4000 and +6000: pick a base
whose three ranges no other sandbox on the machine uses (18100's +4000, 22100, met another
sandbox's and failed the 23.02.8 leg's lifecycle test: "Address already in use"). Releases built
from source come from ACBSLURM_SLURM_SOURCES (the Makefile points it at
../shared/slurm-src) and are built once into the cache. ACBSLURM_MATRIX_RELEASES
(comma list) runs a subset: the other releases keep their rows of the last table, with
the date each was run (read back from docs/compatibility.md itself, so a fresh clone's
subset run keeps them too).

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
NOTES = """
## What differs between releases (acbslurm/slurm/versions.py has each branch)

- slurm.conf: `CryptoType=crypto/munge` (22.05) became `CredType=cred/munge` (23.02 on;
  CryptoType is still read as an alias up to 26.05). `task/none` is gone from 23.11
  (`TaskPlugin` is left out). From 23.02, `AccountingStorageTRES` names
  `gres/gpumem,gres/gpuutil` with `gres/gpu`, so slurmdbd's tres_table has them and
  the report's GPU-utilization columns read step rows (the integration test writes
  them as slurmdbd does, since emulated GPUs give NVML no samples).
- MariaDB: slurmdbd warns below half of its recommended `innodb_buffer_pool_size`,
  1 GiB up to 23.02 and 4 GiB from 23.11; the sandbox gives 1 GiB or 2 GiB.
- Programs: a built release lives under its own prefix; its clients must come first on
  PATH (Debian's 22.05 clients fail against newer daemons: "Incompatible versions of
  client and server code"), and the hooks run the site's scontrol (`slurm_bin_dir`).
- slurmdbd schema: 12 (22.05) -> 15 (23.11.11; 14 was the first 23.11 releases) -> 16
  (24.11 to 26.05). A 25.11 or 26.05 slurmdbd converts only 15 and newer, 24.11 13 and
  newer: a 22.05 database goes through 23.11. Columns added to the job table: 23.11
  `extra`, `failed_node`, `licenses`; 25.11 `qos_req`, `restart_cnt`, `resv_req`,
  `segment_size`, `std_err`, `std_in`, `std_out` (the step table gained `timelimit`,
  `cwd`, `std_*`). The report names its columns, so none of this changes its numbers.
- `sacctmgr show config`: up to 25.11 its "SlurmDBD configuration" section is what
  slurmdbd sends; from 26.05 sacctmgr formats slurmdbd's settings itself and prints its
  own slurm.conf's `PrivateData` there. The report service (`report_private_data: auto`)
  therefore counts jobs as private from 26.05 unless the setting says otherwise (the
  26.05.3 leg showed every user all jobs before that).
- Unchanged on every release tested: the squeue/sacct/scontrol text formats acbslurm
  reads; with `PrologFlags=Alloc` the prolog's environment names the job's GPUs and
  user (`SLURM_JOB_GPUS`/`CUDA_VISIBLE_DEVICES`, `SLURM_JOB_UID`: the hooks tests and
  the record test check the mapped UUID, uid, CPUs and memory); the `File=` form of
  gres.conf.
- pyslurm: built and contract-tested for 25.11 (pyslurm 25.11.2); its half of
  `test_backend_contract.py` is skipped on the other releases.
"""


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
            "failed": failed, "seconds": seconds, "date": _now()}  # fmt: skip


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


_WRITTEN_RE = re.compile(r"Written by `make matrix` on (\d{4}-\d\d-\d\d \d\d:\d\d \w+)")


def earlier_rows(text: str) -> dict[str, dict[str, object]]:
    """The release rows of a table this script wrote (``text``: docs/compatibility.md),
    as run_release's results. A row without a date column (tables written before the
    column existed) gets the date the table was written."""
    m = _WRITTEN_RE.search(text)
    written = m.group(1) if m else "unknown date"
    rows: dict[str, dict[str, object]] = {}
    for line in text.split("## Upgrade path")[0].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) not in (6, 7) or cells[1] not in ("pass", "FAIL"):
            continue
        release, result, passed, bad, seconds = cells[:5]
        date = cells[5] if len(cells) == 7 else written
        names = cells[-1]
        rows[release] = {
            "release": release,
            "ok": result == "pass",
            "counts": {"passed": int(passed or 0), "failed": int(bad or 0)},
            "failed": [] if names in ("-", "") else names.split(", "),
            "seconds": int(seconds or 0),
            "date": date,
        }
    return rows


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


def _columns(changed: object) -> str:
    """``job: +extra +failed_node; step: -`` from upgrade_path.py's column changes."""
    if not isinstance(changed, dict):
        return ""
    parts = []
    for table, diff in changed.items():
        if "columns" in diff:
            parts.append(f"{table}: {diff['columns']} columns")
            continue
        items = [f"+{c}" for c in diff["added"]] + [f"-{c}" for c in diff["dropped"]]
        parts.append(f"{table}: {' '.join(items) or 'none'}")
    return "; ".join(parts)


def docker_section(text: str) -> list[str]:
    """The "## Docker" section of the file as it is (written by hand from `make test
    DOCKER=...` runs, not by this script): kept where it was, before the upgrade path."""
    if "\n## Docker\n" not in text:
        return []
    rest = text.split("\n## Docker\n", 1)[1]
    body = rest.split("\n## ", 1)[0]
    return ["## Docker", *body.rstrip("\n").splitlines(), ""]


def write(
    results: list[dict[str, object]], upgrade: tuple[bool, list[dict[str, object]], int]
) -> None:
    ok, steps, seconds = upgrade
    lines = [
        "# Compatibility: acbslurm on each Slurm release and Docker",
        "",
        f"Written by `make matrix` on {_now()} on this project's",
        "2-core Debian 12 machine: the integration suite (`tests/integration`) on a sandbox",
        "running each release (22.05.8 is Debian's package; the others are built from",
        "SchedMD's release tarballs in ../shared/slurm-src). Release differences and the",
        "release that needed each are in `acbslurm/slurm/versions.py`. A run of some",
        "releases (`ACBSLURM_MATRIX_RELEASES`) keeps the other rows: the date is each",
        "row's own run.",
        "",
        "| Slurm | result | passed | failed | seconds | date | failing tests |",
        "|---|---|---|---|---|---|---|",
    ]
    by_release = {r["release"]: r for r in results}
    for release in SUPPORTED:
        r = by_release.get(release)
        if r is None:
            lines.append(f"| {release} | not run | | | | | |")
            continue
        c = r["counts"]
        assert isinstance(c, dict)
        bad = c.get("failed", 0) + c.get("error", 0) + c.get("errors", 0)
        names = ", ".join(str(f) for f in r["failed"]) or "-"  # type: ignore[attr-defined]
        lines.append(
            f"| {r['release']} | {'pass' if r['ok'] else 'FAIL'} | {c.get('passed', 0)} "
            f"| {bad} | {r['seconds']} | {r.get('date', '')} | {names} |"
        )
    lines += ["", *docker_section(OUT.read_text() if OUT.exists() else "")]
    lines += [
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
            f"| {s['slurm']} | {s['schema']} | {s['equal_to_first_and_sacct']} | {shown} "
            f"| {_columns(s.get('columns'))} |"
        )
    OUT.write_text("\n".join(lines) + "\n" + NOTES)
    print(f"matrix: wrote {OUT}")


def main() -> int:
    port_base = os.environ.get("ACBSLURM_SANDBOX_PORT_BASE", "16897")
    wanted = os.environ.get("ACBSLURM_MATRIX_RELEASES", "")
    releases = [r for r in SUPPORTED if not wanted or r in wanted.split(",")]
    results = [run_release(r, port_base) for r in releases]
    upgrade = upgrade_path(port_base)
    # A run of a subset keeps the other releases' rows of the last table, dates and all.
    earlier = earlier_rows(OUT.read_text()) if wanted and OUT.exists() else {}
    merged = {**earlier, **{str(r["release"]): r for r in results}}
    write(list(merged.values()), upgrade)
    return 0 if all(r["ok"] for r in results) and upgrade[0] else 1


if __name__ == "__main__":
    sys.exit(main())
