#!/usr/bin/env python3
"""Fail when a commit subject since the last landed main is over 72 characters.

`git log --oneline`, `git blame` and every tool that shows one line per commit show
the subject; its reasons belong in the body (CONTRIBUTING.md, "Commits"). Only the
commits not yet on main are checked: main's history is what it is.

The base is the first of these that names a commit:
- the argument (`check_commits.py BASE`) or ACBSLURM_COMMITS_BASE;
- RULE_SINCE: the main that had landed when the rule began (09ad841, stop 44). CI
  clones the main it tests, so its origin/main is HEAD and would check nothing; from
  this commit on every subject is checked, the landed ones too, which keeps them so;
- `origin/main`, then `main`: a history without RULE_SINCE (another repository).
The commits checked are `git log BASE..HEAD`: those HEAD has and BASE does not, so a
main that moved on since the branch began counts nothing of its own. With no git
repository, no base, or no history shared with the base (a shallow clone that stops
short of it would count main's own commits), it checks nothing and says so: a
tarball's build has no history to check.

Exit 0 when every subject fits, 1 when one does not (each named with its hash and
length), 2 for a base given that names no commit.
"""

from __future__ import annotations

import os
import subprocess
import sys

LIMIT = 72
RULE_SINCE = "09ad84161ed3e9d75aea70172d06350a7ef34bb3"
FALLBACKS = (RULE_SINCE, "origin/main", "main")


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=False)


def _commit(ref: str) -> str | None:
    r = _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    return r.stdout.strip() if r.returncode == 0 else None


def main(argv: list[str]) -> int:
    given = argv[0] if argv else os.environ.get("ACBSLURM_COMMITS_BASE", "")
    if _git("rev-parse", "--git-dir").returncode != 0:
        print("check_commits: not a git repository: no commits checked")
        return 0
    if given and _commit(given) is None:
        print(f"check_commits: the base {given!r} names no commit", file=sys.stderr)
        return 2
    base = given or next((ref for ref in FALLBACKS if _commit(ref)), "")
    if not base:
        print("check_commits: no origin/main or main to start from: no commits checked")
        return 0
    if _git("merge-base", base, "HEAD").returncode != 0:
        print(f"check_commits: HEAD shares no history with {base}: no commits checked")
        return 0
    log = _git("log", "--format=%h%x00%s", f"{base}..HEAD")
    if log.returncode != 0:
        print(f"check_commits: git log {base}..HEAD failed: {log.stderr.strip()}", file=sys.stderr)
        return 2
    commits = [line.split("\0", 1) for line in log.stdout.splitlines()]
    long = [(h, s) for h, s in commits if len(s) > LIMIT]
    for h, subject in long:
        print(f"{h}: subject of {len(subject)} characters (at most {LIMIT}): {subject[:LIMIT]}...")
    if long:
        print(
            f"check_commits: {len(long)} of {len(commits)} commits since {base} have a subject "
            f"over {LIMIT} characters: keep the subject short, the reasons in the body "
            "(git commit --amend, or git rebase -i to reword an older one)",
            file=sys.stderr,
        )
        return 1
    print(f"check_commits: {len(commits)} commits since {base}, every subject at most {LIMIT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
