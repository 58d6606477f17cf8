"""`report --format html`: one self-contained page, checked in a real headless Chromium.

10,000 jobs on 8 GPUs of two nodes plus jobs without a device record: every job is
drawn, no two bars overlap in a lane, and Chromium renders the page to a screenshot
that shows the lanes in several users' colours.
"""

from __future__ import annotations

import io
import itertools
import os
import re
import shutil
import subprocess
import zlib
from pathlib import Path

from acbslurm.accounting.gpuseconds import JobUsage
from acbslurm.accounting.grouping import Aggregator
from acbslurm.accounting.html import colour, write_html

T0 = 1_790_000_000
USERS = [f"user{i}" for i in range(1, 7)]


def job(i: int, start: int, end: int, devices: str, gpus: int = 1) -> JobUsage:
    user = USERS[i % len(USERS)]
    return JobUsage(
        job_id=str(i), job_id_raw=i, job_db_inx=i, uid=1000 + i % 6, user=user, account=user,
        partition="p1", state="COMPLETED", running=False, gpus=gpus, submit=start - 5,
        start=start, end=end, wait=5, elapsed=end - start, gpu_seconds=gpus * (end - start),
        span_start=start, span_end=end, gpu_devices=devices,
    )  # fmt: skip


def history(n: int = 10_000) -> list[JobUsage]:
    """Jobs back to back on each of 8 GPUs (2 nodes x 4), 300 s each, plus 20 old ones."""
    jobs = []
    for i in range(n):
        gpu, slot = i % 8, i // 8
        node, index = f"n{gpu // 4 + 1}", gpu % 4
        start = T0 + slot * 300
        jobs.append(job(i, start, start + 290, f"{node}:{index}=GPU-{gpu:08d}"))
    jobs += [job(n + k, T0 + k * 100, T0 + k * 100 + 250, "") for k in range(20)]
    return jobs


META = {
    "cluster": "c1",
    "definition": "sacct",
    "now_unix": T0 + 4_000_000,
    "window": {
        "start": "2026-09-21",
        "end": "2026-11-10",
        "start_unix": T0 - 100,
        "end_unix": T0 + 1300 * 300,
    },
}


def page(jobs: list[JobUsage]) -> str:
    out = io.StringIO()
    write_html(out, META, jobs, Aggregator("job", "sacct"))
    return out.getvalue()


def test_every_job_is_drawn_and_no_lane_overlaps() -> None:
    text = page(history())
    bars = re.findall(
        r'<rect x="([\d.]+)" y="(\d+)" width="([\d.]+)" height="16" fill="[^"]+"><title>job ',
        text,
    )
    assert len(bars) == 10_020
    lanes: dict[str, list[tuple[float, float]]] = {}
    for x, y, w in bars:
        lanes.setdefault(y, []).append((float(x), float(x) + float(w)))
    assert len(lanes) == 8 + 3  # 8 GPUs, and the unrecorded jobs packed into 3 lanes
    for spans in lanes.values():
        spans.sort()
        # A bar is at least one pixel wide; neighbours may touch within that pixel.
        assert all(a[1] <= b[0] + 1.01 for a, b in itertools.pairwise(spans))
    assert "n1:0" in text and "n2:3" in text and "unrecorded 3" in text
    assert "<script" not in text and "http://" not in text.replace(
        "http://www.w3.org/2000/svg", ""
    )  # self-contained: no script, nothing fetched
    for user in USERS:
        assert colour(user) in text
    assert "GPU-hours per user" in text and "GPU-hours per day" in text


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def _pixels(data: bytes) -> list[bytes]:
    """Rows of an 8-bit RGB(A) PNG (as Chromium writes them), PNG filters undone."""
    width, height = _png_size(data)
    bpp = {2: 3, 6: 4}[data[25]]
    pos, idat = 8, b""
    while pos < len(data):
        size = int.from_bytes(data[pos : pos + 4], "big")
        if data[pos + 4 : pos + 8] == b"IDAT":
            idat += data[pos + 8 : pos + 8 + size]
        pos += 12 + size
    raw, stride = zlib.decompress(idat), width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        kind, line = (
            raw[y * (stride + 1)],
            bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)]),
        )
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 255
        rows.append(bytes(line))
        prev = line
    return rows


def _distinct_colours(data: bytes) -> int:
    bpp = {2: 3, 6: 4}[data[25]]
    seen = set()
    for row in _pixels(data)[::9]:
        for x in range(0, len(row) - bpp, bpp * 7):
            seen.add(row[x : x + 3])
    return len(seen)


def test_chromium_renders_the_page(tmp_path: Path) -> None:
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is needed (scripts/setup.sh installs it)"
    html = tmp_path / "report.html"
    html.write_text(page(history()))
    shot = tmp_path / "report.png"
    subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars",
         "--window-size=1640,900", f"--screenshot={shot}", f"file://{html}"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    data = shot.read_bytes()
    assert _png_size(data) == (1640, 900)
    # Lanes in six users' colours, the grey lane backgrounds, text: far more than a blank.
    assert _distinct_colours(data) >= 8


def _rgb(hsl: str) -> tuple[int, int, int]:
    import colorsys

    h, s, lum = (float(v.rstrip("%")) for v in hsl[4:-1].split(","))
    r, g, b = colorsys.hls_to_rgb(h / 360, lum / 100, s / 100)
    return round(r * 255), round(g * 255), round(b * 255)


def _columns_with(data: bytes, rgb: tuple[int, int, int]) -> list[int]:
    """x of every pixel of colour ``rgb`` (within 3 per channel) in the screenshot."""
    bpp = {2: 3, 6: 4}[data[25]]
    xs = []
    for row in _pixels(data):
        for x in range(0, len(row) - bpp + 1, bpp):
            if all(abs(row[x + i] - rgb[i]) <= 3 for i in range(3)):
                xs.append(x // bpp)
    return xs


def window_page() -> str:
    """Two hours on 4 GPUs: failed, preempted, cancelled, running and pool jobs, and the
    newest job of a user of its own, ending at the window's end."""
    from acbslurm.accounting.gpuseconds import PoolUsage

    jobs = [
        job(i, T0 + i * 600, T0 + i * 600 + 500, f"n1:{i % 4}=GPU-{i % 4:08d}") for i in range(11)
    ]
    jobs[1].state, jobs[2].state, jobs[3].state = "FAILED", "PREEMPTED", "CANCELLED by 1001"
    jobs[4].pool = PoolUsage(leased=200.0, lost=0, use=())
    newest = job(99, T0 + 6600, T0 + 7200, "n1:3=GPU-00000003")
    newest.user, newest.job_id = "newest", "4242_[1-3]"
    meta = dict(META, now_unix=T0 + 7200)
    meta["window"] = dict(META["window"], start_unix=T0, end_unix=T0 + 7200)
    out = io.StringIO()
    write_html(out, meta, [*jobs, newest], Aggregator("job", "sacct"))
    return out.getvalue()


def test_the_page_fits_its_window_and_links_every_bar_to_its_row(tmp_path: Path) -> None:
    """At 1400x900 and 800x1200 the newest job's bar is on the screen (the timeline
    scales, never cut), in the right part of it; every bar links to its job's row."""
    text = window_page()
    assert 'viewBox="0 0 ' in text and 'width="100%"' in text
    assert text.count('<a href="#job-') == 12 and 'id="job-4242_-1-3-"' in text
    for cls in ("st-fail", "st-preempt", "st-cancel", 'class="leased"'):
        assert cls in text, cls
    html = tmp_path / "window.html"
    html.write_text(text)
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is needed (scripts/setup.sh installs it)"
    for width, height in ((1400, 900), (800, 1200)):
        shot = tmp_path / f"window-{width}x{height}.png"
        subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars",
             f"--window-size={width},{height}", f"--screenshot={shot}", f"file://{html}"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        keep = Path(os.environ.get("ACBSLURM_SCREENSHOTS", ""))
        if keep.name:  # to look at them
            keep.mkdir(parents=True, exist_ok=True)
            shutil.copy(shot, keep / shot.name)
        data = shot.read_bytes()
        assert _png_size(data) == (width, height)
        # The user's colour is in the legend too (left); its bar ends at the window's end.
        right = [x for x in _columns_with(data, _rgb(colour("newest"))) if x > width // 2]
        assert right, f"the newest job's bar is not on the {width}x{height} screenshot"
        assert max(right) > width * 0.85, (width, max(right))
