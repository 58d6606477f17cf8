"""An image with Python and CPU torch for the sandbox's multi-node tests.

Its root file system is Debian 12's (debootstrap, minbase, with python3: the same
Python 3.11 as the vLLM environment's) with torch and what it imports copied from the
checkout's vLLM environment (``.venv-vllm``, whose torch is the CPU build). Built once
into ``/var/cache/acbslurm/images`` (ACBSLURM_IMAGE_CACHE) beside the Slurm and Docker
builds, keyed by the recipe and torch's version, and imported into a daemon when it
lacks it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from acbslurm import proc
from acbslurm.errors import SetupError
from acbslurm.sandbox import docker
from acbslurm.sandbox.dockerbuild import MIRROR
from acbslurm.sandbox.layout import Layout

DEFAULT_CACHE = "/var/cache/acbslurm/images"
CACHE_ENV = "ACBSLURM_IMAGE_CACHE"
SUITE = "bookworm"
# Bumped when the recipe changes, so that a cached root file system is rebuilt.
RECIPE = "1"
_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "HOME": "/root"}
SITE = "usr/local/lib/python3.11/dist-packages"

# Run by the vLLM environment's python: torch's distribution and those it requires
# (not its extras, not setuptools), as paths under site-packages.
_LIST_FILES = r"""
import importlib.metadata as m, json, re
want, seen = ["torch"], {}
while want:
    name = want.pop()
    key = re.sub(r"[-_.]+", "-", name).lower()
    if key in seen or key == "setuptools":
        continue
    try:
        d = m.distribution(name)
    except m.PackageNotFoundError:
        continue
    seen[key] = d
    want += [re.split(r"[ ;<>=!~\[]", r, maxsplit=1)[0] for r in d.requires or []
             if "extra ==" not in r]
files = [str(d.locate_file(f)) for d in seen.values() for f in d.files or []]
print(json.dumps({"torch": seen["torch"].version,
                  "files": [f.split("/site-packages/", 1)[1] for f in files
                            if "/site-packages/" in f and "__pycache__" not in f]}))
"""


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)


def vllm_python() -> Path:
    """The vLLM environment's python (ACBSLURM_VLLM_PYTHON, else the checkout's)."""
    env = os.environ.get("ACBSLURM_VLLM_PYTHON")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / ".venv-vllm" / "bin" / "python"


def image_name(torch_version: str) -> str:
    """``acbslurm/torch:2.13.0-cpu``: the tag says which torch it holds."""
    return f"acbslurm/torch:{torch_version.replace('+', '-')}"


def _key(torch_version: str) -> str:
    text = f"{RECIPE} {SUITE} python3 {torch_version}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _run(argv: list[str], what: str, timeout: float = 900) -> None:
    res = proc.run(argv, check=False, timeout=timeout, env=_ENV)
    if res.returncode != 0:
        tail = "\n".join((res.stderr or res.stdout).strip().splitlines()[-5:])
        raise SetupError(
            f"building the torch image failed at {what} (exit {res.returncode})\n{tail}"
        )


def _build(dest: Path, files: list[str], site: Path) -> None:
    """The root file system's tar at ``dest``."""
    work = dest.with_name(dest.name + f".tmp-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    rootfs = work / "rootfs"
    try:
        _run(
            ["debootstrap", "--variant=minbase", "--include=python3", SUITE, str(rootfs), MIRROR],
            f"debootstrap {SUITE} (from {MIRROR})",
        )
        for d in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for f in (rootfs / d).glob("*"):
                if f.is_file():
                    f.unlink()
        target = rootfs / SITE
        for rel in files:
            src, dst = site / rel, target / rel
            if src.is_file():
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)
        _run(
            [
                "chroot",
                str(rootfs),
                "python3",
                "-c",
                "import torch.distributed as d; assert d.is_gloo_available()",
            ],
            "the check that torch imports inside the image, with gloo",
            timeout=300,
        )
        _run(
            ["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(work / "rootfs.tar"), "."],
            "tar",
        )
        (work / "rootfs.tar").replace(dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def ensure_rootfs(progress: Callable[[str], None] = print) -> tuple[str, Path]:
    """The image's name and its root file system's tar, built if not cached."""
    # torch's version, its files and the site-packages they are under
    python = vllm_python()
    if not python.exists():
        raise SetupError(
            f"no vLLM environment at {python} to take CPU torch from; run `make setup` "
            "(scripts/setup_vllm.sh)"
        )
    data = json.loads(proc.run([str(python), "-c", _LIST_FILES], timeout=120).stdout)
    torch_version, files = str(data["torch"]), list(data["files"])
    site = Path(
        proc.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            timeout=60,
        ).stdout.strip()
    )
    root = cache_dir() / f"torch-{_key(torch_version)}"
    root.mkdir(parents=True, exist_ok=True)
    tar = root / "rootfs.tar"
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two builders on one machine wait for one build
        if not tar.exists():
            progress(f"building the torch image's root file system into {root} (a minute or two)")
            _build(tar, files, site)
    return image_name(torch_version), tar


def import_into(layout: Layout, user: str, host: str, name: str, tar: Path) -> None:
    """``docker import`` the root file system as ``name`` into ``user``'s daemon at
    ``host`` unless it has it."""
    if docker.has_image(layout, user, name, host):
        return
    env_path = "ENV PATH=/usr/local/bin:/usr/bin:/bin"
    change = ["--change", env_path, "--change", 'CMD ["python3"]']
    docker.docker(layout, user, "import", *change, str(tar), name, timeout=600, host=host)
