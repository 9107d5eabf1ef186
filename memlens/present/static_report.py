"""``report.html``: one run's timeline, value heatmap and worst requests, in one file.

Why: a run folder (or an MLflow artifact) should be readable without a server.  The page is
plain HTML with inline SVG drawn here (no JavaScript at all, so it opens anywhere, offline,
and untrusted memory text can never run: every string is escaped).  It answers the same
DuckDB questions as the ``memlens ui`` page (``memlens.analyze.queries``), for the first page of
items and the worst requests.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

from memlens.analyze import logviews, queries

TIER_COLORS = {"wm": "#2b8a3e", "stc": "#e8a317", "lts": "#5c7cfa", "new": "#bbbbbb"}
ROW_H, LEFT, WIDTH = 14, 190, 900
TIMELINE_ITEMS = 40  # the timeline shows the run's first items (write order), all streams
HEAT_ITEMS, WORST = 30, 20  # the heatmap's scored items, the worst requests listed


def _label(text: str, n: int = 28) -> str:
    text = str(text or "")
    return escape(text if len(text) <= n else text[:n] + "…")


def timeline_svg(data: dict) -> str:
    """Items (rows) across tiers over events: one ``<rect class="seg">`` per segment."""
    items: dict[int, str] = {}
    for s in data["segments"]:
        items.setdefault(s["item"], s["item_id"])
    end = max(int(data["last_event"]), 1)
    scale = (WIDTH - LEFT - 10) / end
    rows = {item: k for k, item in enumerate(items)}
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" '
             f'height="{ROW_H * len(items) + 30}" class="timeline">']  # fmt: skip
    for item, k in rows.items():
        parts.append(f'<text x="2" y="{ROW_H * k + 11}" font-size="10">#{item} '
                     f"{_label(items[item])}</text>")  # fmt: skip
    for s in data["segments"]:
        x = LEFT + s["start"] * scale
        w = max((s["end"] - s["start"]) * scale, 1.0)
        parts.append(f'<rect class="seg" x="{x:.1f}" y="{ROW_H * rows[s["item"]] + 2}" '
                     f'width="{w:.1f}" height="{ROW_H - 4}" fill="{TIER_COLORS[s["tier"]]}">'
                     f'<title>{_label(s["item_id"], 80)}: {s["tier"]} events {s["start"]}-'
                     f'{s["end"]}</title></rect>')  # fmt: skip
    y = ROW_H * len(items) + 20
    parts.append(f'<text x="{LEFT}" y="{y}" font-size="10">event 0</text>'
                 f'<text x="{WIDTH - 80}" y="{y}" font-size="10">event {end}</text></svg>')  # fmt: skip
    return "".join(parts)


def _color(v: float | None, lo: float, hi: float) -> str:
    if v is None:
        return "#f4f4f4"
    f = 0.0 if hi <= lo else (v - lo) / (hi - lo)
    return f"rgb({int(68 + 185 * f)},{int(1 + 230 * f)},{int(84 - 50 * f)})"


def heatmap_svg(data: dict) -> str:
    """Value per item x time bin: one ``<rect class="cell">`` per cell."""
    z = data["z"]
    if not z:
        return "<p>This policy records no values (not a scoring policy).</p>"
    vals = [v for row in z for v in row if v is not None]
    lo, hi = (min(vals), max(vals)) if vals else (0.0, 1.0)
    cw = (WIDTH - LEFT - 10) / len(z[0])
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" '
             f'height="{ROW_H * len(z) + 10}" class="heatmap">']  # fmt: skip
    for k, (item, row) in enumerate(zip(data["items"], z)):
        parts.append(f'<text x="2" y="{ROW_H * k + 11}" font-size="10">'
                     f'#{data["item_index"][k]} {_label(item)}</text>')  # fmt: skip
        for b, v in enumerate(row):
            parts.append(f'<rect class="cell" x="{LEFT + b * cw:.1f}" y="{ROW_H * k}" '
                         f'width="{cw:.1f}" height="{ROW_H}" fill="{_color(v, lo, hi)}">'
                         f"<title>{'-' if v is None else f'{v:.4f}'}</title></rect>")  # fmt: skip
    parts.append("</svg>")
    return "".join(parts)


def requests_table(data: dict) -> str:
    head = "<tr><th>request</th><th>stream</th><th>event</th><th>needs</th><th>misses</th></tr>"
    rows = "".join(f"<tr><td>{escape(str(r['request_id']))}</td><td>{escape(str(r['stream']))}"
                   f"</td><td>{r['event']}</td><td>{r['needs']}</td><td>{r['misses']}</td></tr>"
                   for r in data["rows"])  # fmt: skip
    return f'<table class="worst">{head}{rows}</table>'


def render(events: Path, metrics: dict) -> str:
    """The page's HTML for one run's ``events.parquet`` and ``metrics.json`` content."""
    from memlens.analyze.prepared import Prepared

    run = Prepared(events, moves_below=TIMELINE_ITEMS)  # the timeline's page: items 0..39
    return page(queries.timeline(run, limit=TIMELINE_ITEMS), queries.heatmap(run, limit=HEAT_ITEMS),
                queries.requests_page(run, limit=WORST), metrics)  # fmt: skip


def render_log(log: logviews.EventLog, metrics: dict) -> str:
    """The same page from the event log's columns in memory (``memlens.analyze.logviews``):
    what ``simulate`` writes, without reading ``events.parquet`` back."""
    return page(logviews.timeline(log, TIMELINE_ITEMS), logviews.heatmap(log, HEAT_ITEMS),
                logviews.requests_page(log, WORST), metrics)  # fmt: skip


def page(tl: dict, hm: dict, worst: dict, metrics: dict) -> str:
    """The HTML of the three views (timeline, value heatmap, worst requests)."""
    ov = metrics.get("overall", {})
    facts = "".join(f"<li>{escape(k)}: {escape(str(ov[k]))}</li>" for k in
                    ("hit_rate", "request_success", "evictions", "events") if k in ov)  # fmt: skip
    title = f"{metrics.get('policy')} @ {metrics.get('budget')} tokens"
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>MemLens report: {escape(title)}</title>
<style>body{{font-family:sans-serif;margin:1em 2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:2px 6px;font-size:.85em}}</style></head><body>
<h1>MemLens report: {escape(title)}</h1>
<p>trace {escape(str(metrics.get("trace", {}).get("path")))}</p><ul>{facts}</ul>
<h2>Timeline: the first {len({s["item"] for s in tl["segments"]})} of {tl["total_items"]} items
across tiers (green wm, amber stc, blue lts)</h2>{timeline_svg(tl)}
<h2>Value heatmap: {len(hm["z"])} of {hm["total_items"]} scored items</h2>{heatmap_svg(hm)}
<h2>Worst requests ({worst["total"]} requests in all)</h2>{requests_table(worst)}
</body></html>"""


def write_static_report(path: Path, events: Path | logviews.EventLog, metrics: dict) -> Path:
    """Write ``report.html`` (atomically) next to the run's other files, from the run's
    ``events.parquet`` or its event log still in memory."""
    from memlens._util.atomic import write_text

    html = (
        render_log(events, metrics)
        if isinstance(events, logviews.EventLog)
        else render(events, metrics)
    )
    write_text(path, html)
    return path
