"""The learned value scorer: features without look-ahead, labels, the estimator, the compiled
evaluator, the model file, ``policy=learned`` (cold start, determinism, the checker) and
``memlens train`` end to end."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from memlens.policies.learned import LearnedScorer

from memlens.checker import check_policy
from memlens.config.compose import make_policy
from memlens.config.store import DATA_DIR
from memlens.learn.feedback import Feedback, with_feedback
from memlens.learn.labels import LabelSpec, feedback_points, labels_for
from memlens.scorer.decision_features import (
    ANCHOR_OTHER,
    FEATURE_NAMES,
    anchor_points,
    decision_features,
    decision_points,
    default_tier,
)
from memlens.scorer.model import (
    CompiledForest,
    LearnedModel,
    ModelError,
    ValueScorer,
    load_model,
    save_model,
)
from memlens.simulator import simulate
from memlens.testing import pin, rq, trace, traces, unpin, w
from memlens.trace.io import trace_from_events

MEMLENS = shutil.which("memlens") or str(Path(sys.executable).parent / "memlens")
RESULT_FIELDS = ("need_hit", "context_tokens", "evictions", "move_event", "move_item", "move_kind")


def same_replay(a, b) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in RESULT_FIELDS)


def default_trace():
    from memlens.trace.cache import load_trace_cached

    return load_trace_cached(str(DATA_DIR / "default" / "agent-small.jsonl.gz"))


@pytest.fixture(scope="module")
def small_model() -> LearnedModel:
    """A small model trained on the bundled default trace's anchors (hindsight labels)."""
    tr = default_trace()
    pts = decision_points(tr)
    X = decision_features(tr, pts.item, pts.event, default_tier(tr, pts), 1024)
    y = labels_for(tr, pts.item, pts.event, LabelSpec("hindsight", horizon=10), 1024)
    est = ValueScorer(n_estimators=20, num_leaves=7, random_state=0).fit(X, y)
    return LearnedModel(est.booster_.model_to_string(), {}, "<test>")


# ---------------------------------------------------------------------------- estimator
def toy_data(n: int = 600, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, len(FEATURE_NAMES)))
    y = (X[:, 0] + 0.5 * X[:, 3] + rng.normal(scale=0.5, size=n) > 0).astype(float)
    return X, y


def test_estimator_follows_the_scikit_learn_conventions():
    from sklearn.base import clone

    X, y = toy_data()
    est = ValueScorer(n_estimators=15, random_state=3)
    assert not hasattr(est, "booster_")  # no learned state before fit
    assert est.fit(X, y) is est  # fit returns self
    for attr in ("booster_", "classes_", "n_features_in_", "feature_names_in_"):
        assert hasattr(est, attr) and attr.endswith("_")
    assert est.n_features_in_ == len(FEATURE_NAMES)
    assert clone(est).get_params() == est.get_params()
    p = est.predict_proba(X)
    assert p.shape == (len(X), 2) and np.allclose(p.sum(axis=1), 1.0)
    assert ((est.predict(X) == y).mean()) > 0.8  # it learned the signal


def test_same_random_state_same_trees_bit_for_bit():
    X, y = toy_data()
    kw = {"n_estimators": 10, "subsample": 0.7, "colsample_bytree": 0.7}
    a = ValueScorer(random_state=5, **kw).fit(X, y).booster_.model_to_string()
    b = ValueScorer(random_state=5, **kw).fit(X, y).booster_.model_to_string()
    c = ValueScorer(random_state=6, **kw).fit(X, y).booster_.model_to_string()
    assert a == b
    assert a != c  # the seed drives the bagging


def test_fit_refuses_bad_labels():
    X, _ = toy_data(20)
    with pytest.raises(ValueError, match="0 or 1"):
        ValueScorer().fit(X, np.full(20, 2.0))


def test_compiled_forest_equals_lightgbm_including_missing_and_zero_values():
    X, y = toy_data(2000, seed=1)
    X[::7, 2] = np.nan  # missing values learn a default direction
    X[::5, 4] = 0.0
    est = ValueScorer(n_estimators=40, num_leaves=15).fit(X, y)
    forest = CompiledForest.from_dump(est.booster_.dump_model())
    Xt, _ = toy_data(500, seed=2)
    Xt[::3, 2] = np.nan
    Xt[::4, 0] = np.nan  # missing where training had none: treated as zero
    Xt[::6, 4] = 0.0
    assert np.array_equal(forest.raw(Xt), est.decision_function(Xt))


# ---------------------------------------------------------------------------- features
@given(traces(max_events=40), st.integers(0, 39))
def test_a_feature_row_does_not_change_when_later_events_change(events, cut):
    """Rows of points at or before event ``cut`` are the same on the trace cut there, and on
    the trace with a different tail."""
    cut = min(cut, len(events) - 1)
    full = trace_from_events(events)
    head = trace_from_events(events[: cut + 1])
    tail = [w(f"z{k}", 7, stream="a", t=1e6 + k, text="error final 42") for k in range(3)]
    tail.append(rq("zr", "z0", stream="a", t=2e6, text="final answer"))
    other = trace_from_events(events[: cut + 1] + tail)
    pts = anchor_points(full)
    keep = pts.event <= cut
    items, evs = pts.item[keep], pts.event[keep]
    tier = default_tier(full, pts)[keep]
    want = decision_features(full, items, evs, tier, 64)
    for tr in (head, other):
        got = decision_features(tr, items, evs, tier, 64)
        assert np.array_equal(np.isnan(want), np.isnan(got))
        assert np.array_equal(np.nan_to_num(want, nan=-7.0), np.nan_to_num(got, nan=-7.0))


def test_checkpoints_come_before_the_next_anchor_and_on_a_request():
    tr = default_trace()
    pts = decision_points(tr)
    check = pts.kind == ANCHOR_OTHER
    assert check.any()
    assert (tr.ev_kind[pts.event[check]] == 1).all()  # a request event of ...
    assert (tr.ev_stream[pts.event[check]] == tr.item_stream[pts.item[check]]).all()  # its stream


# ------------------------------------------------------------------------------- labels
def label_trace():
    return trace(
        w("a", 10, "user_input"), w("b", 20), rq("r1", "a"), w("c", 5), rq("r2", "a", "b"),
        rq("r3", "c"), w("d", 40), rq("r4", "a"),
    )  # fmt: skip


# anchors in event order: a@0 b@1 a@2 c@3 a@4 b@4 c@5 d@6 a@7
ANCHORS = [("a", 0), ("b", 1), ("a", 2), ("c", 3), ("a", 4), ("b", 4), ("c", 5), ("d", 6), ("a", 7)]


def label_points(tr):
    pts = anchor_points(tr)
    got = [(tr.item_id[i], e) for i, e in zip(pts.item.tolist(), pts.event.tolist())]
    assert got == ANCHORS
    return pts


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        # next need in requests: a@0 1, b@1 2, a@2 1, c@3 2, a@4 2, the rest never
        (LabelSpec("hindsight", horizon=1), [1, 0, 1, 0, 0, 0, 0, 0, 0]),
        (LabelSpec("hindsight", horizon=2), [1, 1, 1, 1, 1, 0, 0, 0, 0]),
        # tokens written before the next need: a@0 20, b@1 5, a@2 5, c@3 0, a@4 40
        (LabelSpec("belady", boundary_tokens=5), [0, 1, 1, 1, 0, 0, 0, 0, 0]),
        (LabelSpec("belady", boundary_tokens=20), [1, 1, 1, 1, 0, 0, 0, 0, 0]),
        # budget 25: a (10) kept throughout and c (5) for r3 give 4 hits; b (20) cannot join a
        (LabelSpec("oracle", budget=25), [1, 0, 1, 1, 1, 0, 0, 0, 0]),
    ],
)
def test_label_kinds_on_a_hand_computed_trace(spec, want):
    tr = label_trace()
    pts = label_points(tr)
    assert labels_for(tr, pts.item, pts.event, spec, 25).tolist() == want


def test_belady_boundary_defaults_to_the_rows_budget():
    tr = label_trace()
    pts = label_points(tr)
    spec = LabelSpec("belady")
    assert labels_for(tr, pts.item, pts.event, spec, 5).tolist() == [0, 1, 1, 1, 0, 0, 0, 0, 0]


def test_feedback_labels_keep_drop_and_value():
    tr = label_trace()

    def fb(item, e, action, value=None, note=None):
        return Feedback(source="person", trace_sha256=tr.sha256, stream="", event_index=e,
                        t=0.0, item_id=item, action=action, value=value, note=note)  # fmt: skip

    rows = [fb("a", 1, "keep"), fb("b", 3, "drop"), fb("c", 5, "value", 0.7),
            fb("d", 6, "value", 0.2), fb("d", 7, "value", note="looked")]  # fmt: skip
    items, events, labels = feedback_points(tr, rows)
    assert [tr.item_id[i] for i in items] == ["a", "b", "c", "d"]  # the note-only row skipped
    assert events.tolist() == [1, 3, 5, 6]
    assert labels.tolist() == [1, 0, 1, 0]


# --------------------------------------------------------------------------- model files
def test_model_file_round_trip_and_sidecar_checks(tmp_path):
    X, y = toy_data()
    est = ValueScorer(n_estimators=5).fit(X, y)
    path, side = save_model(tmp_path / "m.txt", est, {"label": {"kind": "hindsight"}})
    model = load_model(str(path))
    assert np.array_equal(model.raw(X), est.decision_function(X))
    meta = json.loads(side.read_text())
    assert meta["feature_names"] == list(FEATURE_NAMES)
    meta["feature_names"] = meta["feature_names"][::-1]
    side.write_text(json.dumps(meta))
    with pytest.raises(ModelError, match=r"m\.json: field 'feature_names'"):
        load_model(str(path))
    with pytest.raises(ModelError, match="no such model file"):
        load_model(str(tmp_path / "missing.txt"))


def test_the_bundled_model_loads_with_its_provenance():
    model = load_model("default")
    assert model.meta["label"]["kind"] in ("feedback", "hindsight", "belady", "oracle")
    assert model.meta["training_traces"]
    assert model.meta["model_sha256"] == model.sha256


# ------------------------------------------------------------------------------- policy
@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_learned_policy_passes_the_checker_in_every_mode(small_model):
    check_policy(lambda: LearnedScorer.from_model(small_model))
    check_policy(lambda: LearnedScorer.from_model(small_model, min_feedback=2))
    check_policy(lambda: LearnedScorer(model=None, retrain_every=2, retrain_window=10))


def test_same_seed_same_numbers(small_model):
    tr = default_trace()
    a = simulate(tr, LearnedScorer.from_model(small_model), 1024, seed=3, progress=False)
    b = simulate(tr, LearnedScorer.from_model(small_model), 1024, seed=3, progress=False)
    assert same_replay(a, b)


def test_no_model_is_the_rule_scorer_exactly():
    tr = default_trace()
    for budget in (512, 2048):
        for fetch in (False, True):
            got = simulate(tr, LearnedScorer(model=None), budget, fetch, progress=False)
            want = simulate(tr, make_policy("rule"), budget, fetch, progress=False)
            assert same_replay(got, want)


def test_cold_start_is_rule_until_enough_feedback_then_the_model(small_model):
    """With pins in the trace, a min_feedback of 3 gives rule's moves up to the third pin or
    unpin in replay order (stream by stream), and the model's afterwards."""
    tr = default_trace()
    fb = np.flatnonzero(np.isin(tr.ev_kind, (2, 3, 4)))
    fb = fb[np.argsort(tr.ev_stream[fb], kind="stable")]  # replay order: stream by stream
    assert len(fb) >= 3
    s3, e3 = int(tr.ev_stream[fb[2]]), int(fb[2])
    never = LearnedScorer.from_model(small_model, min_feedback=10**6)
    rule = simulate(tr, make_policy("rule"), 1024, progress=False)
    assert same_replay(simulate(tr, never, 1024, progress=False), rule)
    late = simulate(tr, LearnedScorer.from_model(small_model, min_feedback=3), 1024,
                    progress=False)  # fmt: skip

    def before(res):  # the moves replayed before the third feedback event
        stream = tr.item_stream[res.move_item]
        keep = (stream < s3) | ((stream == s3) & (res.move_event < e3))
        return res.move_event[keep], res.move_item[keep], res.move_kind[keep]

    for a, b in zip(before(late), before(rule)):
        assert np.array_equal(a, b)
    assert not same_replay(late, rule)


def test_a_person_s_drop_reaches_the_policy(small_model):
    """An unpin of an unpinned item (a person's "drop") calls no hook, yet the policy takes it
    in from the trace: the item is rescored at the unpin's event."""
    tr = trace(w("a", 10, "user_input", text="order 42"), w("b", 10), pin("a"), unpin("a"),
               unpin("b"), w("c", 10), rq("r", "a"))  # fmt: skip
    policy = LearnedScorer.from_model(small_model)
    simulate(tr, policy, 20, progress=False, engine="reference")  # reads the class's state
    b, a = tr.item_index["b"], tr.item_index["a"]
    assert policy._last[b] == 4  # the drop at event 4
    assert policy._last[a] == 6  # a: its need at event 6 (after its pin and unpin)


@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_online_retraining_learns_from_feedback_and_is_deterministic():
    from memlens.learn.simulated_user import SimulatedUserConfig, simulate_user

    tr = default_trace()
    cfg = SimulatedUserConfig(interventions_per_100_events=20.0, precision=1.0, recall=1.0)
    fed = with_feedback(tr, simulate_user(tr, cfg))
    policy = LearnedScorer(model=None, retrain_every=50, retrain_window=400)
    a = simulate(fed, policy, 1024, progress=False)
    b = simulate(fed, LearnedScorer(model=None, retrain_every=50, retrain_window=400), 1024,
                 progress=False)  # fmt: skip
    assert same_replay(a, b)
    assert policy._online is not None  # it trained
    assert not same_replay(a, simulate(fed, make_policy("rule"), 1024, progress=False))


def test_bad_policy_settings_are_refused():
    with pytest.raises(ValueError, match="min_feedback"):
        LearnedScorer(model=None, min_feedback=-1)
    with pytest.raises(ValueError, match="decay_per_request"):
        LearnedScorer(model=None, decay_per_request=float("nan"))
    with pytest.raises(ModelError, match="no such model file"):
        LearnedScorer(model="/nonexistent/model.txt")


# --------------------------------------------------------------------------- the command
def run(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})}
    return subprocess.run([MEMLENS, *args], cwd=cwd, capture_output=True, text=True, env=env)


@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_train_refuses_bad_settings_before_any_work(tmp_path):
    proc = run("train", "split=tiny", "label.kind=nope", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error:") and "label" in proc.stderr
    proc = run("train", "split=tiny", "split.train.0.trace=/nonexistent.jsonl", cwd=tmp_path)
    assert proc.returncode == 2 and "split.train[0].trace" in proc.stderr
    assert not list(tmp_path.iterdir())  # nothing written


def test_simulate_refuses_a_missing_model_with_one_line(tmp_path):
    proc = run("simulate", "policy=learned", "policy.model=/nonexistent/m.txt",
               "mlflow.enabled=false", cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "/nonexistent/m.txt" in proc.stderr


@pytest.mark.slow
def test_train_end_to_end_then_simulate_from_the_file_and_the_registry(tmp_path):
    db = f"sqlite:///{tmp_path / 'mlflow.db'}"
    proc = run("train", "split=tiny", "budgets=[1024]", "model.n_estimators=10",
               "tune.decay_per_request=[0.1]", "tune.size_exponent=[0.5,1.0]",
               f"out={tmp_path / 'm.txt'}", f"mlflow.tracking_uri={db}",
               f"mlflow.artifact_location={tmp_path / 'art'}", cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "validation AUC" in proc.stdout and "models:/memlens-learned/1" in proc.stdout
    meta = json.loads((tmp_path / "m.json").read_text())
    assert meta["label"] == {"kind": "oracle", "budget": None, "demand_fetch": False}
    tiny = {f"agent{i}" for i in range(60)}  # conf/split/tiny.yaml, in the trace's order
    want = [name for name in default_trace().stream_names if name in tiny]
    assert meta["training_traces"][0]["streams"] == want and len(want) == 60
    assert (tmp_path / "m-importance.png").stat().st_size > 0

    import mlflow

    client = mlflow.MlflowClient(db)
    run_ = client.search_runs(client.get_experiment_by_name("memlens").experiment_id)[0]
    assert {"validation_auc", "validation_logloss"} <= set(run_.data.metrics)
    hits = []
    for model in (str(tmp_path / "m.txt"), "models:/memlens-learned/1"):
        sim = run("simulate", "policy=learned", f"policy.model={model}", "budget=1024",
                  "mlflow.enabled=false", f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path,
                  env={"MLFLOW_TRACKING_URI": db})  # fmt: skip
        assert sim.returncode == 0, sim.stderr
        hits.append(json.loads((tmp_path / "run" / "metrics.json").read_text())["overall"]["hits"])
    assert hits[0] == hits[1]  # the registered model is the file's model
