"""The run pipeline: the one path every replay takes, whichever command asked for it.

    resolve config -> load trace -> replay -> analyzers -> Report -> writers

1. **resolve config**: ``memlens.config.schema.resolve`` turns the composed Hydra config into typed
   objects (``RunConfig``), running every range check before any work starts;
2. **load trace**: :func:`load_trace`, validated, memoised in the process and cached on disk;
3. **replay**: :func:`replay` builds the policy and the optional retriever and runs the
   simulator, giving a :class:`Replay`;
4. **analyzers**: each function in :data:`ANALYZERS` reads the replay and returns a typed
   ``Section`` (metrics, oracle, tiers, retrieval, warnings);
5. **Report**: ``memlens.analyze.report.assemble`` merges the sections, with provenance, and
   ``memlens.analyze.stats.intervals`` adds each decomposable metric's interval over streams;
6. **writers**: ``memlens.runs.writers`` (metrics.json, Parquet, resolved config) and
   ``memlens.runs.tracking`` (MLflow).

``simulate`` is one pass through :func:`run`; ``compare`` is a loop of the same passes, so both
give identical numbers for identical settings.  A compare job skips what no compare output
shows (:data:`JOB_ANALYZERS`: no tier bookkeeping, no row per stream), which changes no number
of its row.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from memlens.analyze import oracle_report
from memlens.analyze.eventlog import attach_probe
from memlens.analyze.metrics import compute_metrics
from memlens.analyze.report import Report, Section, assemble
from memlens.analyze.stats import intervals
from memlens.config.schema import CommonConfig, RunConfig, build_policy, policy_kwargs
from memlens.retrieval.setup import (
    build_retriever,
    live_hook,
    retrieval_record,
    retrieval_section,
    stored_tokens_saved,
)
from memlens.retrieval.tiers import TIER_NAMES, TierLog, replay_tiers
from memlens.simulator import SimResult, simulate
from memlens.trace.cache import CachedFacts, cached_facts, load_trace_cached
from memlens.trace.io import TraceError, check_trace_file
from memlens.trace.model import Trace

_TRACES: dict[tuple[str, bool], Trace] = {}


# ------------------------------------------------------------------ 2. load trace
def load_trace(settings: CommonConfig, path: str | None = None,
               allow_no_requests: bool = False) -> Trace:  # fmt: skip
    """The run's trace (``path`` or ``settings.trace``), parsed once per process.

    Raises ``memlens.trace.io.TraceError`` naming file, line and field; the file is checked
    (a regular file, not a directory, FIFO or device) before the cache reads it.  A trace
    without a request has nothing to replay (every metric would be null): that is an error
    too, unless ``allow_no_requests``.
    """
    path = str(path or settings.trace)
    check_trace_file(path)
    key = (str(Path(path).resolve()), bool(settings.trace_cache))
    if key not in _TRACES:
        _TRACES[key] = load_trace_cached(path, enabled=settings.trace_cache,
                                         limits=settings.trace_limits)  # fmt: skip
    trace = _TRACES[key]
    if trace.n_requests == 0 and not allow_no_requests:
        raise TraceError(path, 0, None, "no requests in the trace: nothing to replay "
                                        f"({trace.n_events} events, none a request)")  # fmt: skip
    return trace


def trace_facts(settings: CommonConfig, path: str | None = None) -> Trace | CachedFacts:
    """The trace's hash, events and requests for a process that will not replay it: the
    parsed trace if this process holds it, else its cache entry's header
    (``memlens.trace.cache.cached_facts``); parsed (:func:`load_trace`) when neither.  A
    trace without a request is refused as :func:`load_trace` refuses it."""
    path = str(path or settings.trace)
    check_trace_file(path)
    held = _TRACES.get((str(Path(path).resolve()), bool(settings.trace_cache)))
    if held is not None:
        return held
    if not settings.trace_cache:
        return load_trace(settings, path)
    facts = cached_facts(path)
    if facts is None:
        return load_trace(settings, path)
    if facts.n_requests == 0:
        raise TraceError(path, 0, None, "no requests in the trace: nothing to replay "
                                        f"({facts.n_events} events, none a request)")  # fmt: skip
    return facts


def forget_traces() -> None:
    """Drop this process's parsed traces: a sweep whose jobs run in worker processes (each
    parsing its own copy) need not keep the main process's copy for the whole sweep (on a
    5M-event trace, gigabytes)."""
    _TRACES.clear()


# ---------------------------------------------------------------------- 3. replay
@dataclass
class Replay:
    """One finished replay and everything the analyzers may read."""

    settings: RunConfig
    trace: Trace
    policy: object
    result: SimResult
    retrieval: object | None  # memlens.retrieval.assemble.RetrievalRecord

    @property
    def outside_oracle_class(self) -> bool:
        return bool(
            getattr(self.policy, "outside_oracle_class", False)
            or self.result.extra.get("outside_oracle_class", False)
        )

    @property
    def tiers(self) -> TierLog:
        """Every tier move (from the live retrieval record, or replayed from the WM log), made
        once: ``simulate``'s writer threads and its analyzers may ask at the same time."""
        with _TIERS_MADE:
            if "_tiers" not in self.__dict__:
                self.__dict__["_tiers"] = self._replay_tiers()
            return self.__dict__["_tiers"]

    def _replay_tiers(self) -> TierLog:
        if self.retrieval is not None:
            return self.retrieval.tiers
        t = self.settings.tiers
        return replay_tiers(self.trace, self.result, short_term_tokens=t.short_term_tokens,
                            ttl_s=t.ttl_s)  # fmt: skip


#: Held while a replay's tier log is made (:attr:`Replay.tiers`).
_TIERS_MADE = threading.Lock()


def replay(settings: RunConfig, trace: Trace, record_values: bool = False) -> Replay:
    """Build the policy (and retriever) from the settings and replay the trace.

    ``record_values``: a run whose event log will be written (``simulate``) records a scoring
    policy's values (``memlens.analyze.eventlog.attach_probe``: the bundled ones after their
    kernel, from the move log; any other by a probe on the reference engine); compare's jobs
    do not."""
    policy = build_policy(settings.policy)
    if record_values:
        attach_probe(policy, settings.events)
    use_oracle = getattr(policy, "use_oracle_settings", None)
    if use_oracle is not None:  # policy=oracle replays the plan the oracle section reports
        use_oracle(settings.oracle)
    use_embeddings = getattr(policy, "use_embeddings_settings", None)
    if use_embeddings is not None:  # generative_agents relevance=embeddings: the run's vectors
        use_embeddings(settings.embeddings, settings.seed)
    retriever = build_retriever(trace, settings.retrieval, settings.tiers, settings.embeddings,
                                settings.compression, settings.seed)  # fmt: skip
    hook = live_hook(retriever, settings.engine)
    result = simulate(trace, policy, budget=settings.budget, demand_fetch=settings.demand_fetch,
                      seed=settings.seed, engine=settings.engine, progress=settings.progress,
                      hook=hook)  # fmt: skip
    record = retrieval_record(trace, result, retriever, hook)
    return Replay(settings, trace, policy, result, record)


# ------------------------------------------------------------------- 4. analyzers
def analyze_metrics(run: Replay, stream_rows: bool = True) -> Section:
    m = compute_metrics(run.trace, run.result, price_per_mtok=run.settings.price_per_mtok,
                        retrieval=run.retrieval, costs=run.settings.costs,
                        stream_rows=stream_rows)  # fmt: skip
    timing = {**m["timing"], "compile_s": job_compile_s(run.policy, run.settings)}
    return Section("", overall=m["overall"], streams=m["streams"], timing=timing,
                   stream_parts=m["stream_parts"])  # fmt: skip


def job_compile_s(policy, settings: CommonConfig) -> float:
    """What this process spent compiling the kernels of a job of ``policy`` before the work
    began (``memlens.kernels.warm``; a sweep's main process fills it in for its workers)."""
    from memlens.kernels.warm import compile_seconds, stage_labels

    return round(compile_seconds(stage_labels(policy, settings.oracle.enabled)), 3)


def analyze_oracle(run: Replay, stream_rows: bool = True) -> Section:
    s = run.settings
    hits = int(run.result.need_hit.sum())
    return oracle_report.analyze(run.trace, s.budget, s.demand_fetch, s.oracle, hits,
                                 not run.outside_oracle_class, stream_rows)  # fmt: skip


def analyze_tiers(run: Replay) -> Section:
    tiers = run.tiers
    finals = np.bincount(tiers.final_tier + 1, minlength=4)
    saved = stored_tokens_saved(run.trace, tiers, run.settings.compression)
    return Section("tiers", {
        "moves": tiers.counts(),
        "items_at_end": {TIER_NAMES[k - 1]: int(finals[k]) for k in range(1, 4)},
        "compression_stored_tokens_saved": saved,
    })  # fmt: skip


def analyze_retrieval(run: Replay) -> Section:
    return Section("retrieval", retrieval_section(run.retrieval))


def analyze_warnings(run: Replay) -> Section:
    budget = run.settings.budget
    over = int((run.result.pinned_tokens > budget).sum())
    warnings = []
    if over:
        warnings.append(
            f"pinned items alone exceeded the budget of {budget} tokens at {over} request(s)"
        )
    return Section("", warnings=warnings)


#: Every analyzer: ``simulate`` runs them all (metrics.json has every section).
ANALYZERS = (analyze_metrics, analyze_oracle, analyze_tiers, analyze_retrieval,
             analyze_warnings)  # fmt: skip
#: Every analyzer but the tiers': what a compare row, compare.json, the sweep's resume entries
#: or a sharded run's shard summary can show.  Replaying the move log through the lower tiers
#: was about 30% of a large compare job, and none of these reads it.
ROW_ANALYZERS = tuple(a for a in ANALYZERS if a is not analyze_tiers)


def analyze_job_metrics(run: Replay) -> Section:
    """:func:`analyze_metrics` without a row per stream (its parts, which the intervals and
    the paired differences read, are the same)."""
    return analyze_metrics(run, stream_rows=False)


def analyze_job_oracle(run: Replay) -> Section:
    """:func:`analyze_oracle` without each stream's bounds."""
    return analyze_oracle(run, stream_rows=False)


#: A compare job's analyzers: :data:`ROW_ANALYZERS` without the rows per stream, which no
#: compare output shows.  5,800 streams' rows were a tenth of a job's analysis, and its
#: resume entry took 0.10 s to write with them against 0.01 s without: 40 of them, 2.5 s of a
#: compare's main process (issue 34).  (A sharded run's shards keep :data:`ROW_ANALYZERS`: its
#: merged report has the rows.)
JOB_ANALYZERS = (analyze_job_metrics, analyze_job_oracle, analyze_retrieval, analyze_warnings)


# ---------------------------------------------------------------------- 5. Report
def analyze(run: Replay, analyzers=ANALYZERS) -> Report:
    """The report of a finished replay, from the sections of ``analyzers``."""
    s, trace = run.settings, run.trace
    target, params = policy_kwargs(s.policy)
    identity = {
        "trace": {
            "path": trace.source,
            "sha256": trace.sha256,
            "events": trace.n_events,
            "streams": trace.n_streams,
        },  # fmt: skip
        "policy": run.policy.name,
        "policy_config": {"_target_": target, **params},
        "budget": s.budget,
        "demand_fetch": s.demand_fetch,
        "seed": s.seed,
        "outside_oracle_class": run.outside_oracle_class,
    }
    report = assemble(identity, [analyzer(run) for analyzer in analyzers], trace.stream_names)
    # statistics: every decomposable metric's bootstrap interval over the trace's streams
    report.intervals = intervals(report.stream_parts, s.stats)
    return report


def run(settings: RunConfig, trace: Trace | None = None, record_values: bool = False,
        analyzers=ANALYZERS) -> tuple[Replay, Report]:  # fmt: skip
    """Steps 2-5 for resolved settings: the replay and its report (from ``analyzers``:
    :data:`JOB_ANALYZERS` for a compare job)."""
    trace = trace if trace is not None else load_trace(settings)
    done = replay(settings, trace, record_values)
    return done, analyze(done, analyzers)
