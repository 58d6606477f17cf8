"""`acbslurm run`'s `docker run` options: --user, --shm-size, --env-file (pure parts)."""

import pytest
from test_launch import spec

from acbslurm.container.launch import container_config
from acbslurm.container.options import (
    Limits,
    OptionError,
    parse_env_file,
    parse_shm_size,
    parse_user,
)


def test_env_file_follows_dockers_syntax() -> None:
    text = "\ufeff# a comment\n\n  A=1\nB= two words \nC\nD\nE=x=y\n"
    assert parse_env_file(text, "f.env", {"C": "from env"}) == {
        "A": "1",
        "B": " two words ",  # as Docker: the value as it is, no quotes or trimming
        "C": "from env",  # a name alone takes this environment's value; D is unset: skipped
        "E": "x=y",
    }


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("ok=1\nACBSLURM_JOB_ID=7\n", "f.env line 2: ACBSLURM_JOB_ID is refused"),
        ("NVIDIA_VISIBLE_DEVICES=all\n", "f.env line 1: NVIDIA_VISIBLE_DEVICES"),
        ("MY VAR=1\n", "f.env line 1: not a variable name: 'MY VAR'"),
        ("=1\n", "not a variable name: ''"),
    ],
)
def test_env_file_refusals_name_the_line(text: str, said: str) -> None:
    with pytest.raises(OptionError) as exc:
        parse_env_file(text, "f.env", {})
    assert exc.value.option == "--env-file"
    assert said in str(exc.value)


def test_shm_size_is_bounded_by_the_containers_memory() -> None:
    assert parse_shm_size("1g", Limits(mem_bytes=2 * 1024**3)) == 1024**3
    assert parse_shm_size("64g", Limits()) == 64 * 1024**3  # no limit outside a job
    with pytest.raises(OptionError, match="more than the container's memory \\(2048 MB\\)"):
        parse_shm_size("3g", Limits(mem_bytes=2 * 1024**3))
    for bad in ("0", "lots", "-1g"):
        with pytest.raises(OptionError):
            parse_shm_size(bad, Limits())


@pytest.mark.parametrize("good", ["user1", "1000", "1000:1000", "svc:staff", "a.b-c"])
def test_user_takes_names_and_ids(good: str) -> None:
    assert parse_user(good) == good


@pytest.mark.parametrize("bad", ["", ":", "a:b:c", "-u", "x y", "root;id"])
def test_user_refuses_the_rest(bad: str) -> None:
    with pytest.raises(OptionError, match="expected NAME"):
        parse_user(bad)


def test_the_options_reach_the_container_config() -> None:
    config = container_config(
        spec(run_as="1000:1000", shm_bytes=2**30, entrypoint="", read_only=True, tty=True), True
    )
    assert config["User"] == "1000:1000"
    assert config["Entrypoint"] == [""]
    assert config["Tty"] is True
    assert config["HostConfig"]["ShmSize"] == 2**30
    assert config["HostConfig"]["ReadonlyRootfs"] is True
    plain = container_config(spec(), True)
    assert "User" not in plain and "Entrypoint" not in plain  # the image's own
    assert "ShmSize" not in plain["HostConfig"]
