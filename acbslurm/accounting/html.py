"""`acbslurm report --format html`: one self-contained page (inline SVG, no script, no
network) with the GPU timeline and the totals per user and per day.

The timeline has one lane per GPU (node and Slurm index, the UUID on hover), built
from the devices the prolog kept in each job's AdminComment; a job is drawn in the
lane of every GPU it held, coloured by user. Jobs without such a record (before the
hooks were installed, or another cluster) are packed into "unrecorded" lanes so that
none overlaps another. Recorded jobs that overlap on one GPU (a data error, see
``overlaps.py``) are outlined in red under a banner that counts them. 10,000 jobs draw
as 10,000 rectangles of at least one pixel: a browser shows that at once, and <title>
tooltips name each job.

The page fits its window: every chart is a scalable SVG (``viewBox``, width 100%), so a
narrow window shrinks the timeline instead of cutting off its newest minutes. Each bar
links to the job's row in the table of the window's jobs below it; a bar's outline
tells its state (failed, preempted or requeued, cancelled, running), and a pool job's
bar (``acbslurm serve``, or a broker's programs) has a dark band whose length is the
share of its allocation that its leases held.
"""

from __future__ import annotations

import hashlib
import html
import re
import time
from collections.abc import Iterable
from typing import Any, TextIO

from acbslurm.accounting.gpuseconds import JobUsage
from acbslurm.accounting.grouping import Aggregator
from acbslurm.accounting.output import MAX_OVERLAPS_SHOWN, left_out_note
from acbslurm.accounting.overlaps import OverlapCheck
from acbslurm.units import iso
from acbslurm.values import frozen

WIDTH = 1400  # px of the time axis
LANE = 18  # px per lane
LEFT = 190  # px for lane labels
DAY = 86400


@frozen
class Bar:
    lane: str
    start: int
    end: int
    job: JobUsage


def colour(user: str) -> str:
    """A stable, distinct colour per user."""
    h = int(hashlib.sha256(user.encode()).hexdigest()[:6], 16)
    return f"hsl({h % 360},{55 + h % 25}%,{42 + (h >> 9) % 18}%)"


def _lanes(jobs: list[JobUsage], now: int) -> tuple[list[str], list[Bar], dict[str, str]]:
    """Lane names in order, the bars, and each GPU lane's UUID: a bar per GPU a started
    job recorded (its lane the GPU's), then those of the jobs that recorded none."""
    bars: list[Bar] = []
    uuids: dict[str, str] = {}
    order: dict[str, tuple[str, int, str]] = {}  # lanes by node, then index as a number
    unrecorded: list[JobUsage] = []
    for j in jobs:
        if not j.start or not j.gpus:
            continue
        if not j.gpu_devices:
            unrecorded.append(j)
            continue
        for item in j.gpu_devices.split(","):
            where, _, uuid = item.partition("=")
            uuids[where] = uuid
            node, _, index = where.rpartition(":")
            order[where] = (
                node,
                int(index) if index.isascii() and index.isdigit() else 1 << 30,
                index,
            )
            bars.append(Bar(where, j.start, j.end or now, j))
    lanes = sorted(uuids, key=order.__getitem__)
    packed, count = _packed_bars(unrecorded, now)
    bars += packed
    lanes += [f"unrecorded {i + 1}" for i in range(count)]
    return lanes, bars, uuids


def _packed_bars(unrecorded: list[JobUsage], now: int) -> tuple[list[Bar], int]:
    """The bars of ``unrecorded`` jobs on lanes "unrecorded N", and how many lanes."""
    bars: list[Bar] = []
    # Interval packing: each unrecorded job goes to the first lane free at its start.
    free_at: list[int] = []
    for j in sorted(unrecorded, key=lambda j: j.start):
        end = j.end or now
        for _ in range(max(1, j.gpus)):
            slot = next((i for i, t in enumerate(free_at) if t <= j.start), None)
            if slot is None:
                free_at.append(0)
                slot = len(free_at) - 1
            free_at[slot] = end
            bars.append(Bar(f"unrecorded {slot + 1}", j.start, end, j))
    return bars, len(free_at)


# complexity: an SVG is written in drawing order (lanes, ticks, bars, the banner on top), each loop
# one layer placed by the same scale, rows and height; split, every helper would take all three.
def _timeline(jobs: list[JobUsage], t0: int, t1: int, now: int) -> str:
    lanes, bars, uuids = _lanes(jobs, now)
    if not bars:
        return "<p>No job with GPUs started in this window.</p>"
    check = OverlapCheck(now)
    for j in jobs:
        check.add(j)
    flagged = check.jobs()
    scale = WIDTH / max(1, t1 - t0)
    row = {lane: i for i, lane in enumerate(lanes)}
    height = 30 + LANE * len(lanes)
    out = [
        f'<svg class="timeline" viewBox="0 0 {LEFT + WIDTH + 10} {height}" width="100%" '
        f'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="GPU timeline">'
    ]
    for lane, i in row.items():
        y = 20 + i * LANE
        label = html.escape(lane)
        tip = html.escape(uuids.get(lane, "jobs without a device record"))
        out.append(
            f'<text x="{LEFT - 8}" y="{y + 13}" text-anchor="end" class="lane">'
            f"<title>{tip}</title>{label}</text>"
            f'<rect x="{LEFT}" y="{y}" width="{WIDTH}" height="{LANE - 2}" class="bg"/>'
        )
    # Ticks at the first round step (a minute ... a year) giving 12 or fewer.
    step = next(
        s
        for s in (60, 600, 3600, 6 * 3600, DAY, 7 * DAY, 30 * DAY, 365 * DAY, 1 << 40)
        if max(1, t1 - t0) / s <= 12
    )
    for t in range((t0 // step + 1) * step, t1, step):
        x = LEFT + (t - t0) * scale
        # A label near the right edge ends at its tick (it would be cut otherwise).
        end = ' text-anchor="end"' if x > LEFT + WIDTH - 70 else ""
        text = iso(t) or ""
        when = text[5:16].replace("T", " ") if t1 - t0 < 2 * DAY else text[:10]
        out.append(
            f'<line x1="{x:.1f}" y1="14" x2="{x:.1f}" y2="{height}" class="tick"/>'
            f'<text x="{x:.1f}" y="11" class="ticklabel"{end}>{html.escape(when)}</text>'
        )
    for b in bars:
        x0 = LEFT + (max(b.start, t0) - t0) * scale
        w = max(1.0, (min(b.end, t1) - max(b.start, t0)) * scale)
        out.append(_bar(b.job, x0, 20 + row[b.lane] * LANE, w, b.job.job_id in flagged))
    out.append("</svg>")
    found = check.found
    if found:  # the banner over a timeline that would draw two jobs on one GPU at once
        items = "".join(f"<li>{html.escape(o.text())}</li>" for o in found[:MAX_OVERLAPS_SHOWN])
        more = len(found) - MAX_OVERLAPS_SHOWN
        rest = f"<li>... and {more} more (--format json lists all)</li>" if more > 0 else ""
        out.insert(
            0,
            f'<div class="dataerror"><p><b>Data error: {len(found)} GPU overlap(s)</b>: two '
            "jobs on one GPU at once, which Slurm never does, so their recorded devices are "
            f"wrong. Their bars are outlined in red.</p><ul>{items}{rest}</ul></div>",
        )
    return "".join(out)


_STATE_CLASS = {
    "FAILED": "st-fail",
    "NODE_FAIL": "st-fail",
    "OUT_OF_MEMORY": "st-fail",
    "TIMEOUT": "st-fail",
    "BOOT_FAIL": "st-fail",
    "DEADLINE": "st-fail",
    "PREEMPTED": "st-preempt",
    "REQUEUED": "st-preempt",
    "CANCELLED": "st-cancel",
}


def anchor(job_id: str) -> str:
    """The job's row id in the table (``12_[1-3]`` is ``job-12_-1-3-``)."""
    return "job-" + re.sub(r"[^A-Za-z0-9_]", "-", job_id)


def _bar(j: JobUsage, x0: float, y: int, w: float, flagged: bool) -> str:
    """One job's bar on one GPU lane: linked to its row, outlined by its state, with
    a pool job's leased share as a dark band."""
    tip = (
        f"job {j.job_id} ({j.user}, {j.state}) {iso(j.start)} .. "
        f"{iso(j.end) if j.end else 'running'}, {j.gpus} GPU(s) {j.gpu_devices}"
    )
    classes = [_STATE_CLASS.get(j.state.split()[0] if j.state else "", "")]
    if j.running:
        classes.append("st-run")
    if flagged:
        classes.append("overlap")
        tip += " - DATA ERROR: overlaps another job on this GPU"
    cls = " ".join(c for c in classes if c)
    band = ""
    if j.pool is not None and j.gpu_seconds > 0:
        share = min(1.0, j.pool.leased / j.gpu_seconds)
        tip += f"; leases held {j.pool.leased:.1f} of {j.gpu_seconds} GPU-seconds"
        band = (
            f'<rect x="{x0:.1f}" y="{y + LANE - 7}" width="{w * share:.1f}" height="5" '
            'class="leased"/>'
        )
    return (
        f'<a href="#{anchor(j.job_id)}"><rect x="{x0:.1f}" y="{y}" width="{w:.1f}" '
        f'height="{LANE - 2}" fill="{colour(j.user)}"' + (f' class="{cls}"' if cls else "") + ">"
        f"<title>{html.escape(tip)}</title></rect>{band}</a>"
    )


def _job_table(jobs: list[JobUsage]) -> str:
    """Every job of the window, linked from its bars."""
    if not jobs:
        return ""
    rows = []
    for j in jobs:
        pool = "-"
        if j.pool is not None:
            idle = max(0.0, j.gpu_seconds - j.pool.leased)
            pool = f"{j.pool.leased:.1f} leased, {idle:.1f} idle"
        cells = (
            j.job_id,
            j.user,
            j.state + (" (running)" if j.running else ""),
            str(j.gpus),
            iso(j.start) or "-",
            iso(j.end) or "-",
            f"{j.gpu_seconds / 3600:.2f}",
            j.gpu_devices or "-",
            pool,
        )
        tds = "".join(f"<td>{html.escape(c)}</td>" for c in cells)
        rows.append(f'<tr id="{anchor(j.job_id)}">{tds}</tr>')
    heads = ("job", "user", "state", "GPUs", "start", "end", "GPU-h", "devices", "pool GPU-s")
    th = "".join(f"<th>{h}</th>" for h in heads)
    return (
        f'<h2>Jobs</h2><div class="jobs"><table><thead><tr>{th}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


STATES_LEGEND = (
    '<div class="legend states"><span><svg width="14" height="12"><rect width="14" '
    'height="12" class="st-fail" fill="#aaa"/></svg>failed, timed out, out of memory</span>'
    '<span><svg width="14" height="12"><rect width="14" height="12" class="st-preempt" '
    'fill="#aaa"/></svg>preempted or requeued</span><span><svg width="14" height="12">'
    '<rect width="14" height="12" class="st-cancel" fill="#aaa"/></svg>cancelled</span>'
    '<span><svg width="14" height="12"><rect width="14" height="12" class="st-run" '
    'fill="#aaa"/></svg>running</span><span><svg width="14" height="12"><rect width="14" '
    'height="12" fill="#aaa"/><rect y="7" width="9" height="5" class="leased"/></svg>'
    "a pool's leases: their share of its allocation</span></div>"
)


def _bars(title: str, values: list[tuple[str, float]], colours: dict[str, str]) -> str:
    if not values:
        return ""
    widest = max(v for _, v in values) or 1.0
    height = 20 * len(values) + 10
    out = [
        f"<h2>{html.escape(title)}</h2>",
        f'<svg class="bars" viewBox="0 0 900 {height}" width="900" '
        'xmlns="http://www.w3.org/2000/svg">',
    ]
    for i, (key, v) in enumerate(values):
        y = 5 + 20 * i
        w = 560 * v / widest
        fill = colours.get(key, "#4a78b5")
        out.append(
            f'<text x="190" y="{y + 13}" text-anchor="end">{html.escape(key)}</text>'
            f'<rect x="200" y="{y}" width="{w:.1f}" height="16" fill="{fill}"/>'
            f'<text x="{206 + w:.1f}" y="{y + 13}">{v:.2f} GPU-h</text>'
        )
    out.append("</svg>")
    return "".join(out)


STYLE = """
body{font:13px system-ui,sans-serif;margin:20px;color:#222}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
.meta{color:#555}.lane{font:11px monospace}.bg{fill:#f2f2f2}
.tick{stroke:#ccc;stroke-width:1}.ticklabel{font:10px sans-serif;fill:#666}
.legend span{display:inline-block;margin-right:14px}
.overlap{stroke:#d00;stroke-width:2}
.dataerror{border:2px solid #d00;padding:0 8px;margin:8px 0;color:#900}
.legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px}
.legend svg{margin-right:4px;vertical-align:-1px}
svg.timeline{width:100%;height:auto}svg.bars{max-width:100%;height:auto}
.st-fail{stroke:#000;stroke-width:1.5;stroke-dasharray:3 2}
.st-preempt{fill-opacity:.55;stroke:#333;stroke-width:1;stroke-dasharray:1 2}
.st-cancel{fill-opacity:.4}.st-run{stroke:#000;stroke-width:1}
.leased{fill:#000;fill-opacity:.45}
.jobs{max-height:420px;overflow:auto;border:1px solid #ddd}
.jobs table{border-collapse:collapse;font:12px monospace}
.jobs th{position:sticky;top:0;background:#eee;text-align:left}
.jobs td,.jobs th{padding:2px 8px;white-space:nowrap}.jobs tr:target{background:#ffe9a8}
"""


def write_html(
    out: TextIO, meta: dict[str, Any], jobs: Iterable[JobUsage], agg: Aggregator
) -> None:
    """The page for ``jobs`` (also fed to ``agg``, for the totals)."""
    listed = []
    for j in jobs:
        agg.add(j)
        listed.append(j)
    win = meta["window"]
    now = int(meta["now_unix"])
    t0 = int(win["start_unix"])
    t1 = min(int(win["end_unix"]), now)
    started = [j.start for j in listed if j.start]
    if started:
        t0 = max(t0, min(started))
    per_user, per_day = _gpu_hours(listed, now)
    colours = {u: colour(u) for u in per_user}
    legend = "".join(
        f'<span><i style="background:{c}"></i>{html.escape(u)}</span>'
        for u, c in sorted(colours.items())
    )
    shown = f" Shown: {html.escape(meta['visible'])}." if "visible" in meta else ""
    note = left_out_note(agg)
    if note:
        shown += f" <b>{html.escape(note[0].upper() + note[1:])}.</b>"
    out.write(
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>GPU usage {html.escape(str(meta['cluster']))}</title><style>{STYLE}</style>"
        "</head><body>"
        f"<h1>GPU usage on {html.escape(str(meta['cluster']))}</h1>"
        f'<p class="meta">{html.escape(str(win["start"]))} .. {html.escape(str(win["end"]))}; '
        f"{len(listed)} jobs, {agg.total.gpu_seconds / 3600:.2f} GPU-hours "
        f"({html.escape(meta['definition'])} definition).{shown}</p>"
        f'<h2>Who used which GPU when</h2><div class="legend">{legend}</div>{STATES_LEGEND}'
        f"{_timeline(listed, t0, t1, now)}"
        + _job_table(listed)
        + _bars("GPU-hours per user", sorted(per_user.items(), key=lambda kv: -kv[1]), colours)
        + _bars("GPU-hours per day", sorted(per_day.items()), {})
        + "</body></html>\n"
    )


def _gpu_hours(listed: list[JobUsage], now: int) -> tuple[dict[str, float], dict[str, float]]:
    """GPU-hours per user, and per local day (a job's split at each midnight it ran over)."""
    per_user: dict[str, float] = {}
    per_day: dict[str, float] = {}
    for j in listed:
        per_user[j.user] = per_user.get(j.user, 0.0) + j.gpu_seconds / 3600
        if not (j.start and j.gpus):
            continue
        t, end = j.start, j.end or now
        while t < end:
            day = (iso(t) or "")[:10]
            lt = time.localtime(t)
            midnight = int(time.mktime((lt.tm_year, lt.tm_mon, lt.tm_mday + 1, 0, 0, 0, 0, 0, -1)))
            step = min(end, midnight) - t
            per_day[day] = per_day.get(day, 0.0) + j.gpus * step / 3600
            t += max(step, 1)
    return per_user, per_day
