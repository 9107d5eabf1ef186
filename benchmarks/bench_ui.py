"""First paint of the analytics page on a 1,000,000-event run, in a real browser.

    python benchmarks/bench_ui.py                      # 1,000,000 events, policy rule
    python benchmarks/bench_ui.py --events 100000 --policy lru

Builds a run folder from a generated trace (``generate_simple``, 8 streams; the run's
``events.parquet`` has several million rows), serves it with ``memlens ui`` on 127.0.0.1 and
opens the page in Debian's chromium (Playwright, headless).  Per page load (the first one
cold, then ``--loads - 1`` more), measured in the browser from navigation start:

* first contentful paint (the page's own text, ``performance.getEntriesByType('paint')``);
* the timeline chart drawn (first chart paint: its data queried by DuckDB on the server);
* every view drawn (timeline, heatmap, graph, worst requests, feedback).

Also the bytes each API answer shipped (the page never receives the log itself) and each
query's server time.  The issue's bar: first paint under 2 s.  Results go to
``benchmarks/results/ui.md``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

from memlens._util.atomic import write_text
from memlens.trace.generate import generate_simple
from memlens.trace.io import write_trace
from memlens.ui.sample import write_run_folder
from memlens.ui.server import UiConfig, running
from memlens.ui.state import SESSION_COOKIE

TOKEN = "X-MemLens-Token"

RESULTS = Path(__file__).parent / "results"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
API = ("summary", "timeline", "heatmap", "graph", "requests", "influence")


def build_run(root: Path, events: int, policy: str, budget: int) -> tuple[Path, float]:
    """The run folder ``root/runs/big`` (kept from an earlier call with the same root)."""
    if (root / "runs" / "big" / "events.parquet").is_file():
        return root / "runs" / "big", 0.0
    streams = 8
    trace = root / "trace.jsonl"
    write_trace(trace, generate_simple(seed=0, streams=streams,
                                       events_per_stream=events // streams))  # fmt: skip
    t0 = time.perf_counter()
    folder = write_run_folder(root / "runs" / "big", trace, [f"policy={policy}",
                                                             f"budget={budget}"])  # fmt: skip
    return folder, time.perf_counter() - t0


def api_sizes(url: str, token: str) -> list[tuple[str, int, float]]:
    out = []
    for name in API:
        q = "run=big" + ("&request=0" if name == "influence" else "")
        t0 = time.perf_counter()
        req = urllib.request.Request(f"{url}/api/{name}?{q}", headers={TOKEN: token})
        with urllib.request.urlopen(req, timeout=120) as r:
            body = r.read()
        out.append((name, len(body), time.perf_counter() - t0))
        json.loads(body)
    return out


def _timed_load(page, url: str) -> dict:
    page.goto(f"{url}/?run=big")
    page.wait_for_selector("body[data-timeline='ready']", timeout=120000)
    chart = page.evaluate("performance.now()")
    page.wait_for_selector("body[data-page='ready']", timeout=120000)
    done = page.evaluate("performance.now()")
    fcp = page.evaluate("performance.getEntriesByType('paint')"
                        ".filter(e => e.name === 'first-contentful-paint')"
                        ".map(e => e.startTime)[0]")  # fmt: skip
    return {"fcp_ms": fcp, "timeline_ms": chart, "all_ms": done}


def _context(browser, url: str, state):
    """A fresh browser profile holding a session cookie (a one-time code spent for it, so
    the timed load is the page's, not the login's redirect)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    session = state.redeem(state.new_code())
    context.add_cookies([{"name": SESSION_COOKIE, "value": session, "url": url}])
    return context


def page_loads(url: str, loads: int, state) -> tuple[list[dict], list[dict]]:
    """Cold loads (each in a fresh browser profile: nothing cached) and warm loads (one
    profile, the page loaded again: plotly.min.js from the HTTP cache, as a user who keeps
    the page open or comes back sees it)."""
    from playwright.sync_api import sync_playwright

    cold, warm = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=ARGS)
        for _ in range(loads):
            context = _context(browser, url, state)
            cold.append(_timed_load(context.new_page(), url))
            context.close()
        context = _context(browser, url, state)
        page = context.new_page()
        _timed_load(page, url)  # fills the cache
        for _ in range(loads):
            warm.append(_timed_load(page, url))
        context.close()
        browser.close()
    return cold, warm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--policy", default="rule")
    ap.add_argument("--budget", type=int, default=2048)
    ap.add_argument("--loads", type=int, default=5)
    ap.add_argument("--out", default=str(RESULTS / "ui.md"))
    ap.add_argument("--keep", help="build the run in this folder, or reuse the one there")
    args = ap.parse_args()
    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.keep or tmp)
        folder, run_s = build_run(root, args.events, args.policy, args.budget)
        rows = pq.ParquetFile(folder / "events.parquet").metadata.num_rows
        mb = (folder / "events.parquet").stat().st_size / 1e6
        print(f"run: {args.events:,} events, {rows:,} log rows ({mb:.0f} MB), {run_s:.1f} s")
        cfg = UiConfig(root=str(root / "runs"), port=0, mlflow_uri=None,
                       feedback_store=str(root / "fb.db"), prewarm=False)  # fmt: skip
        with running(cfg) as (url, state):
            t0 = time.perf_counter()  # the first question loads the run (once per server)
            req = urllib.request.Request(f"{url}/api/summary?run=big", headers={TOKEN: state.token})
            with urllib.request.urlopen(req, timeout=600) as r:
                r.read()
            prepare_s = time.perf_counter() - t0
            print(f"first open (the server loads the log into DuckDB): {prepare_s:.1f} s")
            cold, warm = page_loads(url, args.loads, state)
            sizes = api_sizes(url, state.token)
    table = []
    for label, loads in (("cold", cold), ("warm", warm)):
        for k, r in enumerate(loads):
            print(f"{label} load {k + 1}: first contentful paint {r['fcp_ms']:.0f} ms, timeline "
                  f"chart {r['timeline_ms']:.0f} ms, every view {r['all_ms']:.0f} ms")  # fmt: skip
        med = {k: statistics.median(r[k] for r in loads) for k in loads[0]}
        table += [f"| {label} | {min(r['fcp_ms'] for r in loads):.0f} / {med['fcp_ms']:.0f} | "
                  f"{min(r['timeline_ms'] for r in loads):.0f} / {med['timeline_ms']:.0f} | "
                  f"{min(r['all_ms'] for r in loads):.0f} / {med['all_ms']:.0f} |"]  # fmt: skip
    for name, size, wall in sizes:
        print(f"/api/{name}: {size:,} bytes in {wall * 1000:.0f} ms")
    lines = [
        "# Analytics page: first paint on a large run",
        "",
        f"`python benchmarks/bench_ui.py --events {args.events} --policy {args.policy}` on "
        f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, "
        f"Debian chromium (headless, Playwright).  Run: `generate_simple(seed=0, streams=8)`, "
        f"{args.events:,} events, policy {args.policy} at {args.budget} tokens; events.parquet "
        f"{rows:,} rows, {mb:.0f} MB.",
        "",
        f"The first question about the run loads its log into DuckDB tables sorted for the "
        f"views (`memlens/analyze/prepared.py`), once per server process: {prepare_s:.1f} s "
        "(`memlens ui` does this for the newest run in the background as it starts; measured "
        "here without that).  The page loads below come after that.",
        "",
        f"Milliseconds from navigation start, best / median of {args.loads} loads.  Cold: a "
        "fresh browser profile each time (plotly.js, the cartesian bundle of 1.5 MB, downloaded and compiled); "
        "warm: the same profile loading the page again (plotly.min.js from the HTTP cache).  "
        "Every answer is computed again by DuckDB for every load (no answer is cached).",
        "",
        "| loads | first contentful paint | timeline chart drawn | every view drawn |",
        "|---|---|---|---|",
        *table,
        "",
        "What each API answer ships (the page never receives the log itself):",
        "",
        "| endpoint | bytes | ms |",
        "|---|---|---|",
        *[f"| /api/{n} | {s:,} | {w * 1000:.0f} |" for n, s, w in sizes],
    ]
    write_text(args.out, "\n".join(lines) + "\n")
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
