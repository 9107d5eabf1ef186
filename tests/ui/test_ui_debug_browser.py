"""The debugging loop in a real browser (Debian's chromium through Playwright, as
test_ui_browser.py): from a missed need through its chain of causes to a pin, the what-if that
shows the request gained and the one lost, undo, a shared link that reopens the same view, a
bad link that says what is wrong, keyboard-only navigation to the influence view, streams in
natural order with a per-stream default, and the diff offering only runs of the same trace.
Every expectation is counted by hand from memlens.ui.sample (tradeoff_events: pinning a gains
r1 and loses r2; multi_stream_events: the sample once per stream)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memlens.ui.sample import make_sample_runs, multi_stream_events, tradeoff_events
from memlens.ui.server import UiConfig, running
from memlens.ui.state import SESSION_COOKIE

STREAMS = ["agent10", "agent2", "agent1"]


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    base = tmp_path_factory.mktemp("uidbg")
    make_sample_runs(base / "runs", tradeoff_events())
    make_sample_runs(base / "runs" / "multi", multi_stream_events(STREAMS))
    cfg = UiConfig(root=str(base / "runs"), port=0, mlflow_uri=None, prewarm=False,
                   feedback_store=str(base / "fb.db"))  # fmt: skip
    with running(cfg) as (url, state):
        yield url, state


@pytest.fixture
def new_page(browser, ui):
    """A factory of fresh browser profiles, each with its own session (a spent code)."""
    url, state = ui
    contexts = []

    def make():
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        contexts.append(context)
        session = state.redeem(state.new_code())
        context.add_cookies([{"name": SESSION_COOKIE, "value": session, "url": url}])
        pg = context.new_page()
        pg.errors = []
        pg.on("pageerror", lambda exc: pg.errors.append(str(exc)))
        pg.on("dialog", lambda d: (pg.errors.append("dialog: " + d.message), d.dismiss()))
        return pg

    yield make
    for context in contexts:
        context.close()


def _open(page, url: str, query: str = "run=lru") -> None:
    page.goto(f"{url}/?{query}")
    page.wait_for_selector("body[data-url='applied']", timeout=30000)


def _what_if(page) -> dict[str, str]:
    page.click("[data-testid=whatif-run]")
    page.wait_for_selector("body[data-whatif='ready']", timeout=60000)
    rows = page.locator("[data-testid=whatif-changed]")
    return {rows.nth(k).locator("a").text_content(): rows.nth(k).get_attribute("data-change")
            for k in range(rows.count())}  # fmt: skip


def test_a_miss_its_causes_a_pin_and_the_request_gained_and_lost(new_page, ui):
    """The short end-to-end run of the default suite: r1 misses a; the chain names the
    eviction for c; pin a from that cause; the what-if lists r1 gained and r2 lost (hit rate
    2/3 both ways: a delta of 0); undo; the what-if changes nothing again."""
    url, _ = ui
    page = new_page()
    _open(page, url)
    page.click("[data-testid=request-row][data-request='1'] a")
    page.wait_for_selector("body[data-influence='ready']")
    miss = page.locator("[data-testid=need-miss]")
    assert miss.count() == 1 and miss.get_attribute("data-item") == "a"
    assert page.locator("[data-testid=need-hit]").count() == 0
    causes = page.locator("[data-testid=cause]")
    assert [causes.nth(k).get_attribute("data-step") for k in range(causes.count())] == [
        "evict", "last_use", "admit", "derived_from"]  # fmt: skip
    assert "room_for_write: c" in causes.first.text_content()
    causes.first.locator("[data-testid=action-pin]").click()
    page.wait_for_selector("body[data-feedback='1']")
    assert _what_if(page) == {"r1": "gained", "r2": "lost"}
    cells = page.locator("#whatif-result tr[data-metric='hit_rate'] td").all_text_contents()
    assert cells[:4] == ["hit_rate", "0.6667", "0.6667", "0"]
    page.click("[data-testid=undo]")
    page.wait_for_selector("body[data-feedback='0']")
    assert _what_if(page) == {}
    assert page.errors == []


@pytest.mark.slow  # a browser session of several views (~10 s); make test-all runs it
def test_repinning_adds_nothing_and_the_scope_separates_sessions(new_page, ui):
    url, _ = ui
    first, second = new_page(), new_page()
    _open(first, url, "run=lru&view=request&request=1")
    first.wait_for_selector("body[data-influence='ready']")
    pin = first.locator("[data-testid=need-miss] [data-testid=action-pin]")
    pin.click()
    first.wait_for_selector("body[data-feedback='1']")
    pin.click()
    first.locator("#iv-result", has_text="already there").wait_for()
    assert first.locator("[data-testid=intervention]").count() == 1
    _open(second, url)
    assert _what_if(second) == {}  # this session added nothing
    second.select_option("[data-testid=whatif-scope]", "all")
    assert _what_if(second) == {"r1": "gained", "r2": "lost"}
    first.locator("[data-testid=intervention] [data-testid=action-undo]").click()
    first.wait_for_selector("body[data-feedback='0']")
    assert first.errors == [] and second.errors == []


@pytest.mark.slow  # two browser profiles (~8 s); make test-all runs it
def test_a_shared_link_reopens_the_view_and_a_bad_one_says_why(new_page, ui):
    url, _ = ui
    page = new_page()
    _open(page, url, "run=multi/lru")
    page.select_option("#stream", "agent2")
    page.wait_for_selector("body[data-page='ready']")
    page.click("[data-testid=request-row] a >> text=agent2/r1")
    page.wait_for_selector("body[data-influence='ready']")
    link = page.url
    assert "view=request" in link and "stream=agent2" in link and "run=multi%2Flru" in link
    other = new_page()
    other.goto(link)
    other.wait_for_selector("body[data-url='applied']", timeout=30000)
    other.wait_for_selector("body[data-influence='ready']")
    assert other.input_value("#stream") == "agent2"
    assert "request agent2/r1" in other.text_content("#influence h3")
    assert other.locator("#link-error").is_hidden()
    bad = new_page()
    _open(bad, url, "run=nope&request=99&view=nowhere")
    text = bad.text_content("[data-testid=link-error]")
    assert 'run "nope"' in text and "request 99" in text and 'view "nowhere"' in text
    assert bad.get_attribute("body", "data-page") == "ready"  # the newest run is shown instead
    assert page.errors == [] and other.errors == [] and bad.errors == []


@pytest.mark.slow  # keyboard walk through the page (~6 s); make test-all runs it
def test_keyboard_alone_reaches_the_influence_view(new_page, ui):
    url, _ = ui
    page = new_page()
    _open(page, url)
    for _ in range(80):  # the charts add no toolbar tab stops, so the rows come soon
        page.keyboard.press("Tab")
        if page.evaluate("!!document.activeElement.closest('[data-testid=request-row]')"):
            break
    else:
        pytest.fail("no request row reachable with Tab")
    page.keyboard.press("Enter")
    page.wait_for_selector("body[data-influence='ready']")
    assert page.evaluate("document.activeElement.id") == "influence"
    assert page.locator("[data-testid=need-miss], [data-testid=need-hit]").count() >= 1
    assert page.locator(".modebar").count() == 0
    assert page.errors == []


@pytest.mark.slow  # a multi-stream run in the browser (~6 s); make test-all runs it
def test_streams_in_natural_order_per_stream_charts_and_same_trace_diffs(new_page, ui):
    url, _ = ui
    page = new_page()
    _open(page, url, "run=multi/lru")
    options = page.locator("#stream option").all_text_contents()
    assert options == ["all streams", "agent1", "agent2", "agent10"]
    assert page.input_value("#stream") == "agent1"  # per stream by default
    # agent1's own three items and four bars (the single-stream counts), on its trace time
    assert page.locator("#timeline .barlayer .point").count() == 4
    assert "trace time (stream agent1)" in page.text_content("#timeline")
    assert {"working memory", "short-term cache"} <= set(
        page.locator("#timeline .legendtext").all_text_contents())  # fmt: skip
    for chart in ("timeline", "graph"):
        assert page.get_attribute(f"#{chart}", "aria-label").strip()
    assert page.locator("#run-b option").all_text_contents() == ["multi/rule — rule @ 2"]
    page.click("[data-testid=diff-run]")
    page.wait_for_selector("body[data-diff='ready']")
    assert page.locator("#diff tbody tr").count() == 3  # r1 of each stream: rule hits, lru not
    assert page.locator("#diff-chart .barlayer .point").count() >= 1
    assert "diff=multi%2Frule" in page.url
    assert page.errors == []


@pytest.mark.slow  # trains and replays four policies (~20 s); make test-all runs it
def test_the_train_action_makes_a_model_and_compares_it(new_page, ui):
    """On multi/lru (three streams: one held out), a keep and a low rescore in every stream
    from the page: the job writes a model and shows it against lru, rule and the bundled one
    on the held-out stream (one stream: no interval, said so)."""
    url, state = ui
    page = new_page()
    _open(page, url, "run=multi/lru&view=train")
    for s in STREAMS:
        page.fill("#iv-item", f"{s}/a")
        page.select_option("#iv-action", "pin")
        page.click("#intervene button[type=submit]")
        page.locator("#iv-result", has_text=f"keep of {s}/a").wait_for()
        page.fill("#iv-item", f"{s}/b")
        page.select_option("#iv-action", "rescore")
        page.fill("#iv-value", "0.1")
        page.click("#intervene button[type=submit]")
        page.locator("#iv-result", has_text=f"value of {s}/b").wait_for()
    page.uncheck("#train-simulated")
    page.click("[data-testid=train-run]")
    page.wait_for_selector("body[data-train='done']", timeout=240000)
    policies = [
        r.get_attribute("data-policy") for r in page.locator("#train-result tbody tr").all()
    ]
    assert policies == ["new", "lru", "rule", "default"]
    summary = page.text_content("#train-summary")
    model = Path(summary.split("model from")[1].split(": ")[1].split(";")[0])
    assert model.is_file() and model.with_suffix(".json").is_file()
    assert "n<5" in page.text_content("#train-result")
    assert any("fitting" in t for t in page.locator("#train-progress li").all_text_contents())
    assert page.errors == []
