"""`acbslurm submit -n 100` through the CLI backend and through pyslurm, against a
plain shell loop of 100 `sbatch` calls.

    sudo .venv/bin/python bench/submit_bench.py [--dir /var/lib/acbslurm/sandbox] [-n 100]
        [--pyslurm DIR]

Runs on an UP sandbox as its user; all submit the same rendered script (a 1 s job
without GPU), and every job is cancelled after each. Prints jobs/s of each and the
ratios. Goals: the CLI backend's rate >= half the loop's; pyslurm's >= 2x the
loop's. ``--pyslurm DIR``: a pyslurm built for the sandbox's Slurm (default:
the one `ensure_pyslurm` built into the Slurm cache, when the sandbox runs a built
release).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    from acbslurm.render import render
    from acbslurm.sandbox import Sandbox
    from acbslurm.spec import parse_spec

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dir", default=None)
    ap.add_argument("-n", type=int, default=100)
    ap.add_argument("--pyslurm", default=None)
    args = ap.parse_args()
    sb = Sandbox.load(args.dir)
    pyslurm_dir = args.pyslurm
    if pyslurm_dir is None and not sb.params.slurm.is_debian:
        from acbslurm.sandbox.slurmbuild import pyslurm_dir as built_dir

        found = built_dir(sb.params.slurm)
        pyslurm_dir = str(found) if (found / ".acbslurm-built").exists() else None
    user = sb.user
    spec_text = (
        f"name: bench\naccount: {user}\nmem: 100M\noutput: /dev/null\ncommand: [sleep, '1']\n"
    )
    script = render(parse_spec(spec_text, "bench"), acbslurm="x")
    workdir = Path("/tmp/acbslurm-submit-bench")
    workdir.mkdir(exist_ok=True)
    (workdir / "job.sh").write_text(script)
    (workdir / "job.yaml").write_text(spec_text)
    workdir.chmod(0o755)
    cli = {"PYTHONPATH": str(REPO), "ACBSLURM_SLURM_BACKEND": "cli"}

    def timed(argv: list[str], extra: dict[str, str]) -> float:
        t0 = time.perf_counter()
        sb.run_as_user(argv, extra_env=extra, cwd=str(workdir), timeout=600)
        dt = time.perf_counter() - t0
        sb.wait_idle(timeout=120)
        return dt

    loop = f"for i in $(seq {args.n}); do sbatch --parsable job.sh >/dev/null || exit 1; done"
    submit = [sys.executable, "-m", "acbslurm", "submit", "job.yaml", "-n", str(args.n)]
    try:
        t_loop = timed(["bash", "-c", loop], cli)
        t_ours = timed(submit, cli)
        t_py = None
        if pyslurm_dir:
            env = {"PYTHONPATH": f"{REPO}:{pyslurm_dir}", "ACBSLURM_SLURM_BACKEND": "pyslurm"}
            t_py = timed(submit, env)
    finally:
        sb.run_slurm(["scancel", "-u", user], check=False)
    r_loop, r_ours = args.n / t_loop, args.n / t_ours
    print(f"Slurm {sb.params.slurm_release}")
    print(f"plain sbatch loop: {args.n} jobs in {t_loop:.2f} s = {r_loop:.1f} jobs/s")
    print(f"acbslurm submit -n {args.n} (cli): {t_ours:.2f} s = {r_ours:.1f} jobs/s")
    print(
        f"cli/loop ratio {r_ours / r_loop:.2f} "
        f"(goal >= 0.5: {'met' if r_ours >= r_loop / 2 else 'MISSED'})"
    )
    if t_py is None:
        print("pyslurm: not measured (no pyslurm built for this Slurm; --pyslurm DIR)")
        return
    r_py = args.n / t_py
    print(f"acbslurm submit -n {args.n} (pyslurm): {t_py:.2f} s = {r_py:.1f} jobs/s")
    print(
        f"pyslurm/loop ratio {r_py / r_loop:.2f} "
        f"(goal >= 2: {'met' if r_py >= 2 * r_loop else 'MISSED'})"
    )


if __name__ == "__main__":
    main()
