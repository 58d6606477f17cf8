"""Numbers read from environment variables are finite, ASCII, and named when wrong.

``float(os.environ[...])`` took ``nan`` (a wait that never ends) and ``inf``
(OverflowError in a timer); each reader now raises the tree's ConfigError naming the
variable and quoting its value.
"""

from __future__ import annotations

import socket
from typing import Any

import pytest

from acbslurm.broker import bootstrap
from acbslurm.broker.client import RECONNECT_ENV, BrokerClient
from acbslurm.config import env_float, env_int
from acbslurm.errors import ConfigError

BAD = ["nan", "inf", "-inf", "\u0662", "soon"]


@pytest.mark.parametrize("raw", BAD)
def test_env_float_names_the_variable_and_value(raw: str) -> None:
    with pytest.raises(ConfigError) as err:
        env_float("ACBSLURM_X", 1.0, env={"ACBSLURM_X": raw})
    assert "ACBSLURM_X" in str(err.value) and repr(raw) in str(err.value)


def test_env_numbers_default_and_bounds() -> None:
    assert env_float("ACBSLURM_X", 1.5, env={}) == 1.5
    assert env_float("ACBSLURM_X", 1.5, env={"ACBSLURM_X": ""}) == 1.5
    assert env_float("ACBSLURM_X", 1.5, env={"ACBSLURM_X": "0.25"}) == 0.25
    with pytest.raises(ConfigError, match=r"at least 0\.1, got '0\.01'"):
        env_float("ACBSLURM_X", 1.0, minimum=0.1, env={"ACBSLURM_X": "0.01"})
    assert env_int("ACBSLURM_N", 3, env={"ACBSLURM_N": "7"}) == 7
    for raw in ("-1", "\u0662", "1.5"):
        with pytest.raises(ConfigError, match="ACBSLURM_N must be a whole number"):
            env_int("ACBSLURM_N", 3, env={"ACBSLURM_N": raw})


@pytest.mark.parametrize("raw", ["nan", "inf"])
def test_a_broker_client_refuses_a_non_finite_reconnect_timeout(
    raw: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(RECONNECT_ENV, raw)
    with pytest.raises(ConfigError, match=f"{RECONNECT_ENV} must be a finite number, got '{raw}'"):
        BrokerClient("unix:/nonexistent/broker.sock")


@pytest.mark.parametrize(
    "name", ["ACBSLURM_AGARUN_TIMEOUT", "ACBSLURM_AGARUN_RECONNECT", "ACBSLURM_AGARUN_IDLE"]
)
def test_the_agarun_bootstrap_refuses_non_finite_settings(name: str) -> None:
    started: list[Any] = []
    env = {"ACBSLURM_AGARUN_BROKER": "unix:/nonexistent/broker.sock", name: "nan"}
    with pytest.raises(ConfigError, match=f"{name} must be a finite number, got 'nan'"):
        bootstrap._start(lambda *a, **k: started.append(k), lambda *a, **k: None, ["app.py"], env)
    assert started == []


def test_a_serve_worker_refuses_a_non_finite_token_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    from acbslurm.serve.worker import Worker

    monkeypatch.setenv("ACBSLURM_SERVE_TOKEN_DELAY", "inf")
    a, b = socket.socketpair()
    with a, b, pytest.raises(ConfigError, match="ACBSLURM_SERVE_TOKEN_DELAY"):
        Worker({}, a, "unix:/nonexistent/broker.sock", "cpu")


def test_the_pipeline_stage_timeout_is_finite(monkeypatch: pytest.MonkeyPatch) -> None:
    from acbslurm.serve.engines.builtin.group import stage_timeout

    assert stage_timeout() == 120.0
    monkeypatch.setenv("ACBSLURM_SERVE_STAGE_TIMEOUT", "nan")
    with pytest.raises(ConfigError, match="ACBSLURM_SERVE_STAGE_TIMEOUT"):
        stage_timeout()
