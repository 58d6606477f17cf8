"""A spec's container keys for `acbslurm run`'s own options, and the job's env in the
container: each value checked by the rule `acbslurm run` applies, with file:line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from acbslurm.container.options import Limits, OptionError, parse_shm_size, parse_user
from acbslurm.errors import SpecError
from acbslurm.spec import load_spec, parse_spec

HEAD = "name: t\ncontainer:\n  image: busybox:latest\n"  # the container's keys from line 4


def errors_of(text: str, overrides: tuple[str, ...] = ()) -> str:
    with pytest.raises(SpecError) as info:
        parse_spec(text, "job.yaml", overrides)
    return str(info.value)


def test_every_run_option_key() -> None:
    spec = parse_spec(
        HEAD + "  user: 1000:50\n  entrypoint: ''\n  shm_size: 2g\n  read_only: true\n"
        "  grace: 2.5\n  env_file: [/a.env, /b.env]\n",
        "job.yaml",
    )
    c = spec.container
    assert c is not None
    assert (c.user, c.entrypoint, c.shm_size, c.read_only, c.grace) == (
        "1000:50",
        "",
        "2g",
        True,
        "2.5",
    )
    assert c.env_files == ("/a.env", "/b.env")


def test_left_out_keys_render_nothing() -> None:
    c = parse_spec(HEAD, "job.yaml").container
    assert c is not None
    assert (c.user, c.entrypoint, c.shm_size, c.read_only, c.grace, c.env_files) == (
        None,
        None,
        None,
        False,
        None,
        (),
    )


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("user: 'a b'", "container.user: expected NAME or UID[:GROUP or GID], got 'a b'"),
        ("user: ':1'", "container.user: expected NAME or UID[:GROUP or GID], got ':1'"),
        ("user: [root]", "container.user: must be text or a whole number, got ['root']"),
        ("shm_size: lots", "container.shm_size: expected a size like 512m or 8g, got 'lots'"),
        ("shm_size: 0", "container.shm_size: must be positive, got '0'"),
        ("shm_size: true", "container.shm_size: must be text or a whole number, got True"),
        ("grace: -1", "container.grace: must be a finite number of seconds >= 0, got -1"),
        ("grace: .inf", "container.grace: must be a finite number of seconds >= 0, got inf"),
        ("grace: 1:30", "container.grace: must be a finite number of seconds >= 0, got '1:30'"),
        ("grace: yes", "container.grace: must be a finite number of seconds >= 0, got True"),
        ("read_only: 1", "container.read_only: must be true or false, got 1"),
        ("entrypoint: [a, b]", "container.entrypoint: must be a program"),
        ('entrypoint: "a\\nb"', "container.entrypoint: must be one line"),
        ("env_file: ''", "container.env_file: must not be empty"),
        ("env_file: [/a, '']", "container.env_file.1: must not be empty"),
        ("envfile: /a", "container.envfile: unknown key (did you mean 'env_file'?)"),
        ("requeue_exit: 0", "container.requeue_exit: must be an exit code 1-255 other than"),
        ("requeue_exit: 126", "container.requeue_exit: must be an exit code 1-255 other"),
        ("requeue_exit: 256", "container.requeue_exit: must be an exit code 1-255 other"),
        ("requeue_exit: '8x'", "container.requeue_exit: must be an exit code 1-255 other"),
        ("publish: 'a:b'", "container.publish: expected [IP:][HOST_PORT:]CONTAINER_PORT"),
        ("publish: [8888, 70000]", "container.publish.1: ports are 1-65535, got '70000'"),
        ("devices: dev/x", "container.devices: expected /HOST[:/CONTAINER][:rwm], got 'dev/x'"),
        ("devices: ['/dev/x:/y:rwx']", "container.devices.0: permissions are some of r, w, m"),
        ("network: 'container:db'", "container.network: 'container:db' joins another"),
        ("ulimits: [memlock]", "container.ulimits: must be a mapping of NAME: SOFT[:HARD]"),
        ("ulimits: {memlok: -1}", "container.ulimits.memlok: expected NAME=SOFT[:HARD]"),
        ("ulimits: {nofile: lots}", "container.ulimits.nofile: expected NAME=SOFT[:HARD] (a"),
        ("ulimits: {nofile: '9:8'}", "container.ulimits.nofile: the soft limit is above the"),
        ("ulimits: {nofile: true}", "container.ulimits.nofile: must be SOFT[:HARD]"),
    ],
)
def test_bad_values_name_line_and_key(line: str, message: str) -> None:
    assert f"job.yaml:4: {message}" in errors_of(HEAD + f"  {line}\n")


def test_errors_are_all_reported_at_once() -> None:
    msg = errors_of(HEAD + "  user: 'a b'\n  shm_size: x\n  grace: -2\n")
    assert "job.yaml:4: container.user:" in msg
    assert "job.yaml:5: container.shm_size:" in msg
    assert "job.yaml:6: container.grace:" in msg


def test_set_names_the_flag() -> None:
    msg = errors_of(HEAD, ("container.shm_size=huge",))
    assert "--set container.shm_size: container.shm_size: expected a size" in msg


@pytest.mark.parametrize("value", ["root", "1000", "1000:1000", "app:staff", "a.b-c_d"])
def test_user_rule_is_run_s(value: str) -> None:
    """What the spec accepts `acbslurm run --user` accepts, and the other way round."""
    assert parse_spec(HEAD + f"  user: '{value}'\n", "job.yaml").container is not None
    assert parse_user(value) == value


@pytest.mark.parametrize("value", ["a b", "-x", "1:2:3", "", "u:"])
def test_user_refused_by_both(value: str) -> None:
    assert "container.user" in errors_of(HEAD + f"  user: '{value}'\n")
    with pytest.raises(OptionError, match="expected NAME or UID"):
        parse_user(value)


def test_shm_size_rule_is_run_s() -> None:
    assert parse_shm_size("2g", Limits()) == 2 * 1024**3
    with pytest.raises(OptionError, match="expected a size like 512m or 8g, got 'x'"):
        parse_shm_size("x", Limits())


def test_shm_size_above_the_job_memory_is_refused() -> None:
    msg = errors_of("mem: 1G\n" + HEAD + "  shm_size: 2g\n")
    assert "job.yaml:5: container.shm_size: '2g' is more than the job's memory (mem: 1G)" in msg
    assert parse_spec("mem: 2G\n" + HEAD + "  shm_size: 2g\n", "job.yaml").container


def test_env_file_relative_to_the_spec_folder(tmp_path: Path) -> None:
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(HEAD + "  env_file: train.env\n")
    c = load_spec(spec_file).container
    assert c is not None
    assert c.env_files == (str(tmp_path / "train.env"),)
    # given with --set, it is relative to the working directory
    c = load_spec(spec_file, ["container.env_file=[x.env, /abs.env]"]).container
    assert c is not None
    assert c.env_files == (os.path.abspath("x.env"), "/abs.env")


def test_job_env_names_reach_the_container() -> None:
    spec = parse_spec(
        "env: {A: 1, ACBSLURM_STOP_GRACE: 60, B: x}\n" + HEAD + "  env: {B: y}\n", "job.yaml"
    )
    # acbslurm's own settings stay in the job; the container's B wins over the job's
    assert spec.container_env_names == ("A",)
    assert parse_spec("env: {A: 1}\ncommand: [x]\n", "job.yaml").container_env_names == ("A",)


def test_ulimits_render_as_run_options() -> None:
    """A mapping, as `docker compose` writes ulimits; each value checked by `acbslurm
    run`'s rule (runrules.ulimit), rendered as --ulimit NAME=SOFT[:HARD]."""
    c = parse_spec(
        HEAD + "  ulimits:\n    memlock: -1\n    nofile: '4096:8192'\n    stack: unlimited\n",
        "job.yaml",
    ).container
    assert c is not None
    assert c.ulimits == ("memlock=-1", "nofile=4096:8192", "stack=unlimited")


def test_requeue_exit_requeues_and_refuses_no_requeue() -> None:
    """``requeue_exit`` makes the job requeueable (#SBATCH --requeue); with ``requeue:
    false`` Slurm would refuse the requeue after the checkpoint: refused at once."""
    c = parse_spec(HEAD + "  requeue_exit: 85\n", "job.yaml").container
    assert c is not None and c.requeue_exit == "85"
    message = errors_of("requeue: false\n" + HEAD + "  requeue_exit: 85\n")
    assert (
        "job.yaml:5: container.requeue_exit: requeues the job, but the spec says "
        "requeue: false" in message
    ), message


def test_publish_and_network_render_as_run_options() -> None:
    c = parse_spec(
        HEAD + "  publish: [8888, '18888:8888/udp']\n  network: none\n", "job.yaml"
    ).container
    assert c is not None
    assert (c.publish, c.network) == (("8888", "18888:8888/udp"), "none")
    one = parse_spec(HEAD + "  publish: 8888\n  devices: /dev/infiniband/uverbs0\n", "job.yaml")
    assert one.container is not None and one.container.publish == ("8888",)
    assert one.container.devices == ("/dev/infiniband/uverbs0",)
