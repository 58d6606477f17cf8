"""The report service's limits, on a real unix socket in this process: a whole request
has a deadline, one uid holds at most MAX_PER_USER slots, and a caller refused as busy
is told so every time with the documented exit code (never a silent exit).

Every connection here is root's (one uid), which is what the per-user cap is about;
tests/faults/test_fault_report_service.py does the same with two users on the sandbox.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from io import StringIO
from pathlib import Path

import pytest

from acbslurm.accounting import service
from acbslurm.accounting.options import ReportOptions
from acbslurm.accounting.remote import ServiceError, report_via_service
from acbslurm.accounting.service import BUSY_EXIT, MAX_PER_USER, ReportService, Slots


@pytest.fixture
def svc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ReportService]:
    monkeypatch.setattr(service, "REQUEST_DEADLINE", 1.0)
    s = ReportService(str(tmp_path / "report.sock"), private=True)
    s.bind()
    t = threading.Thread(target=s.serve_forever, daemon=True)
    t.start()
    yield s
    s.stop()
    t.join(5)


def connect(s: ReportService) -> socket.socket:
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.settimeout(10)
    c.connect(s.path)
    return c


def answer(c: socket.socket) -> str:
    """All the service sent. A caller still sending when the service closes is reset
    (unix sockets do that to a peer whose data was left unread); its answer is read
    before the reset all the same, chunk by chunk."""
    data = b""
    while True:
        try:
            chunk = c.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    return data.decode()


def wait_held(s: ReportService, n: int) -> None:
    deadline = time.monotonic() + 10
    while sum(s.slots.held.values()) != n:
        assert time.monotonic() < deadline, s.slots.held
        time.sleep(0.01)


def test_slots_are_capped_per_uid_and_in_all() -> None:
    slots = Slots(total=3, per_user=2)
    assert slots.take(1001) == "" and slots.take(1001) == ""
    assert "2 reports under way, the most per user" in slots.take(1001)
    assert slots.take(1002) == ""
    assert slots.take(1003) == service.BUSY
    slots.give_back(1001)
    assert slots.take(1003) == "" and slots.held == {1001: 1, 1002: 1, 1003: 1}


def test_a_request_sent_a_byte_at_a_time_is_cut_at_its_deadline(svc: ReportService) -> None:
    c = connect(svc)
    t0 = time.monotonic()
    for b in b'{"options": ':
        try:
            c.send(bytes([b]))
        except OSError:
            break
        time.sleep(0.2)
    got = answer(c)
    c.close()
    assert got.startswith("X 2 ") and "bad request: not sent within 1 s" in got, got
    assert time.monotonic() - t0 < 4
    wait_held(svc, 0)


def test_one_user_holds_at_most_its_share_and_hears_busy_every_time(svc: ReportService) -> None:
    idle = [connect(svc) for _ in range(MAX_PER_USER)]
    wait_held(svc, MAX_PER_USER)
    for _ in range(12):
        with pytest.raises(ServiceError) as err:
            report_via_service(svc.path, ReportOptions(), StringIO())
        assert err.value.exit_code == BUSY_EXIT
        assert "the report service is busy; try again" in str(err.value)
        assert f"you have {MAX_PER_USER} reports under way" in str(err.value)
    for c in idle:  # cut at the deadline: their slots come back
        assert "not sent within" in answer(c)
        c.close()
    wait_held(svc, 0)
    with connect(svc) as c:
        c.sendall(b'{"options": {"db_host": "x"}}\n')
        assert "forbidden option(s) db_host" in answer(c)
