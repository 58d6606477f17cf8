"""Where acbslurm's record of an ended job lives (slurm/job_history.py): its words merged
into a SystemComment beside another tool's text, and read back with the AdminComment's
older ones, as jobstats leaves the AdminComment and as 22.05's sacctmgr lowercases."""

from __future__ import annotations

from acbslurm.accounting.gpuseconds import devices_text, pool_usage
from acbslurm.slurm.job_history import has_others_words, record_text, with_node_words

GPUS_A = "acbslurm:gpus=vm-1:0=GPU-aaaa"
GPUS_B = "acbslurm:gpus=vm-2:1=GPU-bbbb"
USE_A = "acbslurm:usage=vm-1;leased=4.000;train,-=0,0,0,4.000"
JS1 = "JS1:H4sIAAAAAAAAA6tWKkktLlGyUlAqS8wpTVWqBQBSaUYZEAAAAA=="


def test_a_nodes_words_go_beside_another_tools_text_and_replace_its_own() -> None:
    bb = "2026-12-06T09:00:00 setup: ok"
    once = with_node_words(bb, "vm-1", [GPUS_A, USE_A])
    assert once == f"{bb} {GPUS_A} {USE_A}"
    assert with_node_words(once, "vm-1", [GPUS_A, USE_A]) == once  # a retry: the same
    other = with_node_words(once, "vm-2", [GPUS_B])
    assert other == f"{once} {GPUS_B}"
    # a requeued run's words replace the earlier run's, in place; the other node's stay
    again = with_node_words(other, "vm-1", ["acbslurm:gpus=vm-1:1=GPU-cccc"])
    assert again == f"{bb} acbslurm:gpus=vm-1:1=GPU-cccc {USE_A} {GPUS_B}"
    # 22.05's sacctmgr wrote them lowercased: still this node's, replaced
    assert (
        with_node_words(once.lower(), "vm-1", [GPUS_A]) == f"{bb.lower()} {GPUS_A} {USE_A.lower()}"
    )


def test_the_report_reads_the_system_comment_after_jobstats_replaced_the_admin_comment() -> None:
    record = record_text(JS1, f"{GPUS_A} {USE_A}")
    assert devices_text(record) == "vm-1:0=GPU-aaaa"
    pool = pool_usage(record)
    assert pool is not None and pool.leased == 4.0
    # 22.05's sacctmgr lowercased it all: the UUID is read back in NVIDIA's case
    assert devices_text(record_text(JS1.lower(), GPUS_A.lower())) == "vm-1:0=GPU-aaaa"


def test_old_records_in_the_admin_comment_are_still_read() -> None:
    # written before the SystemComment held them (an upgrade): the AdminComment's words
    assert devices_text(record_text(f"note {GPUS_A} {USE_A}", None)) == "vm-1:0=GPU-aaaa"
    # a node with words in both: the SystemComment's; a node with none there: the older
    both = record_text(f"acbslurm:gpus=vm-1:0=GPU-old {GPUS_B}", GPUS_A)
    assert devices_text(both) == "vm-1:0=GPU-aaaa,vm-2:1=GPU-bbbb"
    assert record_text(None, None) == "" and devices_text(record_text(JS1, None)) == ""


def test_another_tools_text_is_told_from_acbslurms_words() -> None:
    assert not has_others_words(f"{GPUS_A} {USE_A.lower()}") and not has_others_words("")
    assert has_others_words(f"{GPUS_A} slurm_cred_create failure, holding job.")
