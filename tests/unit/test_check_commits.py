"""scripts/check_commits.py on a real git repository in a temporary directory: the
subjects since the base are checked, main's own history is not, and with no base it
checks nothing and says so."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check_commits.py"
IDENTITY = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    git(tmp_path, "init", "-q", "-b", "main")
    return tmp_path


def git(where: Path, *args: str) -> str:
    r = subprocess.run(
        ["git", *args],
        cwd=where,
        env={**os.environ, **IDENTITY},
        capture_output=True,
        text=True,
        check=True,
    )
    return r.stdout


def commit(where: Path, message: str) -> None:
    git(where, "commit", "-q", "--allow-empty", "-m", message)


def check(where: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k != "ACBSLURM_COMMITS_BASE"}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=where,
        env={**clean, **IDENTITY, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_long_subject_since_main_fails_and_mains_own_history_does_not(repo: Path) -> None:
    commit(repo, "x" * 300)  # landed: main's history is not checked
    git(repo, "checkout", "-q", "-b", "work")
    commit(repo, "a" * 72 + "\n\nThe body may be as long as it needs to be. " * 5)
    r = check(repo)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 commits since main, every subject at most 72" in r.stdout
    commit(repo, "b" * 73)
    r = check(repo)
    assert r.returncode == 1
    assert "subject of 73 characters (at most 72)" in r.stdout
    assert "1 of 2 commits since main" in r.stderr


def test_origin_main_comes_before_main(
    repo: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    commit(repo, "landed")
    clone = tmp_path_factory.mktemp("clone")
    git(clone, "clone", "-q", str(repo), ".")
    commit(clone, "c" * 80)  # on the clone's main, not on origin/main
    r = check(clone)
    assert r.returncode == 1 and "since origin/main" in r.stderr, r.stdout + r.stderr


def test_a_base_given_is_used_and_one_that_names_nothing_is_refused(repo: Path) -> None:
    commit(repo, "first")
    first = git(repo, "rev-parse", "HEAD").strip()
    commit(repo, "d" * 90)  # on main: only a base given makes it count
    assert check(repo).returncode == 0
    assert check(repo, first).returncode == 1
    assert check(repo, ACBSLURM_COMMITS_BASE=first).returncode == 1
    r = check(repo, "no-such-ref")
    assert r.returncode == 2 and "'no-such-ref' names no commit" in r.stderr


def test_no_base_or_no_repository_checks_nothing_and_says_so(
    repo: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    git(repo, "checkout", "-q", "-b", "other")  # main is never born
    commit(repo, "e" * 90)
    r = check(repo)
    assert r.returncode == 0 and "no origin/main or main" in r.stdout, r.stdout + r.stderr
    git(repo, "checkout", "-q", "--orphan", "main")  # main apart from HEAD's history
    commit(repo, "landed elsewhere")
    git(repo, "checkout", "-q", "other")
    r = check(repo)
    assert r.returncode == 0 and "shares no history with main" in r.stdout, r.stdout + r.stderr
    r = check(tmp_path_factory.mktemp("plain"))
    assert r.returncode == 0 and "not a git repository" in r.stdout, r.stdout + r.stderr
