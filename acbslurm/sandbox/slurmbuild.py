"""A Slurm release for the sandbox: found as a source tarball, built once, cached.

The cache is keyed by the tarball's SHA256 (checked against the SHA256SUMS beside it),
so a changed tarball is a new build and a second sandbox on the same release reuses the
first one's: ``<cache>/<release>-<sha256[:16]>/prefix`` holds the installation and
``build.json`` is written last, when the install is complete. A lock file keeps two
sandboxes from building the same release at once.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

from acbslurm import proc
from acbslurm.errors import SetupError
from acbslurm.sandbox.slurm import installed_release
from acbslurm.slurm.versions import DEBIAN_RELEASE, PYSLURM_FOR, SlurmInstall, major, parse_release

DEFAULT_CACHE = "/var/cache/acbslurm/slurm"
SOURCES_ENV = "ACBSLURM_SLURM_SOURCES"
CACHE_ENV = "ACBSLURM_SLURM_CACHE"
WHERE_TO_GET = (
    "SchedMD publishes release tarballs at https://download.schedmd.com/slurm/ "
    "(slurm-VERSION.tar.bz2) and the release tags at https://github.com/SchedMD/slurm"
)
# Besides Debian 12's compiler and libmariadb-dev (scripts/setup.sh installs those):
# what ./configure needs for slurmdbd's mysql plugin, munge, the REST and lua parts.
BUILD_PACKAGES = (
    "build-essential",
    "pkg-config",
    "bzip2",
    "python3",
    "libmariadb-dev",
    "libmunge-dev",
    "libjson-c-dev",
    "libhttp-parser-dev",
    "libpam0g-dev",
    "liblua5.3-dev",
    "libhwloc-dev",
    "libdbus-1-dev",
    "libjwt-dev",
    "liblz4-dev",
    "libcurl4-openssl-dev",
    "libbpf-dev",
    "libyaml-dev",
)

Progress = Callable[[str], None]
_BUILD_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "HOME": "/root"}


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)


def tarball_name(release: str) -> str:
    return f"slurm-{release}.tar.bz2"


def find_source(release: str, source: str | None = None) -> Path:
    """The tarball of ``release``: ``--slurm-source`` or ``$ACBSLURM_SLURM_SOURCES/...``."""
    parse_release(release)
    if source:
        path = Path(source)
        if not path.is_file():
            raise SetupError(f"--slurm-source {source}: no such file")
        return path.resolve()
    tried = []
    sources = os.environ.get(SOURCES_ENV, "")
    for d in filter(None, sources.split(os.pathsep)):
        candidate = Path(d) / tarball_name(release)
        if candidate.is_file():
            return candidate.resolve()
        tried.append(str(candidate))
    where = f"looked for {', '.join(tried)}" if tried else f"{SOURCES_ENV} is not set"
    raise SetupError(
        f"no source for Slurm {release} ({where}); put {tarball_name(release)} (and its "
        f"SHA256SUMS line) in a directory named by {SOURCES_ENV}, or pass "
        f"--slurm-source FILE. {WHERE_TO_GET}"
    )


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def expected_sha256(tarball: Path) -> str | None:
    """The tarball's line in the SHA256SUMS beside it (None: no SHA256SUMS there)."""
    sums = tarball.parent / "SHA256SUMS"
    if not sums.is_file():
        return None
    for line in sums.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("*") == tarball.name:
            return parts[0].lower()
    raise SetupError(f"{sums} has no line for {tarball.name}")


def checked_sha256(tarball: Path) -> str:
    actual = sha256_of(tarball)
    want = expected_sha256(tarball)
    if want is not None and want != actual:
        raise SetupError(
            f"{tarball}: SHA256 {actual} does not match SHA256SUMS ({want}); "
            "the tarball is damaged or not the release it names"
        )
    return actual


# ./configure's options besides the prefix. --enable-multiple-slurmd: the sandbox's
# `up --nodes N` runs N slurmd on one machine, and without it every slurmd puts its jobs'
# cgroups under the same /sys/fs/cgroup/<controller>/slurm/ (cgroup.conf has no key for
# it; src/interfaces/cgroup.c), so that one node's step cleanup (proctrack/cgroup kills
# every task of a step's cgroup) would reach another node's step of the same job: with it
# each node has slurm_<node>/, as Debian's 22.05 package (built with it) has. It also
# lets a slurmd accept a launch credential another node's slurmd already decoded.
CONFIGURE_OPTIONS = ("--with-mysql_config=/usr/bin", "--disable-static", "--enable-multiple-slurmd")


def cache_key(release: str, sha256: str) -> str:
    """The cache entry of a build: the tarball, and (a short hash of) the configure
    options, so that a build made with other options is not taken for this one."""
    opts = hashlib.sha256(" ".join(CONFIGURE_OPTIONS).encode()).hexdigest()[:8]
    return f"{release}-{sha256[:16]}-{opts}"


def missing_build_packages() -> list[str]:
    out = proc.run(
        ["dpkg-query", "-W", "-f", "${Package} ${Status}\n", *BUILD_PACKAGES],
        check=False,
        timeout=30,
    ).stdout
    installed = {ln.split()[0] for ln in out.splitlines() if ln.endswith("install ok installed")}
    return [p for p in BUILD_PACKAGES if p not in installed]


def install_build_packages(progress: Progress) -> None:
    missing = missing_build_packages()
    if not missing:
        return
    progress(f"installing build dependencies: {' '.join(missing)}")
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive"}
    argv = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing]
    if proc.run(argv, env=env, check=False, timeout=900).returncode != 0:
        proc.run(["apt-get", "update", "-q"], env=env, timeout=600)
        proc.run(argv, env=env, timeout=900)


def built(release: str, sha256: str) -> SlurmInstall | None:
    """The cached build, if complete."""
    entry = cache_dir() / cache_key(release, sha256)
    stamp = entry / "build.json"
    if not stamp.is_file():
        return None
    return SlurmInstall(prefix=str(entry / "prefix"), release=release)


def ensure_built(release: str, source: str | None, progress: Progress) -> SlurmInstall:
    """Slurm ``release`` installed in the cache (built now if it is not there yet)."""
    tarball = find_source(release, source)
    sha = checked_sha256(tarball)
    done = built(release, sha)
    if done:
        return done
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    key = cache_key(release, sha)
    with (root / f"{key}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another sandbox may be building it now
        done = built(release, sha)
        if done:
            return done
        install_build_packages(progress)
        return _build(release, tarball, sha, root / key, progress)


def _build(release: str, tarball: Path, sha: str, entry: Path, progress: Progress) -> SlurmInstall:
    prefix = entry / "prefix"
    work = entry.with_name(entry.name + ".build")
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(entry, ignore_errors=True)
    work.mkdir(parents=True)
    jobs = str(os.cpu_count() or 2)
    log = work / "build.log"
    times: dict[str, float] = {}
    src = work / f"slurm-{release}"
    steps: list[tuple[str, list[str], Path]] = [
        ("unpack", ["tar", "-xjf", str(tarball), "-C", str(work)], work),
        (
            "configure",
            [
                "./configure",
                f"--prefix={prefix}",
                f"--sysconfdir={prefix}/etc",
                *CONFIGURE_OPTIONS,
            ],
            src,
        ),
        ("make", ["make", f"-j{jobs}"], src),
        ("install", ["make", "install"], src),
    ]
    progress(f"building Slurm {release} from {tarball} into {prefix} (make -j{jobs})")
    for name, argv, cwd in steps:
        t = time.monotonic()
        res = proc.run(argv, cwd=str(cwd), check=False, timeout=3600, env=_BUILD_ENV)
        with log.open("a") as out:
            out.write(f"\n### {name}: {' '.join(argv)}\n{res.stdout}{res.stderr}")
        times[name] = round(time.monotonic() - t, 1)
        if res.returncode != 0:
            tail = "\n".join(res.stderr.strip().splitlines()[-5:])
            raise SetupError(
                f"building Slurm {release} failed at {name} (exit {res.returncode}); "
                f"see {log}\n{tail}"
            )
        progress(f"slurm {release} {name}: ok ({times[name]:.0f} s)")
    if not (prefix / "lib" / "slurm" / "accounting_storage_mysql.so").exists():
        raise SetupError(
            f"Slurm {release} was built without accounting_storage/mysql (slurmdbd needs "
            f"it): is libmariadb-dev installed? see {log}"
        )
    stamp = {"release": release, "sha256": sha, "source": str(tarball), "seconds": times}
    (entry / "build.json").write_text(json.dumps(stamp, indent=2) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return SlurmInstall(prefix=str(prefix), release=release)


def release_of_tarball(path: str) -> str:
    name = Path(path).name
    if not (name.startswith("slurm-") and name.endswith(".tar.bz2")):
        raise SetupError(f"--slurm-source {path}: expected a file named slurm-VERSION.tar.bz2")
    release = name.removeprefix("slurm-").removesuffix(".tar.bz2")
    parse_release(release)
    return release


def choose_install(
    release: str | None, prefix: str | None, source: str | None, progress: Progress
) -> SlurmInstall | None:
    """The Slurm that `sandbox up` was asked for (None: nothing asked, keep the last).

    ``--slurm debian`` (or Debian's release) is the packaged 22.05; ``--slurm-prefix``
    an existing installation; any other ``--slurm VERSION`` is built from source once.
    """
    if prefix:
        return _prefix_install(prefix, release)
    if not release and source:
        release = release_of_tarball(source)
    if not release:
        return None
    if release == "debian" or release in (DEBIAN_RELEASE, major(DEBIAN_RELEASE)):
        if source:
            raise SetupError(f"--slurm-source: Slurm {release} is Debian's package, not built")
        return SlurmInstall()
    return ensure_built(release, source, progress)


def _prefix_install(prefix: str, release: str | None) -> SlurmInstall:
    """``--slurm-prefix``: the Slurm installed there (of the ``--slurm`` release, if given)."""
    found = installed_release(prefix)
    if release and release != "debian" and major(release) != major(found):
        raise SetupError(f"--slurm {release} but {prefix} holds Slurm {found}")
    return SlurmInstall(prefix=str(Path(prefix).resolve()), release=found)


def pyslurm_dir(install: SlurmInstall) -> Path:
    """Where the pyslurm built for a cached Slurm build lives (beside its prefix)."""
    return Path(install.prefix).parent / "pyslurm"


def ensure_pyslurm(install: SlurmInstall, progress: Progress) -> Path:
    """pyslurm built against ``install`` (once; ``pip install --target``): the directory
    to put on PYTHONPATH. ``SLURM_INCLUDE_DIR``/``SLURM_LIB_DIR`` point its build at
    this Slurm's headers and libslurm, as a site does for its own Slurm."""
    want = PYSLURM_FOR.get(major(install.release))
    if want is None:
        raise SetupError(f"no pyslurm release is known to build against Slurm {install.release}")
    target = pyslurm_dir(install)
    stamp = target / ".acbslurm-built"
    if stamp.is_file() and stamp.read_text().strip() == want:
        return target
    with (target.parent / "pyslurm.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.is_file() and stamp.read_text().strip() == want:
            return target
        shutil.rmtree(target, ignore_errors=True)
        progress(f"building pyslurm {want} against Slurm {install.release} (minutes)")
        t = time.monotonic()
        env = {
            **_BUILD_ENV,
            "SLURM_INCLUDE_DIR": install.include_dir,
            "SLURM_LIB_DIR": install.lib_dir,
        }
        # --no-cache-dir: a wheel pip cached from another Slurm build must not be reused.
        argv = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-cache-dir",
                "--target", str(target), f"pyslurm=={want}"]  # fmt: skip
        res = proc.run(argv, env=env, check=False, timeout=3600)
        if res.returncode != 0:
            tail = "\n".join(res.stderr.strip().splitlines()[-5:])
            raise SetupError(f"building pyslurm {want} failed (exit {res.returncode})\n{tail}")
        stamp.write_text(want + "\n")
        progress(f"pyslurm {want}: ok ({time.monotonic() - t:.0f} s)")
    return target
