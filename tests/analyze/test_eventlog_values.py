"""The scoring policies' values computed after a kernel replay (``memlens.kernels.values``, via
``KernelValues``) equal, bit for bit, what the reference probe (``ValueProbe`` /
``RuleValueProbe``, wrapping the policy's own methods on the reference engine) records; the
policies keep their kernels with the full log; ``engine=fast`` says why it cannot run a probed
policy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from memlens.policies.memorybank import MemoryBank
from memlens.policies.memoryos_heat import MemoryOSHeat
from memlens.policies.rule import RuleScorer

from memlens.analyze.eventlog import (
    KernelValues,
    RuleValueProbe,
    ValueProbe,
    attach_probe,
    build_event_log,
    value_function,
)
from memlens.config.schema import CommonConfig
from memlens.simulator import simulate
from memlens.testing import annotate, pin, rq, trace, traces, unpin, w, with_alternatives

POLICIES = {
    "rule": lambda: RuleScorer(),
    "rule-admission": lambda: RuleScorer(admit_threshold=0.9, admit_fetched=False),
    "memorybank": lambda: MemoryBank(time_unit_hours=0.01),
}


def by_event(cols: dict) -> dict:
    """The records sorted stably by event (the probe's are stream by stream, the kernel's
    in file order; within an event both follow the replay)."""
    order = np.argsort(cols["event"], kind="stable")
    return {k: np.asarray(v)[order] for k, v in cols.items()}


def reference_records(tr, make, budget, demand_fetch, rate):
    pol = make()
    kind = RuleValueProbe if type(pol) is RuleScorer else ValueProbe
    probe = kind(pol, value_function(pol), rate)
    simulate(tr, pol, budget, demand_fetch=demand_fetch, engine="reference", progress=False)
    return by_event(probe.columns())


def kernel_records(tr, make, budget, demand_fetch, rate):
    pol = make()
    values = KernelValues(pol, rate)
    result = simulate(tr, pol, budget, demand_fetch=demand_fetch, progress=False)
    assert result.engine == "fast"  # nothing wrapped: the kernel ran
    values.bind(tr, result)
    return by_event(values.columns())


def assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype, k
        assert np.array_equal(a[k], b[k], equal_nan=a[k].dtype.kind == "f"), k


@hsettings(max_examples=6)
@given(events=traces(max_events=60))
@pytest.mark.parametrize("name", list(POLICIES))
@pytest.mark.parametrize("budget,demand_fetch", [(3, False), (20, True)])
def test_kernel_values_equal_the_probe(events, name, budget, demand_fetch):
    make = POLICIES[name]
    plain = trace(*events)
    groups = trace(*with_alternatives(events, np.random.default_rng(len(events))))  # format 1.1
    for tr, rate in ((plain, 1.0), (plain, 0.5), (groups, 1.0)):
        assert_same(kernel_records(tr, make, budget, demand_fetch, rate),
                    reference_records(tr, make, budget, demand_fetch, rate))  # fmt: skip


def test_a_hand_made_trace_with_every_kind_of_record():
    """Pins, an annotation with and without a value, a fetch and evictions, two streams."""
    events = [w("a", 2, t=0.0), w("b", 2, stream="s", t=1.0), w("c", 2, t=2.0), pin("a", t=3.0),
              rq("r1", "a", "c", t=40.0), annotate("c", value=0.7, t=41.0), w("d", 3, t=42.0),
              unpin("a", t=50.0), rq("r2", "c", "d", t=90.0), rq("r3", "b", stream="s", t=95.0),
              annotate("d", note="just a note", t=96.0), w("e", 4, t=97.0),
              rq("r4", "a", "e", t=130.0)]  # fmt: skip
    tr = trace(*events)
    for name, make in POLICIES.items():
        got = kernel_records(tr, make, 6, True, 1.0)
        assert_same(got, reference_records(tr, make, 6, True, 1.0))
        assert {0, 1, 2, 3} <= set(got["what"].tolist()), name  # insert, evict, use, annotate


def test_the_bundled_scoring_policies_get_kernel_values():
    events = CommonConfig().events
    for make in POLICIES.values():
        assert type(attach_probe(make(), events)) is KernelValues

    class Ablated(RuleScorer):  # a subclass may change the value: its own methods are asked
        pass

    assert type(attach_probe(Ablated(), events)) is RuleValueProbe
    # MemoryOS's heat needs its queue and promotions, which the move log does not show
    assert type(attach_probe(MemoryOSHeat(), events)) is not KernelValues


def test_full_log_replays_on_the_kernel_and_equals_the_reference_log(tmp_path):
    """The whole event log (values included) of a kernel replay is the reference engine's."""
    from memlens.config.compose import compose_config
    from memlens.config.schema import resolve
    from memlens.runs.pipeline import run

    events = [w(f"x{k}", 1 + k % 3, stream="ab"[k % 2], t=float(k)) for k in range(12)]
    events += [rq(f"r{k}", f"x{k}", f"x{k + 2}", stream="ab"[k % 2], t=20.0 + k)
               for k in range(10)]  # fmt: skip
    tr = trace(*events)
    for name in ("rule", "memorybank"):
        logs = {}
        for engine in ("auto", "reference"):
            cfg = compose_config("simulate", ["mlflow.enabled=false", "progress=false",
                                              "oracle.enabled=false", f"policy={name}", "budget=4",
                                              f"engine={engine}"])  # fmt: skip
            if engine == "reference":  # the old way: the probe wrapping the methods
                done, _ = _reference_run(resolve(cfg), tr)
            else:
                done, _ = run(resolve(cfg), tr, record_values=True)
                assert done.result.engine == "fast", name
            logs[engine] = build_event_log(done)
        for k in logs["auto"]:
            assert np.array_equal(logs["auto"][k], logs["reference"][k], equal_nan=True), (name, k)
        assert not np.isnan(logs["auto"]["value_before"]).all(), name


def _reference_run(settings, tr):
    """``run`` with the reference probe forced (what ``simulate`` did before the kernels
    emitted values)."""
    import memlens.analyze.eventlog as el
    from memlens.runs import pipeline

    original = pipeline.attach_probe

    def probe_the_old_way(policy, cfg):
        kind = RuleValueProbe if type(policy) is RuleScorer else ValueProbe
        probe = kind(policy, el.value_function(policy), cfg.rescore_sample)
        policy._memlens_value_probe = probe
        return probe

    pipeline.attach_probe = probe_the_old_way
    try:
        return pipeline.run(settings, tr, record_values=True)
    finally:
        pipeline.attach_probe = original


def test_engine_fast_names_the_probe_as_the_reason():
    pol = MemoryBank()
    ValueProbe(pol, pol.retention)
    with pytest.raises(ValueError, match="value probe") as err:
        simulate(trace(w("a", 1), rq("r", "a")), pol, 4, engine="fast")
    assert "exact class" not in str(err.value)
    with pytest.raises(ValueError, match="stochastic|kernel_supported"):
        simulate(trace(w("a", 1)), MemoryBank(stochastic=True), 4, engine="fast")
