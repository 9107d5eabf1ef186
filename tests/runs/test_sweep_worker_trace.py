"""A sweep worker keeps its parsed trace and the metrics' per-trace values (stream index,
reference prices) for every batch it runs (issue 34)."""

from __future__ import annotations

from memlens.analyze import metrics
from memlens.cli.replay import compare_jobs
from memlens.config.compose import compose_config
from memlens.config.schema import resolve
from memlens.runs import pipeline, sweep
from memlens.trace.features import CONTENT_FEATURES_KEY


def test_batches_share_the_trace_and_its_metric_inputs(monkeypatch):
    settings = resolve(compose_config("compare", ["policies=[lru,window]", "budgets=[512]",
                                                  "oracle.enabled=false", "mlflow.enabled=false",
                                                  "n_jobs=1"]))  # fmt: skip
    trace = pipeline.load_trace(settings)
    jobs = sweep.plan(settings, compare_jobs(settings), {settings.trace: trace.sha256})
    loads = []
    real = pipeline.load_trace_cached
    monkeypatch.setattr(
        pipeline, "load_trace_cached", lambda *a, **k: loads.append(1) or real(*a, **k)
    )
    pipeline.forget_traces()
    first = sweep.run_batch([jobs[0]])
    kept = pipeline.load_trace(jobs[0].settings)
    assert metrics.PER_TRACE_KEY in kept.__dict__
    index = kept.__dict__[metrics.PER_TRACE_KEY]["streams"]
    second = sweep.run_batch([jobs[1]])
    assert loads == [1]  # parsed (from the cache) once for both batches
    assert kept.__dict__[metrics.PER_TRACE_KEY]["streams"] is index  # not rebuilt
    assert first[0][1] is None and second[0][1] is None


def test_content_features_outlive_the_batch_of_the_policy_that_made_them():
    """The rule scorer's batch computes the items' content features; the next policy's batch
    (here Generative Agents' importance, which reads them too) finds them, not recomputed,
    while the rule scorer's own per-trace lists are dropped with its batch."""
    settings = resolve(compose_config("compare", ["policies=[rule,generative_agents]",
                                                  "budgets=[512]", "oracle.enabled=false",
                                                  "mlflow.enabled=false", "n_jobs=1"]))  # fmt: skip
    trace = pipeline.load_trace(settings)
    jobs = sweep.plan(settings, compare_jobs(settings), {settings.trace: trace.sha256})
    pipeline.forget_traces()
    assert sweep.run_batch([jobs[0]])[0][1] is None
    kept = pipeline.load_trace(jobs[0].settings)
    features = kept.__dict__[CONTENT_FEATURES_KEY]
    assert "_memlens_static_values" not in kept.__dict__  # the rule scorer's own: dropped
    assert sweep.run_batch([jobs[1]])[0][1] is None
    assert kept.__dict__[CONTENT_FEATURES_KEY] is features
