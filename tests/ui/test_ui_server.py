"""memlens ui without a browser: the JSON API on the hand-made runs (memlens.ui.sample), the
read boundary (only runs under the root), the write token, concurrent feedback, settings."""

from __future__ import annotations

import contextlib
import http.cookiejar
import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from memlens.learn.feedback import FeedbackStore
from memlens.ui.sample import make_sample_runs
from memlens.ui.server import UiConfig, running


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ui") / "runs"
    make_sample_runs(root)
    return root


#: base URL -> the session cookie the fixture's login got (sent by ``call`` by default)
SESSIONS: dict[str, str] = {}


def login(url: str, state) -> str:
    """Spend a one-time code as a browser would; the session cookie it set (``name=value``)."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    with opener.open(f"{url}/?code={state.new_code()}", timeout=60) as r:
        assert r.status == 200 and b"memlens-token" in r.read()
    (cookie,) = [f"{c.name}={c.value}" for c in jar]
    return cookie


@contextlib.contextmanager
def serving(cfg: UiConfig):
    """``running(cfg)`` with a session: ``call`` sends its cookie."""
    with running(cfg) as (url, state):
        SESSIONS[url] = login(url, state)
        try:
            yield url, state
        finally:
            SESSIONS.pop(url, None)


@pytest.fixture
def server(sample, tmp_path):
    cfg = UiConfig(root=str(sample), port=0, mlflow_uri=None,
                   feedback_store=str(tmp_path / "fb.db"))  # fmt: skip
    with serving(cfg) as (url, state):
        yield url, state


def call(url: str, path: str, body=None, token=None, headers=None,
         cookie: bool = True) -> tuple[int, dict]:  # fmt: skip
    """(status, JSON answer) of one request; ``body`` (bytes or JSON) makes it a POST."""
    raw = body if isinstance(body, bytes) else None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=raw,
                                 method="GET" if raw is None else "POST")  # fmt: skip
    req.add_header("Content-Type", "application/json")
    if cookie and url in SESSIONS:
        req.add_header("Cookie", SESSIONS[url])
    if token:
        req.add_header("X-MemLens-Token", token)
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_default_binding_is_loopback(server):
    assert UiConfig.__dataclass_fields__["host"].default == "127.0.0.1"
    url, _ = server
    assert url.startswith("http://127.0.0.1:")


def test_influence_names_the_eviction(server):
    url, _ = server
    status, d = call(url, "/api/influence?run=lru&request=1")
    assert status == 200 and d["request_id"] == "r1" and d["event"] == 4
    (need,) = d["needs"]
    assert need["item_id"] == "a" and not need["hit"] and need["tier"] == "stc"
    ev = need["evicted"]
    assert (ev["event"], ev["reason"], ev["cause_item_id"]) == (3, "room_for_write", "c")
    assert sorted(k["item_id"] for k in ev["kept_instead"]) == ["b", "c"]
    assert sorted(k["item_id"] for k in d["context"]) == ["b", "c"]


def test_timeline_graph_and_diff(server):
    url, _ = server
    _, tl = call(url, "/api/timeline?run=lru")
    segs = {(s["item_id"], s["start"], s["end"], s["tier"]) for s in tl["segments"]}
    assert segs == {("a", 0, 3, "wm"), ("a", 3, 4, "stc"), ("b", 1, 4, "wm"), ("c", 3, 4, "wm")}
    _, g = call(url, "/api/graph?run=lru")
    assert [(e["request"], e["item"], e["hit"]) for e in g["edges"]] == [
        (0, 1, True),
        (1, 0, False),
    ]
    # c is derived from a (meta.derived_from): c joins the graph through a, a needed item
    assert [(d["parent_id"], d["child_id"]) for d in g["derived"]] == [("a", "c")]
    assert sorted(i["item_id"] for i in g["items"]) == ["a", "b", "c"]
    _, d = call(url, "/api/diff?a=lru&b=rule")
    f = d["first_divergence"]
    assert (f["a"]["event"], f["a"]["kind"], f["b"]["kind"], f["a"]["item_id"]) == (
        3, "admit", "decline", "c")  # fmt: skip
    assert [(r["request_id"], r["a_hits"], r["b_hits"]) for r in d["rows"]] == [("r1", False, True)]


def test_pages_are_capped(server):
    url, _ = server
    status, d = call(url, "/api/timeline?run=lru&limit=100000000")
    assert status == 200 and d["limit"] == 500


def test_heatmap_only_for_scoring_policies(server):
    url, _ = server
    _, lru = call(url, "/api/heatmap?run=lru")
    _, rule = call(url, "/api/heatmap?run=rule")
    assert lru["z"] == [] and len(rule["z"]) == rule["total_items"] > 0
    assert all(len(row) == 40 for row in rule["z"])


@pytest.mark.parametrize("name", ["../runs/lru", "..", "/etc", "lru/../../runs/lru", "%2e%2e/lru",
                                  "nothere", "", "lru/events.parquet"])  # fmt: skip
def test_reads_outside_the_root_are_refused(server, name):
    url, _ = server
    status, d = call(url, "/api/summary?run=" + urllib.request.quote(name, safe=""))
    assert status in (400, 404) and "error" in d


def test_symlinks_out_of_the_root_are_refused(sample, tmp_path):
    outside = tmp_path / "outside"
    make_sample_runs(outside)
    os.symlink(outside / "lru", sample / "linked")
    os.makedirs(sample / "half", exist_ok=True)
    for name in ("metrics.json", "resolved_config.yaml"):
        (sample / "half" / name).write_bytes((outside / "lru" / name).read_bytes())
    os.symlink(outside / "lru" / "events.parquet", sample / "half" / "events.parquet")
    cfg = UiConfig(root=str(sample), port=0, mlflow_uri=None, feedback_store=str(tmp_path / "f"))
    try:
        with serving(cfg) as (url, _):
            for name in ("linked", "half"):
                status, d = call(url, f"/api/timeline?run={name}")
                assert status in (400, 404) and "outside the root" in d["error"]
            _, runs = call(url, "/api/runs")
            assert {r["run"] for r in runs["local"]} == {"lru", "rule"}
    finally:
        os.unlink(sample / "linked")
        shutil.rmtree(sample / "half")


def test_writes_need_the_session_token(server, tmp_path):
    url, state = server
    body = {"run": "lru", "item_id": "a", "action": "pin"}
    assert call(url, "/api/feedback", body)[0] == 403
    assert call(url, "/api/feedback", body, token="wrong")[0] == 403
    assert call(url, "/api/whatif", {"run": "lru"})[0] == 403
    evil = {"Origin": "http://evil.example"}
    assert call(url, "/api/feedback", body, token=state.token, headers=evil)[0] == 403
    assert not Path(state.cfg.feedback_store).exists()  # nothing written, not even the file
    status, d = call(url, "/api/feedback", body, token=state.token)
    assert status == 200 and d == {"added": 1, "id": 1, "existing": False, "event_index": 0,
                                   "action": "keep"}  # fmt: skip


@pytest.mark.parametrize("body", [{"run": "lru", "item_id": "zz", "action": "pin"},
                                  {"run": "lru", "item_id": "a", "action": "explode"},
                                  {"run": "lru", "item_id": "a", "action": "rescore"},
                                  {"run": "lru", "item_id": "a", "action": "annotate", "value": 2},
                                  {"run": "../x", "item_id": "a", "action": "pin"}])  # fmt: skip
def test_bad_interventions_are_refused(server, body):
    url, state = server
    status, d = call(url, "/api/feedback", body, token=state.token)
    assert status in (400, 404) and d["error"]


def test_fifty_concurrent_writes_lose_nothing(server):
    url, state = server

    def one(k: int) -> int:
        body = {"run": "lru", "item_id": "abc"[k % 3], "action": "annotate",
                "value": round(k / 100, 2), "note": f"note {k}"}  # fmt: skip
        return call(url, "/api/feedback", body, token=state.token)[0]

    with ThreadPoolExecutor(50) as pool:
        assert list(pool.map(one, range(50))) == [200] * 50
    rows = FeedbackStore(state.cfg.feedback_store).rows(source="person")
    assert sorted(r.note for r in rows) == sorted(f"note {k}" for k in range(50))


def test_what_if_pin_gives_the_hand_computed_delta(server):
    url, state = server
    assert call(url, "/api/feedback", {"run": "lru", "item_id": "a", "action": "pin"},
                token=state.token)[0] == 200  # fmt: skip
    status, d = call(url, "/api/whatif", {"run": "lru"}, token=state.token)
    assert status == 200 and d["interventions"] == 1
    hr = d["metrics"]["hit_rate"]
    assert (hr["before"], hr["after"], hr["delta"]) == (0.5, 1.0, 0.5)


@pytest.mark.parametrize("arg, word", [("port=70000", "port"), ("root=/no/such/folder", "root"),
                                       ("colour=blue", "colour"), ("host=", "host"),
                                       ("feedback_store=/no/such/dir/x.db", "feedback_store"),
                                       ("max_body_bytes=10", "max_body_bytes"),
                                       ("allowed_hosts=[a/b]", "allowed_hosts"),
                                       ("trace_roots=[/no/such]", "trace_roots")])  # fmt: skip
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_bad_settings_exit_2(arg, word, tmp_path):
    (tmp_path / "outputs").mkdir()  # the default root exists: only `arg` is wrong
    proc = subprocess.run([sys.executable, "-m", "memlens", "ui", arg], capture_output=True,
                          text=True, cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and word in lines[0]
