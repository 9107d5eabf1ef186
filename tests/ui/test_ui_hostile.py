"""memlens ui against hostile requests and hostile run folders (issue 33).

The Host check (DNS rebinding), the one-time code and the session cookie, body and nesting
caps, a 4xx JSON error (never a 500) for every bad input, one bad run folder never hiding the
others, and run folders that name files outside the root or code to run.  Every expectation
is written down from the issue, not read back from the server."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import urllib.parse
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from memlens.learn.feedback import FeedbackStore
from memlens.ui.sample import make_sample_runs
from memlens.ui.server import UiConfig, running
from memlens.ui.state import SESSION_COOKIE

POPEN = {"_target_": "subprocess.Popen", "shell": True}  # + args: touch MARKER


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """The hand-made runs plus hostile folders: a garbage event log, a wrongly shaped
    metrics.json, a metrics.json symlinked out of the root, a what-if config that starts a
    process, one whose trace lies outside the root, one with an interpolation."""
    base = tmp_path_factory.mktemp("hostile")
    runs = base / "runs"
    make_sample_runs(runs)
    outside = base / "outside"
    make_sample_runs(outside)

    def clone(name: str) -> Path:
        shutil.copytree(runs / "lru", runs / name)
        return runs / name

    (clone("garbage") / "events.parquet").write_bytes(b"PAR1 this is not parquet " * 40)
    (clone("shape") / "metrics.json").write_text('{"trace": "notadict", "overall": 5}')
    link = clone("linked")
    (link / "metrics.json").unlink()
    os.symlink(outside / "lru" / "metrics.json", link / "metrics.json")
    evil = clone("evil") / "resolved_config.yaml"
    cfg = OmegaConf.load(evil)
    cfg.policy = POPEN | {"args": f"touch {base / 'PWNED'}"}
    OmegaConf.save(cfg, evil)
    far = clone("far")
    metrics = json.loads((far / "metrics.json").read_text())
    metrics["trace"]["path"] = str(outside / "trace.jsonl")
    (far / "metrics.json").write_text(json.dumps(metrics))
    env = clone("env")
    cfg = (env / "resolved_config.yaml").read_text().replace("seed: 0", "seed: ${oc.env:HOME}", 1)
    (env / "resolved_config.yaml").write_text(cfg)
    return runs


@pytest.fixture(scope="module")
def server(root, tmp_path_factory):
    cfg = UiConfig(root=str(root), port=0, mlflow_uri=None, prewarm=False,
                   feedback_store=str(tmp_path_factory.mktemp("fb") / "fb.db"))  # fmt: skip
    with running(cfg) as (url, state):
        yield url, state


def request(url: str, path: str, method: str = "GET", body: bytes | None = None,
            headers: dict | None = None, session: str | None = None):  # fmt: skip
    """(status, headers, body) of one raw HTTP request (``Host`` and ``Origin`` set freely)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    sent = {"Content-Type": "application/json", **(headers or {})}
    if session:
        sent["Cookie"] = f"{SESSION_COOKIE}={session}"
    try:
        conn.request(method, path, body=body, headers=sent)
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def session_of(state) -> str:
    return state.redeem(state.new_code())


# ------------------------------------------------------------------ Host, code, cookie
@pytest.mark.parametrize("path", ["/", "/?code=x", "/api/runs", "/static/app.js",
                                  "/vendor/plotly.min.js"])  # fmt: skip
def test_a_foreign_host_is_refused_before_anything_is_served(server, path):
    """DNS rebinding: a page on evil.example rebound to 127.0.0.1 sends its own Host."""
    url, state = server
    port = urllib.parse.urlsplit(url).port
    for host in (
        "evil.example",
        f"evil.example:{port}",
        "127.0.0.1.evil.example",
        "[::2]",
        f"evil.example@127.0.0.1:{port}",
        f"127.0.0.1:{port}/x",
        "",
    ):
        status, _, body = request(url, path, headers={"Host": host}, session=session_of(state))
        assert status == 421 and state.token.encode() not in body


def test_the_loopback_names_and_allowed_hosts_are_answered(root, tmp_path):
    cfg = UiConfig(root=str(root), port=0, mlflow_uri=None, prewarm=False,
                   allowed_hosts=["memlens.lan"], feedback_store=str(tmp_path / "f.db"))  # fmt: skip
    with running(cfg) as (url, state):
        port = urllib.parse.urlsplit(url).port
        session = session_of(state)
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}",
                     f"[::1]:{port}", f"memlens.lan:{port}"):  # fmt: skip
            assert request(url, "/api/runs", headers={"Host": host}, session=session)[0] == 200
        wrong_port = f"127.0.0.1:{port + 1}"
        assert request(url, "/api/runs", headers={"Host": wrong_port}, session=session)[0] == 421


def test_the_page_and_the_api_need_the_session(server):
    url, state = server
    status, _, body = request(url, "/")
    assert status == 401 and state.token.encode() not in body
    assert request(url, "/api/runs")[0] == 401
    assert request(url, "/api/runs", session="forged")[0] == 401
    assert request(url, "/api/runs", headers={"X-MemLens-Token": "wrong"})[0] == 401
    assert request(url, "/api/runs", headers={"X-MemLens-Token": state.token})[0] == 200
    assert request(url, "/static/app.js")[0] == 200  # code, no data: served to anyone local


def test_a_code_opens_one_session_once(server):
    url, state = server
    code = state.new_code()
    status, headers, _ = request(url, f"/?code={code}&run=lru")
    assert status == 303 and headers["location"] == "/?run=lru"
    cookie = headers["set-cookie"]
    assert cookie.startswith(f"{SESSION_COOKIE}=") and "HttpOnly" in cookie
    assert "SameSite=strict" in cookie or "SameSite=Strict" in cookie
    session = cookie.split(";", 1)[0].split("=", 1)[1]
    status, _, body = request(url, "/", session=session)
    assert status == 200 and state.token.encode() in body
    again = request(url, f"/?code={code}")
    assert again[0] == 403 and "set-cookie" not in again[1]


# ------------------------------------------------------------------ bodies and Origin
def test_a_cross_site_origin_is_refused(server):
    url, state = server
    port = urllib.parse.urlsplit(url).port
    body = json.dumps({"run": "lru", "item_id": "a", "action": "pin"}).encode()
    headers = {"X-MemLens-Token": state.token}
    for origin in ("http://evil.example", f"http://evil.example:{port}", "null",
                   f"https://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}"):  # fmt: skip
        status, _, _ = request(url, "/api/feedback", "POST", body, {**headers, "Origin": origin})
        assert status == 403, origin
    own = {**headers, "Origin": f"http://127.0.0.1:{port}"}
    assert request(url, "/api/feedback", "POST", body, own)[0] == 200


def test_bodies_are_capped_and_nesting_too(server):
    url, state = server
    token = {"X-MemLens-Token": state.token}
    note = {"run": "lru", "item_id": "a", "action": "annotate", "note": "x" * (2 << 20)}
    store = Path(state.cfg.feedback_store)
    before = len(FeedbackStore(store).rows()) if store.exists() else 0
    assert request(url, "/api/feedback", "POST", json.dumps(note).encode(), token)[0] == 413
    status, _, raw = request(url, "/api/feedback", "POST", b"[" * 100_000, token)
    assert status == 400 and "error" in json.loads(raw)
    deep: dict = {"x": 1}
    for _ in range(40):
        deep = {"x": deep}
    status, _, raw = request(url, "/api/feedback", "POST", json.dumps(deep).encode(), token)
    assert status == 400 and "nested deeper" in json.loads(raw)["error"]
    after = len(FeedbackStore(store).rows()) if store.exists() else 0
    assert after == before


def test_a_chunked_body_is_capped_while_it_is_read(server):
    """No Content-Length to check up front: the cap holds as the body arrives."""
    url, state = server
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    chunks = (b"x" * 65536 for _ in range(40))  # 2.5 MiB
    conn.request("POST", "/api/feedback", body=chunks, encode_chunked=True,
                 headers={"X-MemLens-Token": state.token, "Content-Type": "application/json"})  # fmt: skip
    assert conn.getresponse().status == 413
    conn.close()


# ------------------------------------------------------------------ bad run folders
@pytest.mark.parametrize("name", [".", "./", "./lru/..", "\\", "a\x00b", "c:x"])
def test_odd_run_names_are_a_4xx(server, name):
    url, state = server
    q = urllib.parse.quote(name, safe="")
    status, _, raw = request(url, f"/api/summary?run={q}", session=session_of(state))
    assert 400 <= status < 500 and json.loads(raw)["error"]


def test_a_run_at_the_root_itself_is_run_dot(tmp_path):
    runs = make_sample_runs(tmp_path / "r")
    cfg = UiConfig(root=str(runs["lru"]), port=0, mlflow_uri=None, prewarm=False,
                   feedback_store=str(tmp_path / "f.db"))  # fmt: skip
    with running(cfg) as (url, state):
        session = session_of(state)
        listed = json.loads(request(url, "/api/runs", session=session)[2])
        assert [r["run"] for r in listed["local"]] == ["."]
        for name in (".", "./"):
            status, _, raw = request(url, f"/api/summary?run={name}", session=session)
            assert status == 200 and json.loads(raw)["identity"]["policy"] == "lru"


def test_one_bad_folder_never_hides_the_others(server):
    url, state = server
    status, _, raw = request(url, "/api/runs", session=session_of(state))
    assert status == 200
    runs = json.loads(raw)
    listed = {r["run"] for r in runs["local"]}
    assert {"lru", "rule", "garbage", "evil", "far"} <= listed
    assert not {"shape", "linked"} & listed
    problems = {p["run"]: p["error"] for p in runs["problems"]}
    assert "'trace' must be an object" in problems["shape"]
    assert "outside the root" in problems["linked"]


LOG_VIEWS = ("timeline", "heatmap", "graph", "requests")  # read events.parquet
METRICS_VIEWS = ("summary", "feedback")  # read metrics.json


@pytest.mark.parametrize("run, views, status, words", [
    ("garbage", LOG_VIEWS + ("summary",), 422, "events.parquet"),
    ("shape", METRICS_VIEWS, 422, "'trace' must be an object"),
    ("linked", LOG_VIEWS + METRICS_VIEWS, 400, "outside the root"),
])  # fmt: skip
def test_a_damaged_run_is_a_json_4xx_for_every_view_that_reads_it(server, run, views, status,
                                                                     words):  # fmt: skip
    url, state = server
    session = session_of(state)
    for view in views:
        got, _, raw = request(url, f"/api/{view}?run={run}", session=session)
        assert (got, words in json.loads(raw).get("error", "")) == (status, True), (view, raw)


# ------------------------------------------------------------------ what-if
def test_the_what_if_never_builds_what_a_run_folder_names(server, root):
    url, state = server
    token = {"X-MemLens-Token": state.token}
    status, _, raw = request(url, "/api/whatif", "POST", b'{"run": "evil"}', token)
    assert status == 400 and "not a registered policy" in json.loads(raw)["error"]
    assert not (root.parent / "PWNED").exists()


@pytest.mark.parametrize("run, words", [("far", "lies outside the page's root"),
                                        ("env", "interpolation")])  # fmt: skip
def test_the_what_if_reads_only_files_under_the_root(server, run, words):
    url, state = server
    token = {"X-MemLens-Token": state.token}
    status, _, raw = request(url, "/api/whatif", "POST", json.dumps({"run": run}).encode(), token)
    assert 400 <= status < 500 and words in json.loads(raw)["error"]


def test_trace_roots_let_the_what_if_replay_a_trace_elsewhere(root, tmp_path):
    cfg = UiConfig(root=str(root), port=0, mlflow_uri=None, prewarm=False,
                   feedback_store=str(tmp_path / "f.db"),
                   trace_roots=[str(root.parent / "outside")])  # fmt: skip
    with running(cfg) as (url, state):
        token = {"X-MemLens-Token": state.token}
        status, _, raw = request(url, "/api/whatif", "POST", b'{"run": "far"}', token)
        assert status == 200 and json.loads(raw)["metrics"]["hit_rate"]["before"] == 0.5


# ------------------------------------------------------------------ no 500 for any input
VIEWS = ["summary", "timeline", "heatmap", "graph", "requests", "influence", "diff", "feedback",
         "item", "train"]  # fmt: skip
TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
PARAMS = st.dictionaries(st.sampled_from(["run", "a", "b", "stream", "offset", "limit",
                                          "request", "item", "job"]),
                         st.one_of(TEXT, st.sampled_from(["lru", "rule", ".", "garbage", "shape",
                                                          "linked", "-1", "1e9", "..", "/"])),
                         max_size=4)  # fmt: skip


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(view=st.sampled_from(VIEWS), params=PARAMS)
def test_no_query_gets_a_500(server, view, params):
    url, state = server
    q = urllib.parse.urlencode(params)
    status, _, raw = request(url, f"/api/{view}?{q}", headers={"X-MemLens-Token": state.token})
    assert status < 500, (view, params, raw)
    json.loads(raw)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(endpoint=st.sampled_from(["/api/feedback", "/api/undo"]),
       body=st.one_of(st.binary(max_size=64),
                      st.dictionaries(st.sampled_from(["run", "item_id", "action", "value",
                                                       "note", "event", "id"]),
                                      st.one_of(TEXT, st.integers(), st.floats(),
                                                st.booleans(), st.none()), max_size=6)
                      .map(lambda d: json.dumps(d).encode())))  # fmt: skip
def test_no_body_gets_a_500(server, endpoint, body):
    url, state = server
    status, _, raw = request(url, endpoint, "POST", body,
                             {"X-MemLens-Token": state.token})  # fmt: skip
    assert status < 500, (body, raw)
    json.loads(raw)
