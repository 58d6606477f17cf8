"""Hostile values reach the job literally: rendered scripts are RUN, not only read.

The container launch (``srun acbslurm run ...``) and direct commands are replaced by a
program that records its argv and environment, so the test sees exactly what bash
passed on. ``#SBATCH`` lines are checked with the real sbatch option parser.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from acbslurm.render import render
from acbslurm.spec import parse_spec

HOSTILE = [
    'it\'s "quoted"',
    "$(touch {marker})",
    "`touch {marker}`",
    "a; touch {marker}",
    "a && touch {marker} || true",
    "  two  spaces\tand tab ",
    "line1\nline2\n",
    "ünïcödé 日本語 🚀",
    "back\\slash \\n \\\\",
    "--looks-like-a-flag",
    "*",
    "~",
    "$HOME ${IFS} $1 $@",
    "!! !$",
    "#not a comment",
    "'",
    '"',
    "",
    "> {marker}",
    "| cat",
]
# Values that go on #SBATCH lines cannot hold newlines/tabs (refused by validation).
ONE_LINE = [v for v in HOSTILE if v and "\n" not in v and "\t" not in v]


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    """A PATH folder with a pass-through ``srun`` and an argv recorder ``record``."""
    d = tmp_path / "bin"
    d.mkdir()
    # srun's own options (--kill-on-bad-exit=1) are dropped; the rest is its task.
    (d / "srun").write_text('#!/bin/sh\nwhile [ "${1#--}" != "$1" ]; do shift; done\nexec "$@"\n')
    (d / "record").write_text(
        f"#!{sys.executable}\n"
        + textwrap.dedent(
            """
            import json, os, sys
            env = {k: v for k, v in os.environ.items() if k.startswith("HOSTILE_")}
            with open(os.environ["RECORD_OUT"], "w") as f:
                json.dump({"argv": sys.argv[1:], "env": env}, f)
            """
        )
    )
    for f in d.iterdir():
        f.chmod(0o755)
    return d


def run_script(script: str, bin_dir: Path, tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / "job.sh"
    path.write_text(script)
    out = tmp_path / "record.json"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "RECORD_OUT": str(out), "HOME": str(tmp_path)}
    subprocess.run(["bash", str(path)], env=env, cwd=tmp_path, check=True, timeout=30)
    data: dict[str, Any] = json.loads(out.read_text())
    return data


def as_yaml(doc: dict[str, Any]) -> str:
    """The spec as a person would write it in YAML (unicode kept as is)."""
    return str(yaml.safe_dump(doc, allow_unicode=True, sort_keys=False))


def values_for(tmp_path: Path) -> list[str]:
    marker = tmp_path / "PWNED"
    return [v.replace("{marker}", str(marker)) for v in HOSTILE]


def _container_doc(values: list[str]) -> dict[str, Any]:
    return {
        "name": "hostile",
        "env": {f"HOSTILE_{i}": v for i, v in enumerate(values)},
        "container": {
            "image": "acbslurm/busybox:latest",
            "command": values,
            "env": {f"C{i}": v for i, v in enumerate(values)},
            "mounts": ["/src dir/ü'x$(y):/dst `z`;w"],
            "workdir": "/work dir/$(x)'\"",
            "entrypoint": "/bin/e p $(x)'\"`y`;z",
            "env_file": "/env dir/ü'x$(y)`z`;w.env",
        },
    }


def test_container_launch_gets_literal_values(tmp_path: Path, bin_dir: Path) -> None:
    values = values_for(tmp_path)
    doc = _container_doc(values)
    spec = parse_spec(as_yaml(doc), "hostile.yaml")
    script = render(spec, acbslurm=[str(bin_dir / "record")])
    got = run_script(script, bin_dir, tmp_path)
    argv = got["argv"]
    assert not (tmp_path / "PWNED").exists()
    sep = argv.index("--")
    assert argv[sep + 1 :] == values
    assert argv[:3] == ["run", "--gpus", "auto"]
    envs = [argv[i + 1] for i, a in enumerate(argv[:sep]) if a == "--env"]
    # the job's env by name (its values come from the environment), then the container's
    assert envs == [f"HOSTILE_{i}" for i in range(len(values))] + [
        f"C{i}={v}" for i, v in enumerate(values)
    ]
    assert argv[argv.index("--entrypoint") + 1] == "/bin/e p $(x)'\"`y`;z"
    assert argv[argv.index("--env-file") + 1] == "/env dir/ü'x$(y)`z`;w.env"
    assert argv[argv.index("--mount") + 1] == "/src dir/ü'x$(y):/dst `z`;w"
    assert argv[argv.index("--workdir") + 1] == "/work dir/$(x)'\""
    assert argv[sep - 1] == "acbslurm/busybox:latest"
    assert got["env"] == {f"HOSTILE_{i}": v for i, v in enumerate(values)}


def test_string_command_reaches_container_shell_intact(tmp_path: Path, bin_dir: Path) -> None:
    cmd = "echo \"$(whoami)\" 'it''s' `id`; touch /x\nsecond line ü"
    spec = parse_spec(as_yaml({"container": {"image": "x", "command": cmd}}), "h.yaml")
    got = run_script(render(spec, acbslurm=[str(bin_dir / "record")]), bin_dir, tmp_path)
    assert got["argv"][-4:] == ["--", "sh", "-c", cmd]


@pytest.mark.parametrize("index", range(len(HOSTILE)))
def test_direct_command_each_value(tmp_path: Path, bin_dir: Path, index: int) -> None:
    value = values_for(tmp_path)[index]
    doc = {"command": [str(bin_dir / "record"), value, "after"], "env": {"HOSTILE_V": value}}
    got = run_script(render(parse_spec(as_yaml(doc), "h.yaml"), acbslurm="x"), bin_dir, tmp_path)
    assert got["argv"] == [value, "after"]
    assert got["env"] == {"HOSTILE_V": value}
    assert not (tmp_path / "PWNED").exists()


def test_direct_string_command_is_run_by_bash_as_written(tmp_path: Path, bin_dir: Path) -> None:
    record = bin_dir / "record"
    cmd = f'{record} "$HOSTILE_A" \'single quoted $x\' "a""b"'
    doc = {"command": cmd, "env": {"HOSTILE_A": "$(touch PWNED) ;`x`"}}
    got = run_script(render(parse_spec(as_yaml(doc), "h.yaml"), acbslurm="x"), bin_dir, tmp_path)
    assert got["argv"] == ["$(touch PWNED) ;`x`", "single quoted $x", "ab"]
    assert not (tmp_path / "PWNED").exists()


def sbatch_parsed_options(script: str, tmp_path: Path) -> dict[str, str]:
    """The options sbatch itself reads from the #SBATCH lines (no controller needed)."""
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "ClusterName=hostile\nSlurmctldHost=localhost\nSlurmctldPort=1\n"
        "NodeName=localhost CPUs=1\nPartitionName=p1 Nodes=localhost\n"
    )
    path = tmp_path / "job.sh"
    path.write_text(script)
    env = {**os.environ, "SLURM_CONF": str(conf)}
    proc = subprocess.Popen(
        ["sbatch", "-v", str(path)],
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    assert proc.stderr is not None
    opts: dict[str, str] = {}
    deadline = time.monotonic() + 20
    try:
        for raw in proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if "end of defined options" in line or time.monotonic() > deadline:
                break
            if line.startswith("sbatch: ") and " : " in line:
                key, _, value = line[len("sbatch: ") :].partition(" : ")
                opts[key.strip()] = value
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()
    return opts


@pytest.mark.skipif(shutil.which("sbatch") is None, reason="sbatch is not installed")
@pytest.mark.parametrize("index", range(len(ONE_LINE)))
def test_sbatch_directives_are_literal(tmp_path: Path, index: int) -> None:
    value = ONE_LINE[index].replace("{marker}", str(tmp_path / "PWNED"))
    doc = {
        "name": value,
        "output": f"/tmp/{value}.out",
        "error": f"/tmp/{value}.err",
        "account": value,
        "command": ["true"],
    }
    opts = sbatch_parsed_options(render(parse_spec(as_yaml(doc), "h.yaml"), acbslurm="x"), tmp_path)
    assert opts["job-name"] == value
    assert opts["account"] == value
    assert opts["output"] == f"/tmp/{value}.out"
    assert opts["error"] == f"/tmp/{value}.err"


@pytest.mark.skipif(shutil.which("sbatch") is None, reason="sbatch is not installed")
@pytest.mark.parametrize("index", range(len(ONE_LINE)))
def test_sbatch_args_and_option_keys_are_literal(tmp_path: Path, index: int) -> None:
    value = ONE_LINE[index].replace("{marker}", str(tmp_path / "PWNED"))
    doc = {
        "qos": value,
        "mail_user": value,
        "sbatch_args": [f"--comment={value}"],
        "command": ["true"],
    }
    opts = sbatch_parsed_options(render(parse_spec(as_yaml(doc), "h.yaml"), acbslurm="x"), tmp_path)
    assert opts["qos"] == value
    assert opts["mail-user"] == value
    assert opts["comment"] == value
