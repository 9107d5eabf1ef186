"""Bodies of the Hydra subcommands ``simulate`` and ``compare``: thin loops over the pipeline.

``simulate`` is one pass of ``memlens.runs.pipeline.run``.  ``compare`` composes each of its jobs
exactly as ``memlens simulate trace=T policy=P budget=B <policy overrides>`` would (the same
Hydra composition of the policy node, the same typed settings) and runs the same pass, so the
two commands give identical numbers for identical settings.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import errno
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from memlens._util.atomic import write_json, write_text
from memlens.analyze.recommend import Choice, default_cost, recommend, recommend_across, render
from memlens.analyze.registry import declared, report_columns, summary_columns
from memlens.analyze.report import Report
from memlens.analyze.stats import Interval, StatsConfig, differences
from memlens.analyze.table import format_table, interval_cell, to_csv
from memlens.config.memo import kept_policy_config
from memlens.config.schema import (
    CommonConfig,
    CompareConfig,
    RecommendConfig,
    RunConfig,
    build_policy,
    check_reference,
    resolve,
)
from memlens.config.store import SettingsError, policy_targets, registered_policies
from memlens.runs.pipeline import analyze, load_trace, replay
from memlens.runs.preflight import check_engine, check_files, trace_loader
from memlens.runs.sweep import Sweep
from memlens.trace.io import TraceError

#: The metric of the ``vs <reference>`` column (compare.json has every metric's difference).
VS_METRIC = "hit_rate"


def job_settings(common: CommonConfig, trace: str, policy, budget: int) -> RunConfig:
    """One compare job's settings: the shared settings plus its trace, policy and budget."""
    shared = {f.name: getattr(common, f.name) for f in fields(CommonConfig)}
    return RunConfig(**{**shared, "trace": trace}, policy=policy, budget=budget)


def check_policy_builds(policy_cfg):
    """The policy instance the config describes (a ``SettingsError`` if it cannot be built)."""
    try:
        return build_policy(policy_cfg)
    except (TypeError, ValueError) as exc:
        raise SettingsError(f"cannot build policy {policy_cfg._target_}: {exc}") from None


def check_simulate(cfg: DictConfig) -> Callable[[], None]:
    """Everything ``simulate`` can check before it starts (raises on the first problem).

    Returns the deferred step, the trace parse (``memlens.runs.preflight``), which
    ``memlens.config.app.validate`` runs once every job's settings have passed."""
    settings: RunConfig = resolve(cfg)
    policy = check_policy_builds(settings.policy)
    if not settings.oracle.enabled and hasattr(policy, "use_oracle_settings"):
        raise SettingsError(f"policy={policy.name} replays the oracle's plan, but "
                            "oracle.enabled=false turns the oracle off: set oracle.enabled=true")  # fmt: skip
    check_engine(settings, {getattr(policy, "name", type(policy).__name__): policy})
    if settings.shards:  # split, never parsed whole (memlens.runs.sharded)
        from memlens.runs.sharded import check_shardable, trace_splitter

        check_shardable(settings, [policy])
        check_files(settings, [], [policy])
        return trace_splitter(settings, [settings.trace], [policy], tiers=True)
    check_files(settings, [settings.trace], [policy])
    return trace_loader(settings, [settings.trace], [policy], tiers=True)


_POLICY_CONFIGS: dict[tuple[str, tuple[str, ...]], object] = {}


def scoped_target(override: str) -> str | None:
    """The policy NAME a ``policy@NAME.<param>=v`` override is scoped to (None: unscoped)."""
    body = override.lstrip("+~")
    if not body.startswith("policy@"):
        return None
    return body[len("policy@") :].partition(".")[0]


def overrides_for(name: str, overrides: list[str]) -> list[str]:
    """The overrides that apply to policy ``name``: every ``policy.<param>=v``, and each
    ``policy@NAME.<param>=v`` that names it, as ``policy.<param>=v`` (so one compare can set a
    parameter only one of its policies has, e.g. ``policy@memgpt.variant=code``)."""
    out = []
    for o in overrides:
        target = scoped_target(o)
        if target is None:
            out.append(o)
        elif target == name:
            prefix = o[: len(o) - len(o.lstrip("+~"))]
            out.append(prefix + "policy." + o.lstrip("+~").partition(".")[2])
    return out


def composed_policy(name: str, overrides: list[str]):
    """``memlens.config.compose.policy_config``, composed once per process (the pre-run check
    and the job list need the same configs) and kept between processes for the same files,
    code and overrides (``memlens.config.memo``): each Hydra composition costs about 0.1 s."""
    overrides = overrides_for(name, overrides)
    key = (name, tuple(overrides))
    if key not in _POLICY_CONFIGS:
        _POLICY_CONFIGS[key] = kept_policy_config(name, list(overrides))
    return copy.deepcopy(_POLICY_CONFIGS[key])  # a caller may change its copy


def reads_oracle(name: str) -> bool:
    """Does the registered policy ``name`` replay the oracle's plan (so solves the bounds)?"""
    from hydra.utils import get_class

    return hasattr(get_class(policy_targets()[name]), "use_oracle_settings")


def compared_policies(settings: CompareConfig) -> list[str]:
    """The policies a compare runs: ``policies``, or every registered one.

    ``oracle.enabled=false`` turns the oracle off everywhere: a policy replaying the oracle's
    plan (``oracle``) would solve the bounds anyway, so it leaves the default list (the command
    prints a note), and naming it in ``policies`` or ``reference`` is an error (the two
    settings contradict each other; which one was meant cannot be guessed)."""
    names = settings.policies or registered_policies()
    if settings.oracle.enabled:
        return names
    oracles = [n for n in names if n in registered_policies() and reads_oracle(n)]
    listed = [n for n in oracles if settings.policies or n == settings.reference]
    if listed:
        where = "policies lists" if settings.policies else f"reference={listed[0]} names"
        raise SettingsError(f"{where} {listed[0]}, which replays the oracle's plan, but "
                            "oracle.enabled=false turns the oracle off: leave it out or set "
                            "oracle.enabled=true")  # fmt: skip
    return [n for n in names if n not in oracles]


def oracle_note(settings: CompareConfig) -> str | None:
    """The note a compare prints when ``oracle.enabled=false`` left policies out of the default
    list (None when it left none out)."""
    if settings.oracle.enabled or settings.policies:
        return None
    left = [n for n in registered_policies() if reads_oracle(n)]
    if not left:
        return None
    return (f"note: oracle.enabled=false: left out {', '.join(left)} (it replays the oracle's "
            "plan, which would solve the bounds)")  # fmt: skip


def check_jobs(settings: CompareConfig, names: list[str]) -> Callable[[], None]:
    """``compare``'s and ``recommend``'s checks of the policies ``names`` and of every trace;
    returns the deferred trace parse.  The sweep's workers start meanwhile
    (``memlens.runs.sweep.start_workers_ahead``); a failed check stops them."""
    from memlens._util.parallel import released_on_error
    from memlens.runs.sweep import start_workers_ahead

    start_workers_ahead(settings, len(names))
    with released_on_error():
        load = _check_jobs(settings, names)

    def deferred() -> None:
        with released_on_error():
            load()

    return deferred


def _check_jobs(settings: CompareConfig, names: list[str]) -> Callable[[], None]:
    for o in settings.policy_overrides:
        if scoped_target(o) is not None and scoped_target(o) not in names:
            raise SettingsError(f"{o}: policy {scoped_target(o)!r} is not among the compared "
                                f"policies ({', '.join(names)})")  # fmt: skip
    policies = {n: check_policy_builds(composed_policy(n, settings.policy_overrides))
                for n in names}  # fmt: skip
    check_engine(settings, policies)
    check_reference(settings.reference, names)
    traces = settings.traces or [settings.trace]
    if settings.shards:  # split, never parsed whole (memlens.runs.sharded)
        from memlens.runs.sharded import check_shardable, trace_splitter

        check_shardable(settings, list(policies.values()))
        check_files(settings, [], list(policies.values()))
        return trace_splitter(settings, traces, list(policies.values()))
    check_files(settings, traces, list(policies.values()))
    return trace_loader(settings, traces, list(policies.values()), whole=settings.oracle.enabled)


def check_compare(cfg: DictConfig) -> Callable[[], None]:
    settings: CompareConfig = resolve(cfg)
    return check_jobs(settings, compared_policies(settings))


def _run_dir() -> Path:
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)


def _hydra_files() -> list[str]:
    """What Hydra wrote into the run dir before the command began (it moves with the run)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    hydra = HydraConfig.get()
    return [n for n in (hydra.output_subdir, f"{hydra.job.name}.log") if n]


def _load(settings: CommonConfig, path: str | None = None, whole: bool = True):
    """The parsed trace, or with ``shards`` its ``memlens.trace.shard.ShardSet`` (never parsed
    whole), or without ``whole`` only its hash and sizes when its cache entry has them
    (``memlens.runs.pipeline.trace_facts``); a bad trace: one ``error:`` line, exit 2."""
    with trace_errors():
        if settings.shards:
            from memlens.runs.sharded import no_requests, split

            shards = split(settings, path or settings.trace)
            if (err := no_requests(shards, path or settings.trace)) is not None:
                raise err
            return shards
        if not whole:
            from memlens.runs.pipeline import trace_facts

            return trace_facts(settings, path)
        return load_trace(settings, path)


@contextlib.contextmanager
def trace_errors() -> Iterator[None]:
    """A ``TraceError`` (file, line, field): one ``error:`` line and exit 2."""
    try:
        yield
    except TraceError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


#: What a run folder that cannot be written fails with (found only while writing it).
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG})


@contextlib.contextmanager
def disk_errors(out_dir: Path) -> Iterator[None]:
    """A full or read-only disk under the run folder: one ``error:`` line and exit 2 (the
    staged files are gone by then: ``memlens.runs.writers.run_folder`` removed them), never a
    traceback."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in DISK_ERRNOS:
            raise
        print(f"error: hydra.run.dir={out_dir}: cannot write the run's files "
              f"({exc.strerror or exc}); nothing of this run was kept", file=sys.stderr)  # fmt: skip
        raise SystemExit(2) from None


def warn(messages: list[str]) -> None:
    for m in messages:
        print(f"warning: {m}", file=sys.stderr)


def simulate_task(cfg: DictConfig):
    """``memlens simulate``: one pass of the pipeline, records in the Hydra run dir."""
    from memlens.runs.interrupts import interruptible
    from memlens.runs.tracking import RUN_DIR_TAG, exit_if_required, log_report, mlflow_run
    from memlens.runs.writers import run_folder, tables_started, write_run

    settings: RunConfig = resolve(cfg)
    trace = _load(settings)  # with shards: the split trace, never parsed whole
    out_dir = _run_dir()
    resolved_yaml = OmegaConf.to_yaml(cfg, resolve=True)
    label = f"{settings.policy._target_.rsplit('.', 1)[-1]}@{settings.budget}"
    with (
        disk_errors(out_dir),  # a full or read-only disk: exit 2, nothing kept
        interruptible(),  # SIGTERM/SIGINT: MLflow run KILLED, folder untouched, exit 143/130
        mlflow_run(
            settings.mlflow, run_name=label, tags={RUN_DIR_TAG: str(Path(out_dir).resolve())}
        ) as tracking,
        run_folder(out_dir, _hydra_files()) as folder,  # swapped in whole at the end
    ):
        if settings.shards:
            from memlens.runs.sharded import simulate_sharded

            with trace_errors():  # a shard's bad line: exit 2 before any replay
                report = simulate_sharded(settings, folder, resolved_yaml)
            paths = sorted(p for p in folder.iterdir() if p.is_file())
        else:
            done = replay(settings, trace, record_values=settings.events.enabled)
            with tables_started(folder, done) as started:  # overlap the analyzers
                report = analyze(done)
                paths = write_run(folder, done, report, resolved_yaml, started)
        log_report(tracking, report, paths)
    columns = ["policy", "budget", *summary_columns(settings.retrieval.enabled)]
    rows = [Row(report.row(), report)]
    print(format_table(shown_rows(rows, columns, None, VS_METRIC), columns))
    print("\n" + "\n".join(interval_notes(rows, columns, settings, None, VS_METRIC)))
    t = report.timing
    rate = "-" if t["events_per_s"] is None else f"{t['events_per_s']:,.0f}"
    print(f"{report.overall['events']} events in {t['wall_s']:.3f} s "
          f"({rate} events/s, {t['engine']} engine); records in {out_dir}")  # fmt: skip
    warn(report.warnings)
    exit_if_required(settings.mlflow, out_dir)
    return report


def compare_jobs(settings: CompareConfig):
    """(trace path, policy name, typed policy config, budget) for every job, in table order."""
    names = compared_policies(settings)
    policies = {n: composed_policy(n, settings.policy_overrides) for n in names}
    for path in settings.traces or [settings.trace]:
        for name in names:
            for budget in settings.budgets:
                yield path, name, policies[name], budget


@dataclass
class Row:
    """One compare job: its table row, its report (with intervals) and, with a reference, its
    paired differences to the reference policy at the same trace and budget."""

    values: dict  # report.row() under the compared policy's name
    report: Report
    vs: dict[str, Interval] = field(default_factory=dict)

    def to_json(self, columns: list[str], reference: str | None, arrays: bool = False) -> dict:
        """One compare.json row: every metric, its interval, the raw per-stream parts and the
        difference to the reference (so any other test can be run later); ``arrays``: the
        parts as arrays, for ``write_json``, which writes them as their lists."""
        out = {c: self.values.get(c) for c in columns}
        out["trace_path"] = self.report.trace["path"]
        out["intervals"] = {k: iv.to_dict() for k, iv in self.report.intervals.items()}
        out["stream_parts"] = self.report.parts_dict(arrays)
        if reference is not None:
            out["vs_reference"] = {
                "reference": reference,
                "metrics": {k: {**iv.to_dict(), "excludes_zero": iv.excludes_zero}
                            for k, iv in self.vs.items()},
            }  # fmt: skip
        return out


def add_differences(rows: list[Row], reference: str, cfg: StatsConfig) -> None:
    """Each row's paired differences to the reference policy's row (same trace and budget)."""
    refs = {(r.report.trace["path"], r.values["budget"]): r for r in rows
            if r.values["policy"] == reference}  # fmt: skip
    for row in rows:
        ref = refs.get((row.report.trace["path"], row.values["budget"]))
        if ref is not None:  # None: the reference's job failed (the sweep says so)
            row.vs = differences(row.report.stream_parts, ref.report.stream_parts, cfg)


def run_compare(settings: CompareConfig, cfg: DictConfig, name: str = "compare",
                finish: Callable | None = None) -> tuple[list[Row], Sweep]:  # fmt: skip
    """Every (trace, policy, budget) job through the pipeline as one sweep (``memlens.runs.sweep``:
    every core, resumable, one MLflow child run per job); compare.csv, compare.json, sweep.json
    and whatever ``finish(rows, folder)`` adds, swapped into the run dir as one whole folder.
    Rows of failed jobs are left out (the sweep lists them)."""
    from memlens._util.parallel import release_workers
    from memlens.analyze.stats import preload_kernel
    from memlens.runs.interrupts import interruptible
    from memlens.runs.sweep import execute, new_sweep_id, parent_tags, plan
    from memlens.runs.tracking import log_run, mlflow_run
    from memlens.runs.writers import run_folder

    note = oracle_note(settings)
    if note is not None:
        print(note, file=sys.stderr)
    jobs = list(compare_jobs(settings))
    traces = {p: _load(settings, p, whole=settings.oracle.enabled)  # validated
              for p in dict.fromkeys(job[0] for job in jobs)}  # fmt: skip
    specs = plan(settings, jobs, {p: t.sha256 for p, t in traces.items()})
    out_dir = _run_dir()
    sweep_id = new_sweep_id()
    with (
        disk_errors(out_dir),
        interruptible(),
        mlflow_run(settings.mlflow, run_name=name, tags=parent_tags(name, sweep_id)) as parent,
        run_folder(out_dir, _hydra_files()) as folder,
    ):
        if settings.shards:  # one task per shard and job (memlens.runs.sharded)
            from memlens.runs.sharded import execute_sharded

            del traces
            with trace_errors():  # a shard's bad line: exit 2 before any replay
                sweep = execute_sharded(settings, specs, parent, settings.resume, sweep_id)
        else:
            presolve_oracle(settings, traces)
            preload_kernel()  # the intervals' kernel, loaded while the workers run the jobs
            events = {p: t.n_events for p, t in traces.items()}
            del traces  # the sweep's jobs load their own (memlens.runs.pipeline.forget_traces)
            sweep = execute(settings, specs, parent, settings.resume, events, sweep_id)
            release_workers()  # they exit on the other cores while the tables are written
        rows = [Row({**o.report.row(), "policy": o.job.policy_name}, o.report)
                for o in sweep.outcomes if o.report is not None]  # fmt: skip
        for o in sweep.outcomes:
            if o.report is not None:
                warn([f"{o.job.label}: {w}" for w in o.report.warnings])
        if settings.reference is not None:
            add_differences(rows, settings.reference, settings.stats)
        write_compare(folder, rows, settings.reference)
        write_json(folder / "sweep.json", sweep.summary())
        if finish is not None:
            finish(rows, folder)
        summary = sweep.summary()
        log_run(parent, {"traces": settings.traces or [settings.trace], "budgets": settings.budgets,
                         "policies": compared_policies(settings),
                         "policy_overrides": settings.policy_overrides,
                         "sweep_id": sweep.sweep_id, "n_workers": sweep.workers,
                         "jobs": summary["jobs"], "jobs_skipped": summary["skipped"],
                         "jobs_failed": len(summary["failed"])}, {},
                [folder / "compare.csv", folder / "sweep.json"],
                OmegaConf.to_yaml(cfg, resolve=True))  # fmt: skip
    print(sweep.line(), file=sys.stderr)
    return rows, sweep


def presolve_oracle(settings: CompareConfig, traces: dict) -> None:
    """Solve the oracle once per (trace, budget) before the jobs, spread over the workers
    (``memlens.oracle.batch``); a failure here is left for the jobs to report."""
    from memlens._util.parallel import workers
    from memlens.oracle.batch import presolve

    if settings.backend == "ray":  # the cluster's workers may not share this disk cache
        return
    total = sum(t.n_events for t in traces.values()) * len(settings.budgets)
    n = workers(settings.n_jobs, len(traces) * len(settings.budgets), total,
                settings.parallel_min_events)  # fmt: skip
    try:
        presolve({p: t for p, t in traces.items()}, settings.trace_cache, settings.budgets,
                 settings.demand_fetch, settings.oracle, n, settings.progress)  # fmt: skip
    except Exception as err:  # noqa: BLE001 - every job solves and reports it again
        print(f"note: solving the oracle before the jobs failed ({err}); each job solves its "
              "own", file=sys.stderr)  # fmt: skip


def exit_if_failed(sweep: Sweep) -> None:
    """Exit 1 (tables already written) when a job of the sweep failed, naming each."""
    from memlens.runs.sweep import JOB_FAILED_EXIT

    for failed in sweep.failed:
        print(f"error: job {failed.job.label} on {failed.job.settings.trace} failed: "
              f"{failed.error}", file=sys.stderr)  # fmt: skip
    if sweep.failed:
        raise SystemExit(JOB_FAILED_EXIT)


def write_compare(out_dir: Path, rows: list[Row], reference: str | None) -> None:
    """compare.csv (every metric, the summary metrics' bounds and differences) and compare.json."""
    columns = ["trace", "policy", "budget", *report_columns()]
    bounded = [k for k in summary_columns(True) if k in declared() and declared()[k].parts]
    flat = []
    for row in rows:
        extra = {}
        for k in bounded:
            iv, vs = row.report.intervals.get(k), row.vs.get(k)
            extra |= {f"{k}_low": iv and iv.low, f"{k}_high": iv and iv.high}
            if vs is not None:
                extra |= {f"{k}_vs_ref": vs.estimate, f"{k}_vs_ref_low": vs.low,
                          f"{k}_vs_ref_high": vs.high}  # fmt: skip
        flat.append({**row.values, **extra, "reference": reference})
    csv_cols = [*columns, *[f"{k}_{b}" for k in bounded for b in ("low", "high")]]
    if reference is not None:
        csv_cols += ["reference", *[f"{k}_vs_ref{b}" for k in bounded
                                    for b in ("", "_low", "_high")]]  # fmt: skip
    write_text(out_dir / "compare.csv", to_csv(flat, csv_cols))
    write_json(
        out_dir / "compare.json",
        [r.to_json(columns, reference, True) for r in rows],
        flat_lists=True,
    )  # per-stream parts: long number lists


def shown_rows(rows: list[Row], columns: list[str], reference: str | None,
               vs_metric: str) -> list[dict]:  # fmt: skip
    """Table rows: each metric with its interval; the ``vs <reference>`` cell."""
    out = []
    for row in rows:
        cells = dict(row.values)
        for c in columns:
            iv = row.report.intervals.get(c)
            if iv is not None and iv.estimate is not None:
                cells[c] = interval_cell(c, iv)
        if reference is not None:
            own = row.values["policy"] == reference
            vs = row.vs.get(vs_metric)
            cells[f"vs {reference}"] = ("(reference)" if own else "-" if vs is None
                                        else interval_cell(vs_metric, vs, signed=True))  # fmt: skip
        out.append(cells)
    return out


def interval_notes(rows: list[Row], columns: list[str], settings: CommonConfig,
                   reference: str | None, vs_metric: str) -> list[str]:  # fmt: skip
    """The lines under a table: what the intervals are, and where there are none."""
    cfg = settings.stats
    none = [c for c in columns if c in declared() and declared()[c].parts is None]
    notes = [f"intervals: {cfg.ci:.0%} {cfg.method} bootstrap over streams ({cfg.bootstrap} "
             f"resamples, seed {cfg.seed})"
             + (f"; no interval for {', '.join(none)} (not decomposable over streams)"
                if none else "")]  # fmt: skip
    few = {}
    for row in rows:
        n = len(row.report.stream_names)
        if n < cfg.min_streams:
            few[row.values["trace"]] = n
    for trace, n in few.items():
        notes.append(f"{trace}: {n} stream(s), fewer than stats.min_streams={cfg.min_streams}: "
                     f"no interval can be given ([n<{cfg.min_streams}])")  # fmt: skip
    if reference is not None:
        notes.append(f"vs {reference}: {vs_metric} minus {reference}'s at the same budget on the "
                     "same streams, paired bootstrap; * = the interval excludes 0")  # fmt: skip
    return notes


def print_full_table(rows: list[Row], settings: CompareConfig) -> None:
    """``table=full``: every summary metric of every job, one row each, and the notes."""
    shown = ["trace", "policy", "budget", *summary_columns(settings.retrieval.enabled)]
    ref = settings.reference
    print(format_table(shown_rows(rows, shown, ref, VS_METRIC),
                       shown + ([f"vs {ref}"] if ref else [])))  # fmt: skip
    print()
    for line in interval_notes(rows, shown, settings, ref, VS_METRIC):
        print(line)


def print_verdict(rows: list[Row], settings: CompareConfig) -> None:
    """The default: per budget, the ranked policies and one sentence (memlens.analyze.verdict);
    the reference is ``reference``, or LRU when it was compared."""
    from memlens.analyze.verdict import verdict_lines

    compared = {r.values["policy"] for r in rows}
    ref = settings.reference or ("lru" if "lru" in compared else None)
    for line in verdict_lines(rows, VS_METRIC, ref, settings.stats):
        print(line)
    print("every metric of every job: table=full, or compare.csv / compare.json")


def compare_task(cfg: DictConfig) -> list[dict]:
    """``memlens compare``: every (trace, policy, budget) through the pipeline, one table."""
    from memlens.runs.tracking import exit_if_required

    settings: CompareConfig = resolve(cfg)
    rows, sweep = run_compare(settings, cfg)
    if settings.table == "full":
        print_full_table(rows, settings)
    else:
        print_verdict(rows, settings)
    if settings.stability and rows:  # several derivations: does the ranking hold?
        from memlens.analyze.stability import (
            compare_rows,
            pair_verdicts,
            stability_lines,
            verdict_lines,
            with_parts,
        )

        table, tol = compare_rows(rows), settings.stability_tolerance
        print("\n" + "\n".join(stability_lines(table, VS_METRIC, tol)))
        verdicts = pair_verdicts(with_parts(table, VS_METRIC), VS_METRIC, settings.stats, tol)
        print("\n".join(verdict_lines(verdicts, VS_METRIC, settings.stats)))
    print(f"table written to {_run_dir() / 'compare.csv'}")
    exit_if_required(settings.mlflow, _run_dir())
    exit_if_failed(sweep)
    return [r.values for r in rows]


def candidates(settings: RecommendConfig) -> RecommendConfig:
    """The settings with ``policies`` = the listed (or every registered) policy not excluded."""
    unknown = [p for p in settings.exclude if p not in registered_policies()]
    if unknown:
        raise SettingsError(f"exclude: unknown policy {unknown[0]!r} "
                            f"(registered: {', '.join(registered_policies())})")  # fmt: skip
    names = [p for p in settings.policies or registered_policies() if p not in settings.exclude]
    if not names:
        raise SettingsError(f"no policy left to recommend once {settings.exclude} are excluded")
    # the oracle switched off: compare's rule (memlens.cli.replay.compared_policies), applied to
    # what is left once the exclusions are out
    pool = dataclasses.replace(settings, policies=names if settings.policies else None)
    names = [p for p in compared_policies(pool) if p in names]
    check_reference(settings.reference, names)
    settings.policies = names
    return settings


def check_recommend(cfg: DictConfig) -> Callable[[], None]:
    """compare's checks of the candidate policies, and a quality and a cost metric that can be
    bootstrapped; returns the deferred trace parse."""
    settings = candidates(resolve(cfg))
    for key, role, better in ((settings.metric, "metric", True),
                              (settings.cost or default_cost(), "cost", False)):  # fmt: skip
        fits = [
            k
            for k, m in declared().items()
            if m.parts and m.higher_is_better is better and not (better and m.fmt == "d")
        ]  # a quality is a rate, not a count
        if key not in declared():
            raise SettingsError(f"unknown {role} {key!r} (choose from {', '.join(fits)})")
        if key not in fits:
            raise SettingsError(f"{role}={key} must be {'higher' if better else 'lower'}-is-better "
                                f"and decompose over streams (choose from {', '.join(fits)})")  # fmt: skip
    return check_jobs(settings, settings.policies)


def recommend_task(cfg: DictConfig) -> dict:
    """``memlens recommend``: compare's jobs, then the cheapest setting that meets the target."""
    from memlens.runs.tracking import exit_if_required

    settings = candidates(resolve(cfg))
    columns = ["trace", "policy", "budget", *report_columns()]
    choice = Choice(settings.metric, settings.target, settings.cost or default_cost())
    made = {}

    def write_recommendation(rows: list[Row], folder: Path) -> None:  # in compare's run folder
        made["data"] = [r.to_json(columns, settings.reference) for r in rows]
        made["doc"] = recommend(made["data"], choice, settings.stats)
        if settings.stability:  # several derivations: only what meets the target under all
            made["doc"]["across"] = recommend_across(made["data"], choice, settings.stats)
        write_json(folder / "recommend.json", made["doc"])

    _, sweep = run_compare(settings, cfg, name="recommend", finish=write_recommendation)
    out = _run_dir() / "recommend.json"
    print(render(made["doc"], made["data"], settings.stats))
    print(f"\nrecommendation written to {out} (every run: compare.csv, compare.json)")
    exit_if_required(settings.mlflow, _run_dir())
    exit_if_failed(sweep)
    return made["doc"]
