"""A newer Docker for the sandbox: Debian's packages of a later suite, fetched once.

The host's /etc/apt is never changed: a private apt configuration under the cache
(``<cache>/<version>/apt``) lists the suite, and ``apt-get download`` fetches the exact
package versions of dockerversions.OFFERED, each checked against the SHA256 of the
suite's signed index. They are unpacked into ``<cache>/<version>/<key>/prefix``, where
``key`` is the SHA256 of the package list with versions and checksums;
``manifest.json`` is written last, when the prefix is complete. A later sandbox on the
same version finds the manifest and fetches nothing. A lock keeps two sandboxes from
fetching at once.

The suites' Go programs run on bookworm as they are; runc is linked against the
suite's glibc (2.38 or later, bookworm has 2.36), so it gets that libc, unpacked into the
prefix too, as its ELF interpreter and run path (patchelf, bookworm's, in the cache).
runc re-executes itself through /proc/self/exe, so a wrapper running it through the
dynamic loader would not do.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from acbslurm import proc
from acbslurm.errors import SetupError
from acbslurm.sandbox.dockerversions import OFFERED, DockerInstall, Release, offered

DEFAULT_CACHE = "/var/cache/acbslurm/docker"
CACHE_ENV = "ACBSLURM_DOCKER_CACHE"
MIRROR = "http://deb.debian.org/debian"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
# bookworm's patchelf, from the same private index (the host's apt is left alone).
PATCHELF = ("patchelf", "0.14.3-1+b1")
LIBDIR = "usr/lib/x86_64-linux-gnu"
SMOKE = ("usr/sbin/dockerd", "usr/bin/docker", "usr/bin/containerd", "usr/sbin/runc",
         "usr/bin/rootlesskit")  # fmt: skip

Progress = Callable[[str], None]
_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "HOME": "/root"}


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)


def release_of(version: str) -> Release:
    rel = OFFERED.get(version)
    if rel is None:
        raise SetupError(f"Docker {version} is not offered (offered: {', '.join(offered())})")
    return rel


def fetched(version: str) -> DockerInstall | None:
    """A complete cached prefix of ``version`` with exactly the pinned packages."""
    want = [list(p) for p in release_of(version).packages]
    for manifest in sorted((cache_dir() / version).glob("*/manifest.json")):
        try:
            data = json.loads(manifest.read_text())
        except (OSError, ValueError):
            continue
        if [[p["name"], p["version"]] for p in data.get("packages", [])] == want:
            return DockerInstall(version=version, prefix=str(manifest.parent / "prefix"))
    return None


def ensure_fetched(version: str, progress: Progress) -> DockerInstall:
    """Docker ``version`` ready to run: the host's (20.10) or fetched once into the cache."""
    if version == DockerInstall().version:
        return DockerInstall()
    rel = release_of(version)
    done = fetched(version)
    if done:
        return done
    root = cache_dir() / version
    root.mkdir(parents=True, exist_ok=True)
    with (root / "fetch.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another sandbox may be fetching it now
        done = fetched(version)
        if done:
            return done
        return _fetch(version, rel, root, progress)


def _apt_setup(apt: Path, suite: str) -> list[str]:
    """apt's options for the private configuration under ``apt``, its lists updated."""
    for d in ("lists/partial", "cache/archives/partial"):
        (apt / d).mkdir(parents=True, exist_ok=True)
    (apt / "status").touch()
    lines = [f"deb [signed-by={KEYRING}] {MIRROR} {s} main" for s in (suite, "bookworm")]
    (apt / "sources.list").write_text("\n".join(lines) + "\n")
    opts = [
        f"-oDir::Etc::sourcelist={apt / 'sources.list'}",
        "-oDir::Etc::sourceparts=-",
        f"-oDir::State::Lists={apt / 'lists'}",
        f"-oDir::Cache={apt / 'cache'}",
        f"-oDir::State::status={apt / 'status'}",
        "-oAPT::Sandbox::User=root",  # downloads into root's cache, not _apt's
        "-q",
    ]
    _run(["apt-get", *opts, "update"], f"apt-get update ({suite}, private lists in {apt})")
    return opts


def _run(argv: list[str], what: str, cwd: Path | None = None) -> str:
    res = proc.run(argv, check=False, timeout=900, env=_ENV, cwd=str(cwd) if cwd else None)
    if res.returncode != 0:
        tail = "\n".join((res.stderr or res.stdout).strip().splitlines()[-5:])
        raise SetupError(f"fetching Docker failed at {what} (exit {res.returncode})\n{tail}")
    return res.stdout


def _download(opts: list[str], name: str, version: str, debs: Path) -> dict[str, str]:
    """One package, fetched and checked; its manifest entry."""
    out = _run(["apt-cache", *opts, "show", f"{name}={version}"], f"apt-cache show {name}")
    sums = [line.split()[1].lower() for line in out.splitlines() if line.startswith("SHA256:")]
    if not sums:
        raise SetupError(f"the index has no SHA256 for {name} {version}")
    want = sums[0]
    _run(["apt-get", *opts, "download", f"{name}={version}"], f"download {name}", debs)
    found: list[Path] = []
    for deb in debs.glob(f"{name}_*.deb"):
        with deb.open("rb") as f:
            if hashlib.file_digest(f, "sha256").hexdigest() == want:
                found.append(deb)
    if not found:
        raise SetupError(f"{name} {version}: no downloaded .deb has the index's SHA256 {want}")
    return {"name": name, "version": version, "sha256": want, "file": found[0].name}


def _fetch(version: str, rel: Release, root: Path, progress: Progress) -> DockerInstall:
    t0 = time.monotonic()
    debs = root / "debs"
    shutil.rmtree(debs, ignore_errors=True)
    debs.mkdir(parents=True)
    progress(f"fetching Docker {version} (Debian {rel.suite}) into {root}")
    opts = _apt_setup(root / "apt", rel.suite)
    entries = [_download(opts, n, v, debs) for n, v in rel.packages]
    tool = _download(opts, *PATCHELF, debs)
    listing = json.dumps([[e["name"], e["version"], e["sha256"]] for e in entries])
    # Unpacked where it stays: the relinked runc names its libc by absolute path.
    entry = root / hashlib.sha256(listing.encode()).hexdigest()[:16]
    shutil.rmtree(entry, ignore_errors=True)
    prefix, tools = entry / "prefix", entry / "tools"
    prefix.mkdir(parents=True)
    tools.mkdir()
    for e in entries:
        _run(["dpkg-deb", "-x", str(debs / e["file"]), str(prefix)], f"unpack {e['name']}")
    _run(["dpkg-deb", "-x", str(debs / tool["file"]), str(tools)], "unpack patchelf")
    libdir = prefix / LIBDIR
    for program in rel.relink:
        argv = [str(tools / "usr/bin/patchelf"), "--set-interpreter",
                str(libdir / "ld-linux-x86-64.so.2"), "--set-rpath", str(libdir),
                str(prefix / program)]  # fmt: skip
        _run(argv, f"patchelf {program}")
    # Each program starts on this host (a missing library shows here, not in dockerd).
    for program in SMOKE:
        _run([str(prefix / program), "--version"], f"{program} --version")
    shutil.rmtree(debs)  # the prefix is what runs; the index checksums stay recorded
    seconds = round(time.monotonic() - t0, 1)
    manifest = {"version": version, "suite": rel.suite, "packages": entries, "tool": tool,
                "relinked": list(rel.relink), "seconds": seconds}  # fmt: skip
    (entry / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    progress(f"Docker {version}: fetched into {entry} ({seconds:.0f} s)")
    return DockerInstall(version=version, prefix=str(prefix))
