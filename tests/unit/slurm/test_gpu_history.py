"""The prolog's GPU token in a job's AdminComment, and reading it back."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from fake_slurm import FakeSlurm

import acbslurm.slurm.gpu_history as history
from acbslurm.accounting.gpuseconds import devices_text
from acbslurm.accounting.output import bar, devices
from acbslurm.gpuvalue import Gpu, from_lists
from acbslurm.slurm.allocation import JobFacts, query_job_facts
from acbslurm.slurm.gpu_history import gpu_token, merged_comment, parse_gpus

A, B = "GPU-11111111-2222-3333-4444-555555555555", "MIG-aaaa/1/0"


def on(node: str, indices: list[int], uuids: list[str]) -> list[Gpu]:
    return list(from_lists(node, indices, uuids, []))


def test_token_and_back() -> None:
    token = gpu_token(on("n1", [0, 2], [A, B]))
    assert token == f"acbslurm:gpus=n1:0={A},n1:2={B}"
    assert parse_gpus(f"an admin's note {token}") == [
        Gpu(A, 0, node="n1"),
        Gpu(B, 2, node="n1"),
    ]
    assert gpu_token(on("n1", [], [A])) == f"acbslurm:gpus=n1:-={A}"  # Slurm gave UUIDs only
    assert parse_gpus(gpu_token(on("n1", [], [A]))) == [Gpu(A, None, node="n1")]
    assert parse_gpus(None) == [] and parse_gpus("nothing of ours") == []


def test_an_admins_comment_is_kept_and_a_requeued_run_replaces_its_own_token() -> None:
    first = merged_comment("", "n1", gpu_token(on("n1", [0], [A])))
    assert first == f"acbslurm:gpus=n1:0={A}"
    again = merged_comment(f"keep me {first}", "n1", gpu_token(on("n1", [1], [B])))
    assert again == f"keep me acbslurm:gpus=n1:1={B}"
    other = merged_comment(again, "n2", gpu_token(on("n2", [0], [A])))
    assert other.endswith(f"acbslurm:gpus=n1:1={B} acbslurm:gpus=n2:0={A}")


def test_the_report_shows_devices_in_each_format() -> None:
    text = devices_text(f"note {gpu_token(on('vm', [0, 1], [A, B]))}")
    assert text == f"vm:0={A},vm:1={B}"
    assert devices(text) == [
        {"index": 0, "node": "vm", "uuid": A},
        {"index": 1, "node": "vm", "uuid": B},
    ]
    assert devices_text(None) == "" and devices("") == []


@pytest.mark.parametrize(
    "comment",
    [
        "acbslurm:gpus=vm:0=GPU-a,vm:1=GPU-b",
        "site note acbslurm:gpus=n1:3=GPU-x acbslurm:gpus=n2:0=GPU-y,n2:-=GPU-z",
        "acbslurm:gpus=vm:007=GPU-a,vm:x=GPU-b,vm:1=,:2=GPU-c,novm=GPU-d,vm:10=GPU-e=f",
        "acbslurm:usage=vm;leased=1.000 acbslurm:gpus=vm:0=GPU-a",
        "",
        None,
    ],
)
def test_the_reports_fast_reading_of_devices_gives_the_values_text(comment: str | None) -> None:
    """The report reads devices as text (100k+ comments): the same as the values'
    tokens, and the JSON the same as the dicts' (odd indexes rewritten as the values
    write them, items without a node or a UUID left out)."""
    from acbslurm.accounting.output import _dump, devices_json

    want = [g.token() for g in parse_gpus(comment)]
    assert history.gpu_items(comment) == want
    assert devices_text(comment) == ",".join(want)
    assert devices_json(devices_text(comment)) == _dump(devices(devices_text(comment)))


def test_bars_scale_to_the_widest_group() -> None:
    assert bar(10, 10) == "\u2588" * 24
    assert bar(5, 10) == "\u2588" * 12
    assert bar(1, 1000) == "\u258f"  # the smallest visible bar
    assert bar(0, 10) == "" and bar(1, 0) == ""


def test_a_token_another_nodes_prolog_overwrote_is_written_again(
    fake_slurm: FakeSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    import acbslurm.slurm.gpu_history as history

    # n2's prolog read the comment before our first write and lands just after it.
    stale = {"admin_comment": gpu_token(on("n2", [0], [B]))}
    fake_slurm.add_job("7", "RUNNING", node="n[1-2]", num_nodes=2, update_next=[stale])
    monkeypatch.setattr(history.time, "sleep", lambda _s: None)
    history.record_job_gpus("7", on("n1", [1], [A]), query_job_facts("7"))
    updates = [c for c in fake_slurm.calls("scontrol") if c.argv[0] == "update"]
    assert len(updates) == 2  # lost once, written again on top of n2's
    comment = fake_slurm.jobs["7"]["admin_comment"]
    assert {g.node for g in parse_gpus(comment)} == {"n1", "n2"}


def test_a_one_node_job_writes_once_and_reads_nothing_back(fake_slurm: FakeSlurm) -> None:
    import acbslurm.slurm.gpu_history as history

    fake_slurm.add_job("7", "RUNNING", node="n1")
    facts = JobFacts(job_id="7", num_nodes=1, nodes=("n1",))
    history.record_job_gpus("7", on("n1", [0], [A]), facts)
    assert fake_slurm.argvs() == [
        ["scontrol", "update", "job=7", f"AdminComment=acbslurm:gpus=n1:0={A}"]
    ]
    assert parse_gpus(fake_slurm.jobs["7"]["admin_comment"]) == [Gpu(A, 0, node="n1")]


def _lands_at_sleep(fake_slurm: FakeSlurm, at: int, comment: str) -> Callable[[float], None]:
    """A ``time.sleep`` whose ``at``-th pause between reads is another node's write of
    ``comment`` (the process runner's own short sleeps are real)."""
    calls = [0]
    real = time.sleep

    def sleep(s: float) -> None:
        if s < history._PAUSE[0]:
            real(s)
            return
        calls[0] += 1
        if calls[0] == at:
            state = fake_slurm._load()
            state["jobs"]["7"]["admin_comment"] = comment
            fake_slurm._save(state)

    return sleep


def test_a_stale_write_after_two_clean_reads_is_still_repaired(
    fake_slurm: FakeSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    """n2's prolog read the comment before n1 wrote and lands only after n1 has read
    its own token back twice: n1 keeps reading until both nodes' tokens are there, so
    it sees its token dropped and writes it again."""
    import acbslurm.slurm.gpu_history as history

    fake_slurm.add_job("7", "RUNNING", node="n[1-2]", num_nodes=2)
    n2 = gpu_token(on("n2", [0], [B]))
    monkeypatch.setattr(history.time, "sleep", _lands_at_sleep(fake_slurm, 3, n2))
    history.record_job_gpus("7", on("n1", [1], [A]), query_job_facts("7"))
    comment = fake_slurm.jobs["7"]["admin_comment"]
    assert {g.node for g in parse_gpus(comment)} == {"n1", "n2"}
    updates = [c for c in fake_slurm.calls("scontrol") if c.argv[0] == "update"]
    assert len(updates) == 2


def test_a_missing_node_does_not_hold_the_prolog_for_ever(
    fake_slurm: FakeSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other node's prolog never writes (it failed): n1 returns after a bounded
    number of reads, its own token written once."""
    import acbslurm.slurm.gpu_history as history

    fake_slurm.add_job("7", "RUNNING", node="n[1-2]", num_nodes=2)
    slept: list[float] = []
    real = time.sleep
    monkeypatch.setattr(
        history.time, "sleep", lambda s: slept.append(s) if s >= history._PAUSE[0] else real(s)
    )
    history.record_job_gpus("7", on("n1", [1], [A]), query_job_facts("7"))
    assert len(slept) == history._MAX_READS
    assert parse_gpus(fake_slurm.jobs["7"]["admin_comment"]) == [Gpu(A, 1, node="n1")]
    updates = [c for c in fake_slurm.calls("scontrol") if c.argv[0] == "update"]
    assert len(updates) == 1


def test_a_run_requeued_onto_other_nodes_drops_the_tokens_of_the_old_ones() -> None:
    """Job 7 ran on n3 and was requeued onto n1: n3's token is not this run's (the report
    would show its GPU as used, and a two-node prolog would count it as a node)."""
    old = gpu_token(on("n3", [0], [B]))
    new = gpu_token(on("n1", [1], [A]))
    assert merged_comment(f"keep {old} me", "n1", new, ["n1"]) == f"keep me {new}"
    assert merged_comment(f"keep {old} me", "n1", new) == f"keep {old} me {new}"  # no list
    # The job's other nodes keep theirs, and a comment already right is left as it is.
    both = f"{gpu_token(on('n2', [0], [B]))} {new}"
    assert merged_comment(both, "n1", new, ["n1", "n2"]) == both


def test_the_prolog_writes_when_only_a_stale_token_is_wrong(fake_slurm: FakeSlurm) -> None:
    import acbslurm.slurm.gpu_history as history

    mine, old = gpu_token(on("n1", [0], [A])), gpu_token(on("n3", [0], [B]))
    fake_slurm.add_job("7", "RUNNING", node="n1")
    facts = JobFacts(job_id="7", num_nodes=1, nodes=("n1",), admin_comment=f"{old} {mine}")
    history.record_job_gpus("7", on("n1", [0], [A]), facts)
    assert fake_slurm.argvs() == [["scontrol", "update", "job=7", f"AdminComment={mine}"]]
    done = JobFacts(job_id="7", num_nodes=1, nodes=("n1",), admin_comment=mine)
    before = len(fake_slurm.argvs())
    history.record_job_gpus("7", on("n1", [0], [A]), done)
    assert len(fake_slurm.argvs()) == before  # nothing to change: no write
