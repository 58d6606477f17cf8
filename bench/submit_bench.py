"""`acbslurm submit -n 100` against a plain shell loop of 100 `sbatch` calls.

    sudo .venv/bin/python bench/submit_bench.py [--dir /var/lib/acbslurm/sandbox] [-n 100]

Runs on an UP sandbox as its user; both submit the same rendered script (a 1 s job
without GPU), and every job is cancelled afterwards. Prints jobs/s of each and the ratio.
Goal (issue 3): acbslurm's rate >= half the loop's.
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
    args = ap.parse_args()
    sb = Sandbox.load(args.dir)
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
    extra = {"PYTHONPATH": str(REPO)}

    def timed(argv: list[str]) -> float:
        t0 = time.perf_counter()
        sb.run_as_user(argv, extra_env=extra, cwd=str(workdir), timeout=600)
        return time.perf_counter() - t0

    loop = f"for i in $(seq {args.n}); do sbatch --parsable job.sh >/dev/null || exit 1; done"
    try:
        t_loop = timed(["bash", "-c", loop])
        sb.run_slurm(["scancel", "-u", user])
        t_ours = timed([sys.executable, "-m", "acbslurm", "submit", "job.yaml", "-n", str(args.n)])
    finally:
        sb.run_slurm(["scancel", "-u", user], check=False)
    r_loop, r_ours = args.n / t_loop, args.n / t_ours
    print(f"plain sbatch loop: {args.n} jobs in {t_loop:.2f} s = {r_loop:.1f} jobs/s")
    print(f"acbslurm submit -n {args.n}: {t_ours:.2f} s = {r_ours:.1f} jobs/s")
    print(
        f"ratio {r_ours / r_loop:.2f} (goal >= 0.5: {'met' if r_ours >= r_loop / 2 else 'MISSED'})"
    )


if __name__ == "__main__":
    main()
