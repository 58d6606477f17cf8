"""Build dist/acbslurm_<version>_all.deb from a checkout (`make deb`).

    .venv/bin/python scripts/build_deb.py [--source DIR] [--out DIR] [--version V]

No compiler at install time: the package Depends on Debian 12's binary packages
(python3-click, -jinja2, -yaml, -mysqldb, -grpcio, -protobuf) and carries the one
pure-Python dependency Debian lacks (nvidia-ml-py's pynvml) under
/usr/lib/acbslurm/vendor. acbslurm itself is the wheel of the checkout (the same
files pip users get), unpacked into /usr/lib/acbslurm, a private folder: agarun puts
acbslurm's folder on a user program's PYTHONPATH, which must not bring all of
dist-packages along. The broker's gRPC code is generated again here with Debian's
protoc and grpc plugin (protobuf-compiler, protobuf-compiler-grpc), for Debian's
python3-grpcio 1.51 and python3-protobuf 3.21: the checkout's is generated for grpcio
1.85 and protobuf 7 and refuses older runtimes.

--source builds another tree (scripts/deb_upgrade_check.py builds the previous
commit's package with it): the packaging files (debian/, conf/) come from that tree
when it has them, else from this one. Needs dpkg-deb, protoc and grpc_python_plugin
(installed with apt when missing and run as root), pip's cache or PyPI for the
vendored wheel.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
LIB = "usr/lib/acbslurm"
# Pure-Python wheels Debian 12 lacks, pinned: the package carries them.
VENDORED = ("nvidia-ml-py==13.615.71",)
# setup.cfg's console_scripts: where the package puts each (tests/unit/test_deb.py
# checks the two lists agree).
ENTRY_POINTS = {
    "usr/bin/acbslurm": "acbslurm.cli.entry:main",
    "usr/bin/agarun": "acbslurm.broker.agarun:main",
    "usr/libexec/acbslurm/acbslurm-prolog": "acbslurm.hooks.prolog:prolog_main",
    "usr/libexec/acbslurm/acbslurm-epilog": "acbslurm.hooks.epilog:epilog_main",
    "usr/libexec/acbslurm/acbslurm-task-prolog": "acbslurm.hooks.task_prolog:task_prolog_main",
}
DEPENDS = (
    "python3 (>= 3.11~)",
    "python3-click (>= 8.1)",
    "python3-jinja2 (>= 3.1)",
    "python3-yaml (>= 6.0)",
    "python3-mysqldb (>= 1.4.6)",
    "python3-grpcio (>= 1.51)",
    "python3-protobuf (>= 3.21)",
)
BUILD_TOOLS = {"protoc": "protobuf-compiler", "grpc_python_plugin": "protobuf-compiler-grpc"}
# A hook is a Python file slurmd runs as root: -I (no PYTHON* variables, no user site,
# not the script's folder) keeps what is imported to the package's own folders.
# While dpkg replaces the package's files (from the new release's preinst to its
# postinst, a few seconds) a hook or command would import some modules of each release:
# it waits for the whole new one instead, 20 s at most (slurm.conf's
# PrologEpilogTimeout is 60), and a flag older than 10 minutes (an upgrade that died)
# is ignored. The flag's folder is root's alone: no user can make hooks wait.
UPGRADE_FLAG = "/run/acbslurm/.upgrading"
SCRIPT = """#!/usr/bin/python3 -I
# acbslurm {version} (Debian package): {func} of {module}.
import os
import sys
import time

_end = time.monotonic() + 20
while time.monotonic() < _end:
    try:
        if os.stat("{flag}").st_mtime < time.time() - 600:
            break
    except OSError:
        break
    time.sleep(0.05)
sys.path.insert(0, "/{lib}")
from {module} import {func}  # noqa: E402

sys.exit({func}())
"""
# Appended to the packaged acbslurm/__init__.py: every process that imports acbslurm
# from /usr/lib/acbslurm (the hooks, the cgroup helper, agarun's program, the OCI
# runtime) finds the vendored wheels, after Debian's own packages.
VENDOR_PATH = """

# Debian package: the pure-Python dependencies Debian lacks (scripts/build_deb.py).
import sys as _sys

if "/{lib}/vendor" not in _sys.path:
    _sys.path.append("/{lib}/vendor")
del _sys
"""


def log(msg: str) -> None:
    print(f"build-deb: {msg}", file=sys.stderr, flush=True)


def run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=True, text=True, **kw)  # type: ignore[call-overload,no-any-return]


def git_version(src: Path, base: str) -> str:
    """``0.1.0+git<commits>.<hash>``: dpkg orders builds of one branch by their count."""
    try:
        count = run(["git", "-C", str(src), "rev-list", "--count", "HEAD"], capture_output=True)
        sha = run(["git", "-C", str(src), "rev-parse", "--short=7", "HEAD"], capture_output=True)
    except (subprocess.CalledProcessError, FileNotFoundError):
        return base
    return f"{base}+git{count.stdout.strip()}.{sha.stdout.strip()}"


def source_version(src: Path) -> str:
    for line in (src / "acbslurm" / "__init__.py").read_text().splitlines():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip("\"'")
    raise SystemExit(f"build-deb: no __version__ in {src}/acbslurm/__init__.py")


def ensure_tools() -> None:
    missing = [pkg for tool, pkg in BUILD_TOOLS.items() if shutil.which(tool) is None]
    if shutil.which("dpkg-deb") is None:
        missing.append("dpkg")
    if not missing:
        return
    if os.geteuid() != 0:
        raise SystemExit(f"build-deb: install {' '.join(missing)} (apt-get install) first")
    log(f"installing {' '.join(missing)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing], env=env)


def build_wheel(src: Path, tmp: Path) -> Path:
    out = tmp / "wheel"
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "--disable-pip-version-check", "-w", str(out), str(src)],
        cwd=tmp,
    )  # fmt: skip
    # setuptools leaves build/ in the source tree; the next build must not reuse it.
    shutil.rmtree(src / "build", ignore_errors=True)
    return next(out.glob("acbslurm-*.whl"))


def unpack_acbslurm(wheel: Path, lib: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name.startswith("acbslurm/"):
                z.extract(name, lib)
    init = lib / "acbslurm" / "__init__.py"
    init.write_text(init.read_text() + VENDOR_PATH.format(lib=LIB))


def debian_grpc_code(src: Path, lib: Path, tmp: Path) -> None:
    """broker_pb2.py and broker_pb2_grpc.py for Debian's protobuf 3.21 and grpcio 1.51."""
    out = tmp / "proto"
    out.mkdir()
    run(
        ["protoc", f"-I{src}", f"--python_out={out}", f"--grpc_python_out={out}",
         "--plugin=protoc-gen-grpc_python=" + str(shutil.which("grpc_python_plugin")),
         "acbslurm/broker/broker.proto"],
    )  # fmt: skip
    gen = lib / "acbslurm" / "broker" / "_generated"
    shutil.copy(out / "acbslurm/broker/broker_pb2.py", gen / "broker_pb2.py")
    grpc_code = (out / "acbslurm/broker/broker_pb2_grpc.py").read_text()
    grpc_code = grpc_code.replace(
        "from acbslurm.broker import broker_pb2 as",
        "from acbslurm.broker._generated import broker_pb2 as",
    )
    (gen / "broker_pb2_grpc.py").write_text(grpc_code)


def vendor(lib: Path, doc: Path, tmp: Path) -> None:
    wheels = tmp / "vendor-wheels"
    run(
        [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
         "--no-deps", "--only-binary=:all:", "--python-version", "3.11", "-d", str(wheels),
         *VENDORED],
    )  # fmt: skip
    target = lib / "vendor"
    target.mkdir()
    for whl in sorted(wheels.glob("*.whl")):
        if not whl.name.endswith("-py3-none-any.whl"):
            raise SystemExit(f"build-deb: {whl.name} is not pure Python; it cannot be vendored")
        with zipfile.ZipFile(whl) as z:
            z.extractall(target)
    shutil.rmtree(target / "__pycache__", ignore_errors=True)
    (target / "example.py").unlink(missing_ok=True)  # nvidia-ml-py's demo, not a module
    (doc / "vendor.txt").write_text(
        "Carried under /usr/lib/acbslurm/vendor (their licences: copyright):\n"
        + "".join(f"  {w.name}\n" for w in sorted(wheels.glob("*.whl")))
    )


def write_scripts(root: Path, version: str) -> None:
    for rel, target in ENTRY_POINTS.items():
        module, func = target.split(":")
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        text = SCRIPT.format(version=version, module=module, func=func, lib=LIB, flag=UPGRADE_FLAG)
        path.write_text(text)
        path.chmod(0o755)
    # acbslurm's OCI runtime for users' daemons (`acbslurm install-runtime` writes the
    # same for a venv): a file of the package, so an upgrade replaces it in place.
    # In a child, from the package's own tree: importing it here would put a second
    # acbslurm beside the caller's (a test's) in sys.modules.
    runc = root / "usr/libexec/acbslurm/acbslurm-runc"
    code = (
        "import sys; from acbslurm.cgroups.runtime import script; "
        "sys.stdout.write(script(sys.argv[1], sys.argv[2]))"
    )
    env = {**os.environ, "PYTHONPATH": str(root / LIB)}
    out = subprocess.run(
        [sys.executable, "-c", code, "/usr/bin/python3", f"/{LIB}"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    runc.write_text(out)
    runc.chmod(0o755)


def completion(root: Path) -> None:
    """click's bash completion script for `acbslurm`."""
    env = {**os.environ, "_ACBSLURM_COMPLETE": "bash_source", "PYTHONPATH": str(root / LIB)}
    code = "import sys; sys.argv[0] = 'acbslurm'; from acbslurm.cli.entry import main; main()"
    res = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    if "complete" not in res.stdout:
        raise SystemExit(f"build-deb: no bash completion from click: {res.stderr.strip()}")
    path = root / "usr/share/bash-completion/completions/acbslurm"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(res.stdout)


def debian_dir(src: Path) -> Path:
    """debian/ of the source tree, else of this checkout (an older tree has none)."""
    return src / "debian" if (src / "debian").is_dir() else HERE / "debian"


def package_paths(text: str) -> str:
    """The venv paths of the admin guide's examples, as the package has them."""
    text = text.replace("/opt/acbslurm/bin/acbslurm-", "/usr/libexec/acbslurm/acbslurm-")
    text = text.replace("/opt/acbslurm/venv/bin/acbslurm", "/usr/bin/acbslurm")
    return text.replace("/opt/acbslurm/bin/acbslurm", "/usr/bin/acbslurm")


def system_files(src: Path, root: Path) -> None:
    conf = src / "conf"
    deb = debian_dir(src)
    etc = root / "etc/acbslurm"
    etc.mkdir(parents=True)
    settings = package_paths((conf / "slurm/acbslurm.yaml.example").read_text())
    (etc / "acbslurm.yaml").write_text(settings)
    units = root / "usr/lib/systemd/system"
    units.mkdir(parents=True)
    for unit in sorted((conf / "systemd").glob("*.service")):
        (units / unit.name).write_text(package_paths(unit.read_text()))
    tmpfiles = root / "usr/lib/tmpfiles.d"
    tmpfiles.mkdir(parents=True)
    line = conf / "tmpfiles.d/acbslurm.conf"
    shutil.copy(line if line.is_file() else HERE / "conf/tmpfiles.d/acbslurm.conf", tmpfiles)
    doc = root / "usr/share/doc/acbslurm"
    shutil.copytree(conf / "examples", doc / "examples")
    for f in (*sorted((conf / "slurm").iterdir()), conf / "report-db.example.cnf"):
        shutil.copy(f, doc / f.name)
    shutil.copy(
        conf / "nvidia-container-toolkit/config.toml", doc / "nvidia-container-toolkit.toml"
    )
    # The copies name the package's paths, as does the conf/ `acbslurm doctor` points at.
    for f in [*doc.iterdir(), *(root / LIB / "acbslurm/conf").rglob("*")]:
        if f.is_file() and f.suffix not in (".gz",):
            f.write_text(package_paths(f.read_text()))
    shutil.copy(deb / "copyright", doc / "copyright")
    with gzip.GzipFile(doc / "README.md.gz", "wb", mtime=0) as gz:
        gz.write((src / "README.md").read_bytes())


def control(src: Path, root: Path, version: str) -> None:
    deb = debian_dir(src)
    meta = root / "DEBIAN"
    meta.mkdir()
    size_kb = sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) // 1024 + 1
    fields = {
        "Package": "acbslurm",
        "Version": version,
        "Architecture": "all",
        # Debian's variables for who builds a package; the default names nobody real.
        "Maintainer": f"{os.environ.get('DEBFULLNAME', 'acbslurm build')} "
        f"<{os.environ.get('DEBEMAIL', 'root@localhost')}>",
        "Installed-Size": str(size_kb),
        "Depends": ", ".join(DEPENDS),
        "Suggests": "slurmd, slurmctld, rootlesskit, uidmap, docker.io, nvidia-container-toolkit",
        "Section": "admin",
        "Priority": "optional",
        "Description": "Slurm GPU jobs in rootless Docker, GPU accounting reports, a GPU broker\n"
        " Slurm prolog/epilog hooks that map a job's GPUs to UUIDs and sweep its\n"
        " containers, `acbslurm run` into the user's rootless Docker with exactly\n"
        " the job's GPUs, `acbslurm report` of GPU usage from slurmdbd's database,\n"
        " and a GPU broker (agarun). The hooks are in /usr/libexec/acbslurm;\n"
        " `acbslurm serve` (model pools) needs a venv with its extras.",
    }
    (meta / "control").write_text("".join(f"{k}: {v}\n" for k, v in fields.items()))
    (meta / "conffiles").write_text("/etc/acbslurm/acbslurm.yaml\n")
    for name in ("preinst", "postinst", "prerm", "postrm"):
        shutil.copy(deb / name, meta / name)
        (meta / name).chmod(0o755)


def normalise(root: Path) -> None:
    for p in root.rglob("*"):
        if p.is_symlink():
            continue
        if p.is_dir():
            p.chmod(0o755)
        elif not os.access(p, os.X_OK):
            p.chmod(0o644)
        else:
            p.chmod(0o755)
    for junk in root.rglob("__pycache__"):
        shutil.rmtree(junk)


def build(src: Path, out: Path, version: str | None) -> Path:
    ensure_tools()
    version = version or git_version(src, source_version(src))
    with tempfile.TemporaryDirectory(prefix="acbslurm-deb.") as t:
        tmp = Path(t)
        root = tmp / "root"
        lib = root / LIB
        doc = root / "usr/share/doc/acbslurm"
        lib.mkdir(parents=True)
        doc.mkdir(parents=True)
        log(f"acbslurm {version} from {src}")
        unpack_acbslurm(build_wheel(src, tmp), lib)
        debian_grpc_code(src, lib, tmp)
        vendor(lib, doc, tmp)
        write_scripts(root, version)
        completion(root)
        system_files(src, root)
        normalise(root)
        control(src, root, version)
        out.mkdir(parents=True, exist_ok=True)
        deb = out / f"acbslurm_{version}_all.deb"
        run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(root), str(deb)],
            stdout=subprocess.DEVNULL)  # fmt: skip
    log(f"wrote {deb} ({deb.stat().st_size // 1024} KiB)")
    return deb


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", type=Path, default=HERE, help="checkout to package")
    ap.add_argument("--out", type=Path, default=HERE / "dist", help="where the .deb goes")
    ap.add_argument("--version", default=None, help="package version (default: from git)")
    args = ap.parse_args()
    print(build(args.source.resolve(), args.out.resolve(), args.version))


if __name__ == "__main__":
    main()
