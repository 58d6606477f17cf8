"""Errors a user can cause belong to the one exception tree (acbslurm/errors.py).

A bad command line is a usage error naming the option and quoting the value (exit 2);
a library call with a bad value raises an ``AcbslurmError`` the CLI turns into one line.
"""

from __future__ import annotations

import pytest
from cli_run import acbslurm

from acbslurm.errors import AcbslurmError, BrokerError, ConfigError


@pytest.mark.parametrize(
    ("argv", "option", "value"),
    [
        (["serve", "pool.yaml", "--listen", "garbage"], "--listen", "garbage"),
        (["serve", "--demo", "--listen", "127.0.0.1:99999"], "--listen", "127.0.0.1:99999"),
        (["sandbox", "up", "--slurm", "garbage"], "--slurm", "garbage"),
        (["sandbox", "up", "--slurm", "\u0662\u0665.11.7"], "--slurm", "\u0662\u0665.11.7"),
    ],
)
def test_a_bad_value_is_a_usage_error(argv: list[str], option: str, value: str) -> None:
    ran = acbslurm(*argv)
    code, err = ran.exit_code, ran.stderr
    assert code == 2, err
    assert f"Invalid value for '{option}'" in err
    assert repr(value) in err
    assert "Traceback" not in err


def test_listen_and_release_errors_are_in_the_tree() -> None:
    from acbslurm.serve.pool import check_listen
    from acbslurm.slurm.versions import parse_release

    for call, arg in ((check_listen, "garbage"), (parse_release, "garbage")):
        with pytest.raises(ConfigError) as exc:
            call(arg)
        assert isinstance(exc.value, ValueError)  # what callers caught before
        assert "'garbage'" in str(exc.value)


def test_a_granted_gpu_this_process_cannot_see_is_a_broker_error() -> None:
    from acbslurm.broker.runtime import _cuda_ordinal

    with pytest.raises(BrokerError, match="GPU-0000 granted by the broker is not visible"):
        _cuda_ordinal("GPU-0000")


def test_a_broker_of_duplicate_devices_is_a_config_error() -> None:
    from acbslurm.broker.core import Broker, Device

    d = Device("GPU-a", "stand-in", 0, -1, 0)
    with pytest.raises(ConfigError, match="'GPU-a' twice"):
        Broker([d, d])
    with pytest.raises(AcbslurmError, match="unknown policy 'lifo'"):
        Broker([d], policy="lifo")


def test_a_submission_of_no_jobs_is_a_config_error() -> None:
    from acbslurm.slurm.jobs import submit_script

    with pytest.raises(ConfigError, match="a submission of 0 jobs"):
        submit_script("#!/bin/sh\ntrue\n", count=0)
