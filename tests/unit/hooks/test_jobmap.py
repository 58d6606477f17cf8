"""The GPU-to-job files of dcgm-exporter and jobstats (hooks/jobmap.py), on real files:
what each tool parses, a shared GPU, requeues, stale jobs, links, and hooks at once."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest

from acbslurm.errors import ConfigError
from acbslurm.hooks.jobmap import STATE, MapDirs, add_job, drop_job

A = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
B = "GPU-bbbbbbbb-0000-0000-0000-000000000000"
MIG = "MIG-cccccccc-0000-0000-0000-000000000000"


def dirs(tmp: Path) -> MapDirs:
    (tmp / "rec").mkdir(exist_ok=True)
    return MapDirs(str(tmp / "rec"), str(tmp / "dcgm"), str(tmp / "gpustat"))


def record(d: MapDirs, job: str) -> None:
    """The job's record, as the prolog wrote it before the files (jobs without one are stale)."""
    Path(d.record_dir, f"{job}.json").write_text("{}")


def files(path: str) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(Path(path).iterdir())}


def test_two_jobs_on_two_gpus_and_gone_after(tmp_path: Path) -> None:
    d = dirs(tmp_path)
    for job, uid, gpu in (("11", 1001, (0, A)), ("12", 1002, (1, B))):
        record(d, job)
        add_job(d, job, uid, [gpu])
    assert files(d.dcgm) == {"0": "11\n", "1": "12\n", A: "11\n", B: "12\n"}
    assert files(d.gpustat) == {"0": "11 1001\n", "1": "12 1002\n", A: "11 1001\n", B: "12 1002\n"}
    drop_job(d, "11")
    assert files(d.dcgm) == {"1": "12\n", B: "12\n"}
    assert files(d.gpustat) == {"1": "12 1002\n", B: "12 1002\n"}
    drop_job(d, "12")
    assert files(d.dcgm) == files(d.gpustat) == {}
    assert os.stat(d.dcgm).st_mode & 0o777 == 0o755


def test_the_index_is_nvmls_not_slurms(tmp_path: Path) -> None:
    # The prolog gives NVML's index (the inventory's): GPU A is NVML's 3 here.
    d = dirs(tmp_path)
    record(d, "5")
    add_job(d, "5", 1001, [(3, A)])
    assert set(files(d.dcgm)) == {"3", A}


def test_a_shared_gpu_lists_both_jobs_for_dcgm_and_the_first_for_jobstats(tmp_path: Path) -> None:
    d = dirs(tmp_path)
    for job, uid in (("21", 1001), ("22", 1002)):
        record(d, job)
        add_job(d, job, uid, [(0, A)])
    assert files(d.dcgm)["0"] == "21\n22\n"
    assert files(d.gpustat)["0"] == "21 1001\n"  # jobstats parses one job per file
    drop_job(d, "21")  # the other job keeps its line, and now jobstats' file too
    assert files(d.dcgm) == {"0": "22\n", A: "22\n"}
    assert files(d.gpustat) == {"0": "22 1002\n", A: "22 1002\n"}


def test_a_requeued_job_is_rewritten_onto_its_new_gpus(tmp_path: Path) -> None:
    d = dirs(tmp_path)
    record(d, "31")
    add_job(d, "31", 1001, [(0, A)])
    add_job(d, "31", 1001, [(1, B)])  # its epilog never ran: the new run replaces it
    assert files(d.dcgm) == {"1": "31\n", B: "31\n"}
    add_job(d, "31", 1001, [])  # a run without GPUs
    assert files(d.dcgm) == {}


def test_a_job_whose_record_is_gone_is_dropped_at_the_next_hook(tmp_path: Path) -> None:
    d = dirs(tmp_path)
    record(d, "41")
    add_job(d, "41", 1001, [(0, A)])
    os.unlink(Path(d.record_dir, "41.json"))  # slurmd died: no epilog
    record(d, "42")
    add_job(d, "42", 1002, [(1, B)])
    assert files(d.dcgm) == {"1": "42\n", B: "42\n"}
    assert sorted(os.listdir(Path(d.record_dir, STATE))) == [".lock", "42.json"]


def test_mig_devices_go_to_their_parents_index_for_dcgm_and_by_uuid_for_jobstats(
    tmp_path: Path,
) -> None:
    d = dirs(tmp_path)
    record(d, "51")
    add_job(d, "51", 1001, [(2, MIG)])
    assert files(d.dcgm) == {"2": "51\n", MIG: "51\n"}
    assert files(d.gpustat) == {MIG: "51 1001\n"}


def test_other_files_in_the_directory_are_left_alone(tmp_path: Path) -> None:
    d = dirs(tmp_path)
    os.makedirs(d.dcgm)
    Path(d.dcgm, "7").write_text("site-job\n")
    record(d, "61")
    add_job(d, "61", 1001, [(0, A)])
    drop_job(d, "61")
    assert files(d.dcgm) == {"7": "site-job\n"}


def test_a_link_in_place_of_a_file_is_replaced_not_followed(tmp_path: Path) -> None:
    d = dirs(tmp_path)
    os.makedirs(d.dcgm)
    target = tmp_path / "target"
    target.write_text("keep\n")
    os.symlink(target, Path(d.dcgm, "0"))
    record(d, "71")
    add_job(d, "71", 1001, [(0, A)])
    assert target.read_text() == "keep\n"
    assert not Path(d.dcgm, "0").is_symlink()
    assert Path(d.dcgm, "0").read_text() == "71\n"


def test_a_directory_that_is_a_link_or_others_may_write_is_refused(tmp_path: Path) -> None:
    d = dirs(tmp_path)
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, d.dcgm)
    record(d, "81")
    with pytest.raises(ConfigError, match="a link or not a directory"):
        add_job(d, "81", 1001, [(0, A)])
    assert list(real.iterdir()) == []
    os.unlink(d.dcgm)
    os.makedirs(d.dcgm)
    os.chmod(d.dcgm, 0o777)
    with pytest.raises(ConfigError, match="others may write it"):
        add_job(d, "81", 1001, [(0, A)])
    if os.geteuid() == 0:
        os.chmod(d.dcgm, 0o755)
        os.chown(d.dcgm, 65534, 65534)  # nobody's
        with pytest.raises(ConfigError, match="is not root's"):
            add_job(d, "81", 1001, [(0, A)])


def test_a_relative_directory_is_refused(tmp_path: Path) -> None:
    d = MapDirs(str(tmp_path), "run/dcgm", "")
    record(d, "91")
    with pytest.raises(ConfigError, match="not an absolute path"):
        add_job(d, "91", 1001, [(0, A)])


def test_off_when_unset_and_no_lock_for_a_job_without_gpus(tmp_path: Path) -> None:
    add_job(MapDirs(str(tmp_path)), "1", 1001, [(0, A)])
    drop_job(MapDirs(str(tmp_path)), "1")
    d = dirs(tmp_path)
    add_job(d, "2", 1001, [])
    drop_job(d, "2")
    assert not (tmp_path / "rec" / STATE).exists()
    assert list(tmp_path.iterdir()) == [tmp_path / "rec"]


def _churn(d: MapDirs, job: str, rounds: int) -> None:
    for _ in range(rounds):
        add_job(d, job, 1000, [(0, A)])
        drop_job(d, job)
    add_job(d, job, 1000, [(0, A)])


def test_hooks_at_once_on_one_gpu_lose_no_line(tmp_path: Path) -> None:
    d = dirs(tmp_path)
    jobs = [str(100 + i) for i in range(6)]
    for job in jobs:
        record(d, job)
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_churn, args=(d, job, 15)) for job in jobs]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert sorted(files(d.dcgm)["0"].split()) == jobs
    assert sorted(files(d.dcgm)[A].split()) == jobs
    assert files(d.gpustat)["0"].split()[1] == "1000"
    assert not [n for n in os.listdir(d.dcgm) if n.startswith(".")]  # no temporary file left
    for job in jobs:
        drop_job(d, job)
    assert files(d.dcgm) == files(d.gpustat) == {}
