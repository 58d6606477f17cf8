"""The fast per-job JSON line and time formatting equal the plain library versions."""

from __future__ import annotations

import io
import json
import os
import time
from collections.abc import Iterator
from datetime import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acbslurm.accounting.gpuseconds import JobUsage, PoolUsage
from acbslurm.accounting.grouping import Aggregator
from acbslurm.accounting.output import job_json, job_record, write_json
from acbslurm.units import iso

text = st.text(max_size=12)  # any characters: quotes, backslashes, control, non-ASCII
secs = st.integers(min_value=0, max_value=4_000_000_000)
maybe_float = st.none() | st.floats(allow_nan=False, allow_infinity=False, width=32)


@st.composite
def pools(draw: st.DrawFn) -> PoolUsage:
    use = {
        "key": draw(st.sampled_from(["alice", "ci-bot", "-"])),
        "model": draw(st.sampled_from(["m", "org/m:1"])),
        "requests": draw(st.integers(0, 10**6)),
        "prompt_tokens": draw(st.integers(0, 10**9)),
        "completion_tokens": draw(st.integers(0, 10**9)),
        "gpu_seconds": draw(st.floats(0, 1e9)),
    }
    return PoolUsage(leased=draw(st.floats(0, 1e9)), lost=draw(st.integers(0, 9)), use=(use,))


@st.composite
def jobs(draw: st.DrawFn) -> JobUsage:
    return JobUsage(
        job_id=draw(text),
        job_id_raw=draw(st.integers(0, 2**32)),
        job_db_inx=draw(st.integers(0, 2**40)),
        uid=draw(st.integers(0, 2**32)),
        user=draw(text),
        account=draw(text),
        partition=draw(text),
        state=draw(text),
        running=draw(st.booleans()),
        gpus=draw(st.integers(0, 64)),
        submit=draw(secs),
        start=draw(secs),
        end=draw(secs),
        wait=draw(st.none() | st.integers(-(10**6), 10**9)),
        elapsed=draw(st.integers(0, 10**9)),
        gpu_seconds=draw(st.integers(0, 10**12)),
        span_start=0,
        span_end=0,
        gpu_util_ave=draw(maybe_float),
        gpu_util_max=draw(maybe_float),
        gpu_mem_max=draw(maybe_float),
        pool=draw(st.none() | pools()),
    )


@given(jobs())
@settings(max_examples=400)
def test_job_json_is_json_dumps_of_the_record(job: JobUsage) -> None:
    assert job_json(job) == json.dumps(job_record(job), sort_keys=True)


@pytest.fixture(params=["UTC", "Asia/Tokyo", "America/New_York", "Australia/Lord_Howe"])
def zone(request: pytest.FixtureRequest) -> Iterator[str]:
    old = os.environ.get("TZ")
    os.environ["TZ"] = request.param
    time.tzset()
    yield request.param
    if old is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = old
    time.tzset()


def test_iso_matches_datetime_in_zones_with_dst(zone: str) -> None:
    # Every 7919 s over two years crosses DST changes (Lord Howe shifts by 30 min).
    for ts in [*range(1_700_000_000, 1_763_000_000, 7919), -1 + 2**31, 1]:
        want = datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")
        assert iso(ts) == want, (zone, ts)
    assert iso(0) is None and iso(None) is None


def test_write_json_chunks_make_one_valid_document() -> None:
    base = dict(
        job_id="1", job_id_raw=1, job_db_inx=1, uid=1, user="u", account="a",
        partition="p", state="COMPLETED", running=False, gpus=1, submit=10, start=11,
        end=20, wait=1, elapsed=9, gpu_seconds=9, span_start=11, span_end=20,
    )  # fmt: skip
    for n in (0, 1, 1999, 2000, 2001, 4500):
        many = [JobUsage(**{**base, "job_id": str(i), "job_id_raw": i}) for i in range(n)]  # type: ignore[arg-type]
        out = io.StringIO()
        write_json(out, {"x": 1}, many, Aggregator("job", "sacct"))
        doc = json.loads(out.getvalue())
        assert [j["job_id_raw"] for j in doc["jobs"]] == list(range(n))
        assert doc["totals"]["jobs"] == n and doc["totals"]["gpu_seconds"] == 9 * n
