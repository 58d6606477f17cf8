"""The usage book: a lease's GPU-seconds shared among the requests in hand, the ledger
and totals files, and the epilog's reading of them (acbslurm/usagebook.py)."""

from __future__ import annotations

import errno
import json
import logging
import os

import pytest
from mounts import tmpfs

from acbslurm.errors import AccountingError
from acbslurm.usagebook import (
    BROKER_USAGE,
    LEDGER,
    SUMMARY,
    UNBILLED,
    Book,
    Totals,
    UsageFiles,
    read_broker_usage,
    read_job_usage,
)


def test_a_lease_is_shared_by_the_time_each_request_was_in_hand() -> None:
    lines: list[dict[str, object]] = []
    book = Book(lines.append)
    book.opened("m", "a", "alice", 0.0)
    book.opened("m", "b", "bob", 5.0)
    book.tokens("a", 10, 20, 0.5)
    book.closed("a", 10.0)
    # 2 devices from 0 to 10: 20 GPU-seconds; alice alone from 0 to 5 (10), both from 5
    # to 10 (5 each): alice's share is final when she ends, whatever comes after.
    book.open_lease("m", ["gpu-0", "gpu-1"], 0.0)
    assert book.request_gpu_seconds("a", 10.0) == (pytest.approx(15.0), ["gpu-0", "gpu-1"])
    book.lease("m", 2, 0.0, 10.0)
    assert book.totals.leased == {"m": 20.0}
    assert book.totals.use[("alice", "m")][3] == pytest.approx(15.0)
    assert book.totals.use[("bob", "m")][3] == pytest.approx(5.0)
    # bob goes on into the next lease, alone.
    book.lease("m", 2, 12.0, 14.0)
    assert book.gpu_seconds("b") == pytest.approx(5.0 + 4)
    book.closed("b", 14.0)
    shares = sum(row[3] for row in book.totals.use.values())
    assert shares == pytest.approx(book.totals.leased_total)
    assert book.totals.use[("alice", "m")][:3] == [1, 10, 20]
    assert [line["t"] for line in lines] == ["request", "lease", "lease", "request"]
    assert lines[0]["done"] is True and lines[3]["done"] is False


def test_a_lease_with_no_request_in_hand_is_unbilled_and_other_models_do_not_share() -> None:
    book = Book()
    book.opened("other", "x", "alice", 0.0)
    book.lease("m", 4, 1.0, 2.0)
    assert book.totals.use == {(UNBILLED, "m"): [0, 0, 0, 4.0]}
    assert book.gpu_seconds("x") == 0.0


def test_ended_requests_are_forgotten_once_a_later_lease_is_counted() -> None:
    book = Book()
    book.opened("m", "a", "alice", 0.0)
    book.closed("a", 1.0)
    book.lease("m", 1, 0.0, 2.0)
    assert book.gpu_seconds("a") is None  # counted and gone: memory stays bounded
    # the second after its end, with no request in hand, is the pool's: unbilled
    assert book.totals.use == {("alice", "m"): [1, 0, 0, 1.0], (UNBILLED, "m"): [0, 0, 0, 1.0]}


def test_the_epilog_reads_the_totals_and_replays_the_lines_after_them(tmp_path) -> None:
    book = Book()
    files = UsageFiles(str(tmp_path), book, logging.getLogger("t"))
    book.write = files.line
    book.opened("m", "a", "alice", 0.0)
    book.closed("a", 1.0)
    book.lease("m", 1, 0.0, 2.0)
    files.flush()
    book.opened("m", "b", "bob", 3.0)
    book.closed("b", 4.0)
    book.lease("m", 2, 3.0, 4.0)  # after the totals: only in the ledger
    with open(tmp_path / LEDGER, "ab") as fh:
        fh.write(b'{"t":"lease","model":"m"')  # a killed pool's half line
    got = read_job_usage(str(tmp_path), os.getuid())
    assert got is not None
    totals, replayed, lost = got
    assert (replayed, lost) == (2, 0)
    assert totals.leased == book.totals.leased
    assert totals.use == book.totals.use
    assert os.stat(tmp_path / SUMMARY).st_mode & 0o777 == 0o600
    assert os.stat(tmp_path / LEDGER).st_mode & 0o777 == 0o600


def _pool(folder, prompt: int) -> tuple[Book, UsageFiles]:
    """A pool's book and files in ``folder`` after one request and its lease."""
    files = UsageFiles(str(folder), Book(), logging.getLogger("t"))
    book = files.book
    book.write = files.line
    book.opened("m", f"r{prompt}", "alice", 0.0)
    book.tokens(f"r{prompt}", prompt, 1, 0.0)
    book.closed(f"r{prompt}", 1.0)
    book.lease("m", 1, 0.0, 2.0)
    return book, files


def test_a_pool_started_again_in_the_job_goes_on_from_the_earlier_totals(tmp_path) -> None:
    """The epilog reads one pair of files per job and node: a second pool (a restart
    in the same job) starts from what the first kept, whole lines only (a killed pool's
    half line is cut), and the epilog reads both pools' usage."""
    pid = os.fork()
    if pid == 0:  # the first pool: a request, a lease past its last totals, then killed
        _, files = _pool(tmp_path, 3)
        files.flush()
        files.book.lease("m", 1, 2.0, 3.0)
        with open(tmp_path / LEDGER, "ab") as fh:
            fh.write(b'{"t":"lease","model":"m"')  # killed mid-line
        os._exit(0)  # no close: the kernel closes its files, as for SIGKILL
    assert os.waitpid(pid, 0)[1] == 0
    second, files = _pool(tmp_path, 5)
    ledger = (tmp_path / LEDGER).read_bytes().splitlines()
    assert len(ledger) == 5 and all(json.loads(line) for line in ledger)  # none glued
    assert second.totals.leased == {"m": 5.0}  # 2 + 1 of the first, 2 of its own
    assert second.totals.use[("alice", "m")][:3] == [2, 8, 2]
    files.flush()
    got = read_job_usage(str(tmp_path), os.getuid())
    assert got is not None and (got[0].leased, got[1]) == ({"m": 5.0}, 0)
    assert got[0].use == second.totals.use
    files.close()


def test_a_second_pool_of_the_job_is_refused_while_the_first_runs(tmp_path) -> None:
    """Two pools would each rewrite the totals with their own alone: the second is
    refused, naming the folder, and the first's files are untouched; once the first
    is gone, a pool may start there again."""
    _, files = _pool(tmp_path, 3)
    files.flush()
    before = (tmp_path / LEDGER).read_bytes(), (tmp_path / SUMMARY).read_bytes()
    with pytest.raises(AccountingError, match=f"keeps its usage in {tmp_path} on this node"):
        UsageFiles(str(tmp_path), Book(), logging.getLogger("t"))
    assert ((tmp_path / LEDGER).read_bytes(), (tmp_path / SUMMARY).read_bytes()) == before
    files.close()
    later = UsageFiles(str(tmp_path), Book(), logging.getLogger("t"))
    assert later.book.totals.leased == {"m": 2.0}
    later.close()


def test_an_earlier_pool_s_files_that_cannot_be_read_are_said_and_left(tmp_path, caplog) -> None:
    (tmp_path / SUMMARY).write_text("{not json")
    files = UsageFiles(str(tmp_path), Book(), logging.getLogger("t"))
    assert files.book.totals.leased == {}
    said = [r.message for r in caplog.records if "earlier pool of this job" in r.message]
    assert len(said) == 1 and f"kept in {tmp_path} cannot be read" in said[0]
    files.close()


@pytest.mark.parametrize("name", [SUMMARY, LEDGER, BROKER_USAGE])
def test_json_nested_too_deeply_is_bad_json_naming_the_file(tmp_path, name: str) -> None:
    """``[[[[...`` in a pool's file (the user's to write): a ValueError the epilog says
    and goes on from; before, a RecursionError that ended the epilog there."""
    if name == LEDGER:
        (tmp_path / SUMMARY).write_text('{"offset": 0, "totals": {}}')
    (tmp_path / name).write_bytes(b"[" * 200_000 + b"\n")
    read = read_broker_usage if name == BROKER_USAGE else read_job_usage
    with pytest.raises(ValueError, match=f"^{name}: JSON nested too deeply$"):
        read(str(tmp_path), os.getuid())


def test_no_files_is_no_usage_and_a_foreign_or_bad_file_is_refused(tmp_path) -> None:
    assert read_job_usage(str(tmp_path), os.getuid()) is None
    (tmp_path / SUMMARY).write_text('{"offset": 0, "totals": {"leased": {"m": -1}}}')
    with pytest.raises(ValueError, match="not seconds"):
        read_job_usage(str(tmp_path), os.getuid())
    (tmp_path / SUMMARY).write_text('{"offset": 0, "totals": {"use": [["a b", "m", 1, 0, 0, 1]]}}')
    with pytest.raises(ValueError, match="not a name"):
        read_job_usage(str(tmp_path), os.getuid())
    with pytest.raises(ValueError, match="regular file of uid"):
        read_job_usage(str(tmp_path), os.getuid() + 1)
    os.unlink(tmp_path / SUMMARY)
    os.symlink("/etc/passwd", tmp_path / LEDGER)
    with pytest.raises(OSError):
        read_job_usage(str(tmp_path), os.getuid())


def test_a_write_that_fails_is_said_once_and_counted(tmp_path, caplog) -> None:
    book = Book()
    files = UsageFiles(str(tmp_path / "gone"), book, logging.getLogger("t"))
    book.write = files.line
    book.opened("m", "a", "alice", 0.0)
    book.closed("a", 1.0)
    book.lease("m", 1, 0.0, 1.0)
    assert files.lost == 2
    assert len([r for r in caplog.records if "usage: cannot write" in r.message]) == 1
    assert book.totals.leased == {"m": 1.0}  # the totals are kept in memory all the same


def test_totals_round_trip() -> None:
    t = Totals()
    t.add_request("alice", "org/m:1", 3, 4)
    t.add_lease("org/m:1", 2.5, {"alice": 2.5})
    assert json.loads(json.dumps(Totals.from_dict(t.as_dict()).as_dict())) == t.as_dict()


@pytest.fixture
def full_fs(tmp_path):
    """A real file system of 64 KiB (tmpfs, as a node's /run is), unmounted after."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    with tmpfs(tmp_path / "run", "64k", "0700") as folder:
        yield folder


def _fill(folder) -> None:
    """Writes until the file system is full (ENOSPC)."""
    with open(folder / "filler", "wb", buffering=0) as fh, pytest.raises(OSError) as exc:
        while True:
            fh.write(b"x" * 4096)
    assert exc.value.errno == errno.ENOSPC


def test_a_full_file_system_loses_nothing_silently(full_fs, caplog) -> None:
    """On a file system that fills up under the pool (the ledger's last page takes a few
    more lines, the one that crosses it is cut short, the rest fail): each line that
    cannot be written is counted where a full disk cannot hide it (the marker's name),
    the part of a line cut short is cut off, the log says it once, and the epilog reads
    every whole line and the count of the others; lines written once there is room
    again are read too."""
    book = Book()
    files = UsageFiles(str(full_fs), book, logging.getLogger("usage-test"))
    book.write = files.line
    book.opened("m", "a", "alice", 0.0)
    book.closed("a", 1.0)
    book.lease("m", 1, 0.0, 2.0)
    files.flush()
    _fill(full_fs)
    sent = []
    book.write = lambda line: (sent.append(line), files.line(line))
    for i in range(100):
        book.opened("m", f"b{i}", "bob", 3.0 + i)
        book.closed(f"b{i}", 3.5 + i)
        book.lease("m", 1, 3.0 + i, 3.5 + i)
    files.flush()  # fails too: the totals file stays as it was
    assert 0 < files.lost < len(sent)
    said = [r.message for r in caplog.records if "usage: cannot write" in r.message]
    assert len(said) == 1 and "GPU-seconds from here on are not kept" in said[0]
    got = read_job_usage(str(full_fs), os.getuid())
    assert got is not None
    totals, replayed, lost = got
    assert (replayed + lost, lost) == (len(sent), files.lost)
    assert (full_fs / LEDGER).read_bytes().endswith(b"\n")
    os.unlink(full_fs / "filler")
    sent.clear()
    book.opened("m", "c", "carol", 200.0)
    book.closed("c", 201.0)
    book.lease("m", 1, 200.0, 201.0)
    got = read_job_usage(str(full_fs), os.getuid())
    assert got is not None
    assert (got[1], got[2]) == (replayed + len(sent), lost)
    assert got[0].leased["m"] == totals.leased["m"] + 1.0
    files.close()
    again = read_job_usage(str(full_fs), os.getuid())
    assert again is not None and (again[1], again[2]) == (0, lost)  # the totals say it too


def test_a_file_that_grows_while_it_is_read_is_refused_not_read_to_its_end() -> None:
    """The size at open bounds nothing: a process of the user may append meanwhile. The
    epilog reads at most the limit, and a file past it is refused, named."""
    import io

    from acbslurm.usagebook import _read_upto

    assert _read_upto(io.BytesIO(b"x" * 10), 10, "usage.json") == b"x" * 10
    with pytest.raises(ValueError, match=r"usage.json: grew past 10 bytes"):
        _read_upto(io.BytesIO(b"x" * (1 << 20)), 10, "usage.json")


def test_the_shares_of_a_lease_never_exceed_it() -> None:
    """A pool owner's ledger line ``{"t": "lease", "gpu_seconds": 1, "by_key": {"alice":
    1e12}}`` bills alice what the lease had, not 1e12 (the epilog bounds the keys' sum by
    the lease before it bounds the lease by the allocation)."""
    from acbslurm.usagebook import Totals

    t = Totals()
    t.add_lease("m", 1.0, {"alice": 1e12, "bob": 1e12})
    t.add_lease("n", 4.0, {"carol": 3.0})
    assert t.bound_shares()
    assert t.use[("alice", "m")][3] == pytest.approx(0.5)
    assert t.use[("bob", "m")][3] == pytest.approx(0.5)
    assert t.use[("carol", "n")][3] == 3.0  # within its lease: as it is
    assert not t.bound_shares()
