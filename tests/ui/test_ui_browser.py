"""memlens ui in a real browser: Debian's chromium driven by Playwright (never a downloaded
browser).  On the hand-made runs of memlens.ui.sample: the page loads, every chart has the
hand-counted number of marks, influence tracing names the eviction behind the known miss, a
pin reaches the feedback store, what-if shows the hand-computed delta, untrusted memory text
never runs, and a cross-site POST is refused.  Screenshots of each view are kept under the
test's artifact folder (``MEMLENS_UI_ARTIFACTS`` to choose it)."""

from __future__ import annotations

import http.server
import os
import threading
from pathlib import Path

import pytest

from memlens.learn.feedback import FeedbackStore
from memlens.ui.sample import make_sample_runs
from memlens.ui.server import UiConfig, running
from memlens.ui.state import SESSION_COOKIE

VIEWS = ("picker", "timeline-view", "heatmap-view", "graph-view", "influence-view",
         "interventions-view", "diff-view")  # fmt: skip


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    folder = Path(os.environ.get("MEMLENS_UI_ARTIFACTS") or tmp_path_factory.mktemp("ui-shots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    base = tmp_path_factory.mktemp("uib")
    make_sample_runs(base / "runs")
    cfg = UiConfig(root=str(base / "runs"), port=0, mlflow_uri=None,
                   feedback_store=str(base / "fb.db"))  # fmt: skip
    with running(cfg) as (url, state):
        yield url, state


@pytest.fixture
def page(browser, ui):
    """A fresh browser profile with a session: a one-time code spent on it (as opening the
    URL ``memlens ui`` prints does; ``test_the_printed_url_opens_one_session`` drives that)."""
    url, state = ui
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    session = state.redeem(state.new_code())
    context.add_cookies([{"name": SESSION_COOKIE, "value": session, "url": url}])
    pg = context.new_page()
    pg.errors = []  # uncaught page errors (a CSP violation or a broken script shows up here)
    pg.on("pageerror", lambda exc: pg.errors.append(str(exc)))
    pg.on("dialog", lambda d: (pg.errors.append("dialog: " + d.message), d.dismiss()))
    yield pg
    context.close()


def _open(page, url: str, run: str = "lru") -> None:
    page.goto(f"{url}/?run={run}")
    page.wait_for_selector("body[data-url='applied']", timeout=30000)


@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_the_printed_url_opens_one_session(browser, ui):
    """``/?code=C`` sets an HttpOnly, SameSite=Strict cookie and drops the code from the URL;
    the code is spent: a second profile opening the same URL gets no session."""
    url, state = ui
    code = state.new_code()
    first = browser.new_context()
    try:
        pg = first.new_page()
        pg.goto(f"{url}/?code={code}&run=rule")
        pg.wait_for_selector("body[data-page='ready']", timeout=30000)
        assert pg.url.startswith(f"{url}/?run=rule") and "code" not in pg.url
        (cookie,) = first.cookies()
        assert cookie["name"] == SESSION_COOKIE and cookie["httpOnly"]
        assert cookie["sameSite"] == "Strict"
        assert pg.evaluate("document.cookie") == ""  # script cannot read it
    finally:
        first.close()
    second = browser.new_context()
    try:
        answer = second.new_page().goto(f"{url}/?code={code}")
        assert answer.status == 403 and not second.cookies()
        assert second.new_page().goto(f"{url}/").status == 401
    finally:
        second.close()


def test_page_loads_a_run_and_shoots_every_view(page, ui, artifacts):
    url, _ = ui
    _open(page, url)
    assert "lru @ 2 tokens" in page.text_content("#run-info")
    assert page.locator("#run option").count() == 2
    for view in VIEWS:
        page.locator(f"#{view}").screenshot(path=str(artifacts / f"{view}.png"))
    page.screenshot(path=str(artifacts / "page.png"), full_page=True)
    assert all((artifacts / f"{v}.png").stat().st_size > 1000 for v in VIEWS)
    assert page.errors == []


@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_charts_have_the_hand_counted_marks(page, ui):
    url, _ = ui
    _open(page, url)
    # lru: a in wm 0-3 then stc 3-4, b in wm 1-4, c in wm 3-4: four bars
    assert page.locator("#timeline .barlayer .point").count() == 4
    # r0 -> b (hit), r1 -> a (miss), c derived from a: two request nodes, three item nodes
    assert page.locator("#graph .scatterlayer .point").count() == 5
    assert page.get_attribute("#graph", "data-derived") == "1"
    assert page.locator("#heatmap .hm").count() == 0  # LRU has no values
    _open(page, url, "rule")
    rows = int(page.get_attribute("#heatmap", "data-rows"))
    assert rows == 2  # rule admits a and b (values), declines c before any value was kept
    z = page.evaluate("document.getElementById('heatmap').data[0].z")
    assert len(z) == rows and all(len(r) == 40 for r in z)
    assert page.locator("#heatmap .hm").count() == 1
    assert page.errors == []


def test_influence_names_the_eviction_behind_the_miss(page, ui, artifacts):
    url, _ = ui
    _open(page, url)
    page.click("#requests tbody tr[data-request='1']")
    page.wait_for_selector("body[data-influence='ready']")
    why = page.text_content("#influence-needs tr.why[data-item='a']")
    assert "evicted at event 3 (room_for_write: c)" in why
    assert "kept instead: b" in why and ", c" in why
    ctx = page.locator("#influence-context tr").all_text_contents()
    assert [t[:1] for t in ctx] == ["b", "c"]
    page.locator("#influence-view").screenshot(path=str(artifacts / "influence.png"))


def test_untrusted_text_never_runs(page, ui):
    url, _ = ui
    _open(page, url)
    page.click("#requests tbody tr[data-request='1']")
    page.wait_for_selector("body[data-influence='ready']")
    body = page.text_content("#influence")
    assert '<img src=x onerror="window.__memlens_pwned = 1">' in body  # shown, as text
    assert "<script>window.__memlens_pwned = 2</script>" in body
    page.wait_for_timeout(300)
    assert page.evaluate("window.__memlens_pwned") is None
    assert page.locator("#influence img, #influence script").count() == 0
    assert page.errors == []


@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_pin_round_trips_and_what_if_shows_the_delta(page, ui, artifacts):
    url, state = ui
    _open(page, url)
    before = len(FeedbackStore(state.cfg.feedback_store).rows(source="person")) if Path(
        state.cfg.feedback_store).exists() else 0  # fmt: skip
    page.fill("#iv-item", "a")
    page.select_option("#iv-action", "pin")
    page.click("#intervene button[type=submit]")
    page.wait_for_selector(f"body[data-feedback='{before + 1}']")
    rows = FeedbackStore(state.cfg.feedback_store).rows(source="person")
    assert len(rows) == before + 1
    last = rows[-1]
    assert (last.item_id, last.action, last.event_index, last.stream) == ("a", "keep", 0, "agent")
    page.click("#whatif")
    page.wait_for_selector("body[data-whatif='ready']", timeout=60000)
    cells = page.locator("#whatif-result tr[data-metric='hit_rate'] td").all_text_contents()
    assert cells[:4] == ["hit_rate", "0.5", "1", "0.5"]
    assert "1 stream(s)" in cells[4]  # no interval below 5 streams, said so
    page.locator("#interventions-view").screenshot(path=str(artifacts / "whatif.png"))


def test_policy_diff_view(page, ui):
    url, _ = ui
    _open(page, url)
    page.select_option("#run-b", "rule")
    page.click("#diff-go")
    page.wait_for_selector("body[data-diff='ready']")
    first = page.text_content("#diff-first")
    assert "A admit c @3 vs B decline c @3" in first
    assert page.locator("#diff tbody tr").all_text_contents() == ["r14falsetrue"]


class _Evil(http.server.BaseHTTPRequestHandler):
    """Another site: its page auto-submits a form to the UI and tries a fetch too."""

    target = ""

    def do_GET(self):  # noqa: N802 - http.server's naming
        html = f"""<html><body><form id=f method=POST action="{self.target}/api/feedback"
            enctype="text/plain"><input name='{{"run":"lru","item_id":"a","action":"pin","x":"'
            value='"}}'></form><script>
            fetch("{self.target}/api/feedback", {{method: "POST", mode: "no-cors",
              body: JSON.stringify({{run: "lru", item_id: "b", action: "pin"}})}});
            setTimeout(() => document.getElementById("f").submit(), 200);</script></body></html>"""
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(html.encode())

    def log_message(self, *args):
        pass


def test_cross_site_post_is_refused(page, ui):
    url, state = ui
    store = Path(state.cfg.feedback_store)
    before = len(FeedbackStore(store).rows()) if store.exists() else 0
    _Evil.target = url
    evil = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Evil)
    threading.Thread(target=evil.serve_forever, daemon=True).start()
    try:
        with page.expect_response(lambda r: r.url.endswith("/api/feedback")
                                  and r.request.method == "POST") as resp:  # fmt: skip
            page.goto(f"http://127.0.0.1:{evil.server_address[1]}/")
        assert resp.value.status == 403
        page.wait_for_timeout(500)
    finally:
        evil.shutdown()
    after = len(FeedbackStore(store).rows()) if store.exists() else 0
    assert after == before
