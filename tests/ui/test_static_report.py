"""report.html (memlens.present.static_report): self-contained, hand-counted marks, escaped text, and
opened in the browser without running anything."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from memlens.runs.writers import RESULT_FILES
from memlens.ui.sample import XSS_IMG, XSS_SCRIPT, make_sample_runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    return make_sample_runs(tmp_path_factory.mktemp("report") / "runs")


def test_written_next_to_metrics_and_self_contained(runs):
    html = (runs["lru"] / "report.html").read_text()
    assert {"report.html", "events.parquet"} <= RESULT_FILES
    assert "<script" not in html.replace("&lt;script", "")  # no script of its own
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)  # nothing fetched
    assert "lru @ 2 tokens" in html


def test_hand_counted_marks(runs):
    lru = (runs["lru"] / "report.html").read_text()
    assert lru.count('class="seg"') == 4  # a: wm then stc; b: wm; c: wm
    assert lru.count('class="cell"') == 0 and "records no values" in lru
    rule = (runs["rule"] / "report.html").read_text()
    assert rule.count('class="cell"') == 2 * 40  # a and b scored, 40 time bins
    # worst requests: r1 (1 miss) first under LRU
    rows = re.findall(r"<tr><td>(r\d)</td>", lru)
    assert rows == ["r1", "r0"]


EVIL_ID = '<img src=x onerror="document.title=1">'
EVIL_REQ = "<script>document.title = 2</script>"


@pytest.fixture(scope="module")
def evil(tmp_path_factory) -> Path:
    """A run whose item and request ids (shown in the report) are markup."""
    from memlens.testing import rq, w
    from memlens.trace.io import write_trace
    from memlens.ui.sample import write_run_folder

    root = tmp_path_factory.mktemp("evil")
    events = [w(EVIL_ID, 1, t=0.0, text=XSS_IMG), w("b", 1, t=1.0, text=XSS_SCRIPT),
              w("c", 1, t=2.0), rq(EVIL_REQ, EVIL_ID, t=3.0)]  # fmt: skip
    write_trace(root / "t.jsonl", events)
    return write_run_folder(root / "run", root / "t.jsonl", ["policy=rule", "budget=1",
                                                              "policy.admit_threshold=0"])  # fmt: skip


def test_untrusted_text_is_escaped(evil):
    html = (evil / "report.html").read_text()
    assert EVIL_ID not in html and EVIL_REQ not in html
    assert "&lt;img src=x" in html and "&lt;script&gt;" in html


@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="needs Debian's chromium")
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_opens_in_the_browser_without_running_anything(runs, evil):
    from playwright.sync_api import sync_playwright

    args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=args)
        try:
            page = browser.new_page()
            requests = []
            page.on("request", lambda r: requests.append(r.url))
            page.goto((evil / "report.html").as_uri())
            page.wait_for_timeout(300)
            assert page.title().startswith("MemLens report")  # the payloads never set it
            assert page.locator("svg.timeline rect.seg").count() >= 1
            assert page.locator("img, script").count() == 0
            page.goto((runs["rule"] / "report.html").as_uri())
            assert page.locator("svg.heatmap rect.cell").count() == 80
            page.goto((runs["lru"] / "report.html").as_uri())
            assert page.locator("svg.timeline rect.seg").count() == 4  # as hand-counted above
            assert all(u.startswith("file://") for u in requests)  # nothing from a network
        finally:
            browser.close()


def test_report_from_the_first_items_moves_equals_the_full_tables(tmp_path, monkeypatch):
    """report.html builds its moves table for the timeline's items only (issue 34): on a run
    of more items than the timeline shows, the page equals the one built from every move."""
    from memlens.datasets.archetypes import generate

    from memlens.analyze import prepared
    from memlens.analyze.eventlog import write_event_log
    from memlens.config.compose import compose_config
    from memlens.config.schema import resolve
    from memlens.present import static_report
    from memlens.runs.pipeline import run
    from memlens.trace.io import load_trace, write_trace

    write_trace(tmp_path / "t.jsonl", generate("agent", streams=6, events_per_stream=40, seed=2),
                header={"generator": "agent"})  # fmt: skip
    trace = load_trace(str(tmp_path / "t.jsonl"))
    assert trace.n_items > 2 * static_report.TIMELINE_ITEMS
    settings = resolve(compose_config("simulate", ["mlflow.enabled=false", "progress=false",
                                                   "policy=rule", "budget=300"]))  # fmt: skip
    done, _ = run(settings, trace, record_values=True)
    events = write_event_log(tmp_path / "events.parquet", done)
    metrics = {"policy": "rule", "budget": 300, "overall": {"hit_rate": 0.5}}
    fast = static_report.render(events, metrics)
    full = prepared.Prepared
    monkeypatch.setattr(prepared, "Prepared",
                        lambda path, moves_below=None: full(path))  # fmt: skip
    assert static_report.render(events, metrics) == fast
    assert fast.count('class="seg"') >= static_report.TIMELINE_ITEMS
