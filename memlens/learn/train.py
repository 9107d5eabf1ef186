"""``memlens train``: the learned value scorer's model, from the training split of a split.

    memlens train split=taubench label.kind=hindsight out=models/tau.txt

1. **Table.**  Each training trace (a file or a generated archetype, restricted to the split's
   training streams) is replayed once with a behaviour policy (``behaviour``, default LRU) so
   that every decision point has the ``tier`` a replay gives it; the features are
   ``memlens.scorer.decision_features`` (no look-ahead), the labels ``memlens.learn.labels`` (hindsight,
   LRB's Belady boundary, the oracle's schedule, or the simulated user's / a store's feedback).
2. **Fit.**  ``memlens.scorer.model.ValueScorer`` on the training streams less a validation
   share of them (split by stream, never by row), which gives AUC and log loss.
3. **Tune.**  The policy's decay per request and size exponent: the pair with the best mean hit
   rate over the training streams at ``tune.budgets`` (replays of ``policy=learned``).
4. **Record.**  ``out`` (LightGBM text model) and its JSON sidecar; with MLflow on: the
   parameters, AUC/log loss, the feature-importance plot, the sidecar and the model
   (``mlflow.lightgbm``) registered as ``register_as`` (load it with
   ``policy.model=models:/NAME/VERSION``).

Splits live in ``conf/split/`` (group ``split``); every key and default is :class:`TrainConfig`
(``memlens train --cfg job``).  Importing this module registers the schemas in Hydra's
ConfigStore.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from memlens.config.schema import MlflowConfig, check_budget
from memlens.learn.labels import LABEL_KINDS, LabelSpec, feedback_points, labels_for
from memlens.learn.simulated_user import SimulatedUserConfig
from memlens.scorer.decision_features import (
    FEATURE_NAMES,
    context,
    decision_features,
    decision_points,
    residency,
)
from memlens.scorer.model import LearnedModel, ValueScorer, save_model, sidecar
from memlens.trace.model import Trace


# ------------------------------------------------------------------------------ settings
@dataclass
class TraceSel:
    """One trace of a split and which of its streams (``streams`` or ``tasks``; both null:
    all)."""

    trace: str | None = None  # a trace file
    archetype: str | None = None  # or a generated trace (memlens data generate archetype=...)
    seed: int = 0  # its seed
    generated_streams: int | None = None  # its streams knob (null: the archetype's default)
    events_per_stream: int | None = None  # its events_per_stream knob (null: default)
    streams: list[str] | None = None  # stream names
    tasks: list[str] | None = None  # or the streams whose items belong to these tasks

    def __post_init__(self) -> None:
        if (self.trace is None) == (self.archetype is None):
            raise ValueError("a split entry names exactly one of trace and archetype")
        if self.streams is not None and self.tasks is not None:
            raise ValueError("a split entry selects streams by streams or by tasks, not both")

    def label(self) -> str:
        where = Path(self.trace).name if self.trace else f"{self.archetype}(seed={self.seed})"
        if self.tasks is not None:
            return f"{where} [{len(self.tasks)} tasks]"
        return f"{where} [{len(self.streams)} streams]" if self.streams is not None else where


@dataclass
class SplitConfig:
    """A train/test split by stream (``conf/split/<name>.yaml``)."""

    name: str = "???"
    description: str = ""
    train: list[TraceSel] = field(default_factory=list)
    test: list[TraceSel] = field(default_factory=list)
    file: str | None = None  # split=file: train and test read from this YAML file
    auto_trace: str | None = None  # split=auto: this trace, split by stream
    test_share: float = 0.25  # split=auto: the share of its streams that tests
    seed: int = 0  # split=auto: the draw of the test streams

    def __post_init__(self) -> None:
        if self.file is not None:
            from memlens.learn.splits import read_split_file

            self.name, self.description, self.train, self.test = read_split_file(self.file,
                                                                                 TraceSel)  # fmt: skip
        elif self.auto_trace is not None:
            from memlens.learn.splits import split_by_stream

            self.train, self.test = split_by_stream(self.auto_trace, self.test_share, self.seed,
                                                    TraceSel)  # fmt: skip


@dataclass
class LabelConfig:
    """``label:`` which label the model learns (``memlens.learn.labels``)."""

    kind: str = "oracle"  # feedback | hindsight | belady | oracle
    horizon: int = 20  # hindsight: needed within this many requests
    boundary_tokens: int | None = None  # belady: the boundary (null: each row's budget)
    budget: int | None = None  # oracle: whose schedule (null: each row's budget)
    demand_fetch: bool = False  # oracle: the schedule's demand-fetch setting

    def __post_init__(self) -> None:
        self.spec()

    def spec(self) -> LabelSpec:
        return LabelSpec(**asdict(self))


@dataclass
class ModelParams:
    """``model:`` the estimator's parameters (``memlens.scorer.model.ValueScorer``)."""

    n_estimators: int = 100
    num_leaves: int = 15
    learning_rate: float = 0.1
    min_child_samples: int = 20
    random_state: int = 0
    n_jobs: int = 1
    sampling: str = "bagging"  # or "goss": LightGBM's gradient-based one-side sampling (faster)

    def __post_init__(self) -> None:
        if self.sampling not in ("bagging", "goss"):
            raise ValueError(f"model.sampling must be bagging or goss, got {self.sampling!r}")


@dataclass
class FeedbackSettings:
    """``feedback:`` where feedback labels come from (``label.kind=feedback``)."""

    store: str | None = None  # a FeedbackStore file; null: the simulated user
    with_simulated: bool = False  # with a store: add the simulated user's rows to its rows
    simulated_user: SimulatedUserConfig = field(default_factory=SimulatedUserConfig)
    max_rows: int | None = None  # use at most this many rows (a seeded sample; learning curves)


@dataclass
class TuneConfig:
    """``tune:`` the grid for the policy's decay and size exponent (best training hit rate)."""

    budgets: list[int] | None = None  # null: the training budgets
    decay_per_request: list[float] = field(default_factory=lambda: [0.0, 0.03, 0.1, 0.3])
    size_exponent: list[float] = field(default_factory=lambda: [0.0, 0.5, 1.0])


@dataclass
class TrainConfig:
    """``memlens train``: a model for ``policy=learned`` from a split's training streams."""

    split: SplitConfig = field(default_factory=SplitConfig)
    label: LabelConfig = field(default_factory=LabelConfig)
    budgets: list[int] = field(default_factory=lambda: [2048])  # rows made at each budget
    behaviour: str = "lru"  # the policy replayed (at each budget) for the ``tier`` feature
    model: ModelParams = field(default_factory=ModelParams)
    validation_share: float = 0.2  # share of the training streams held out (AUC, log loss)
    feedback: FeedbackSettings = field(default_factory=FeedbackSettings)
    tune: TuneConfig = field(default_factory=TuneConfig)
    out: str = "learned.txt"  # the model (LightGBM text) and out with .json: its sidecar
    register_as: str | None = "memlens-learned"  # MLflow registered model name (null: none)
    mlflow: MlflowConfig = field(default_factory=MlflowConfig)
    seed: int = 0  # the validation split's draw
    score_test: bool = True  # replay the split's test side: new model vs lru, rule, default

    def __post_init__(self) -> None:
        if not self.split.train:
            raise ValueError(f"split {self.split.name}: split.train lists no trace")
        if self.label.kind not in LABEL_KINDS:
            raise ValueError(f"label.kind must be one of {', '.join(LABEL_KINDS)}")
        if not self.budgets:
            raise ValueError("budgets must list at least one budget")
        for b in self.budgets:
            check_budget(b, "budgets")
        if self.tune.budgets is None:
            self.tune.budgets = list(self.budgets)
        if not 0 <= self.validation_share < 1:
            raise ValueError(f"validation_share must be in [0, 1), got {self.validation_share}")
        if not self.out.endswith(".txt"):
            raise ValueError(f"out must end in .txt (the sidecar is .json), got {self.out!r}")
        for b in self.tune.budgets:
            check_budget(b, "tune.budgets")
        if not self.tune.budgets or not self.tune.decay_per_request or not self.tune.size_exponent:
            raise ValueError("tune.budgets, tune.decay_per_request and tune.size_exponent "
                             "must each list at least one value")  # fmt: skip
        if any(v < 0 for v in [*self.tune.decay_per_request, *self.tune.size_exponent]):
            raise ValueError("tune.decay_per_request and tune.size_exponent must be >= 0")


def register_configs() -> None:
    """Put the schemas in Hydra's ConfigStore (idempotent)."""
    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConfig)
    cs.store(group="split", name="split_schema", node=SplitConfig)


register_configs()


# ------------------------------------------------------------------------------- traces
def shown_path(source: str) -> str:
    """A trace's path as a sidecar records it: relative for the bundled datasets."""
    from memlens.config.store import DATA_DIR

    try:
        return f"datasets/{Path(source).resolve().relative_to(DATA_DIR).as_posix()}"
    except (ValueError, OSError):
        return source


_GENERATED: dict[tuple[str, int], Trace] = {}


def load_selection(sel: TraceSel) -> tuple[Trace, np.ndarray]:
    """The entry's trace and a boolean mask of its selected streams."""
    if sel.trace is not None:
        from memlens.trace.cache import load_trace_cached

        trace = load_trace_cached(sel.trace)
    else:
        knobs = {"seed": sel.seed, "streams": sel.generated_streams,
                 "events_per_stream": sel.events_per_stream}  # fmt: skip
        knobs = {k: v for k, v in knobs.items() if v is not None}
        key = (sel.archetype, *sorted(knobs.items()))
        if key not in _GENERATED:
            from memlens.datasets.archetypes import generate
            from memlens.trace.io import trace_from_events

            shown = ",".join(f"{k}={v}" for k, v in knobs.items())
            _GENERATED[key] = trace_from_events(generate(sel.archetype, **knobs),
                                                source=f"generated:{sel.archetype}({shown})")  # fmt: skip
        trace = _GENERATED[key]
    return trace, stream_mask(trace, sel)


def stream_mask(trace: Trace, sel: TraceSel) -> np.ndarray:
    """Which streams of ``trace`` the entry selects; a name that is not there is an error."""
    if sel.streams is None and sel.tasks is None:
        return np.ones(trace.n_streams, bool)
    if sel.streams is not None:
        names = set(trace.stream_names)
        missing = [s for s in sel.streams if s not in names]
        if missing:
            raise ValueError(f"{sel.label()}: no stream {missing[0]!r} in {trace.source}")
        return np.isin(np.asarray(trace.stream_names, object), sel.streams)
    first = np.full(trace.n_streams, trace.n_items, np.int64)  # each stream's first item
    np.minimum.at(first, trace.item_stream, np.arange(trace.n_items))
    tasks = np.asarray([trace.item_task[i] if i < trace.n_items else "" for i in first], object)
    missing = [t for t in sel.tasks if t not in set(tasks)]
    if missing:
        raise ValueError(f"{sel.label()}: no task {missing[0]!r} in {trace.source}")
    return np.isin(tasks, sel.tasks)


# --------------------------------------------------------------------------------- table
@dataclass
class Table:
    """Feature rows with labels, and the (trace, stream) each row belongs to."""

    X: np.ndarray
    y: np.ndarray
    group: np.ndarray  # int64: an id per (trace, stream), for splitting by stream
    point: np.ndarray  # int64: an id per decision point (its rows at every budget share it)
    n_feedback: int = 0  # feedback events the labels come from

    def take(self, rows: np.ndarray, n_feedback: int) -> Table:
        return Table(self.X[rows], self.y[rows], self.group[rows], self.point[rows], n_feedback)


def behaviour_tiers(trace: Trace, items, events, cfg: TrainConfig, budget: int) -> np.ndarray:
    """``tier`` of each point in a replay of the behaviour policy at ``budget``."""
    from memlens.config.compose import make_policy
    from memlens.simulator import simulate

    result = simulate(trace, make_policy(cfg.behaviour), budget, engine="reference",
                      progress=False)  # fmt: skip
    return residency(trace, result, items, events)


def feedback_rows(trace: Trace, cfg: TrainConfig) -> list:
    """The feedback about ``trace``: from the store, or from the simulated user."""
    from memlens.learn.simulated_user import simulate_user

    if cfg.feedback.store is not None:
        from memlens.learn.feedback import FeedbackStore

        rows = FeedbackStore(cfg.feedback.store).rows(trace_sha256=trace.sha256)
        if cfg.feedback.with_simulated:
            rows = [*rows, *simulate_user(trace, cfg.feedback.simulated_user)]
        return rows
    return simulate_user(trace, cfg.feedback.simulated_user)


def trace_table(trace: Trace, mask: np.ndarray, cfg: TrainConfig, group0: int,
                point0: int) -> Table:  # fmt: skip
    """The rows of one training trace's selected streams, once per training budget."""
    spec = cfg.label.spec()
    if spec.kind == "feedback":
        items, events, y0 = feedback_points(trace, feedback_rows(trace, cfg))
    else:
        pts = decision_points(trace)
        items, events, y0 = pts.item, pts.event, None
    keep = mask[trace.item_stream[items]]
    items, events = items[keep], events[keep]
    group = group0 + trace.item_stream[items].astype(np.int64)
    Xs, ys = [], []
    for b in cfg.budgets:
        tier = behaviour_tiers(trace, items, events, cfg, b)
        X = decision_features(trace, items, events, tier, b)
        y = y0[keep] if y0 is not None else labels_for(trace, items, events, spec, b)
        y = np.where(context(trace).pinned_tokens[events] >= b, np.nan, y)  # no decision there
        Xs.append(X)
        ys.append(y)
    n_feedback = len(items) if spec.kind == "feedback" else 0
    point = np.tile(point0 + np.arange(len(items), dtype=np.int64), len(cfg.budgets))
    table = Table(np.concatenate(Xs), np.concatenate(ys).astype(np.float64),
                  np.tile(group, len(cfg.budgets)), point, n_feedback)  # fmt: skip
    return table.take(np.flatnonzero(~np.isnan(table.y)), n_feedback)


def build_table(sels: list[TraceSel], cfg: TrainConfig) -> tuple[Table, list[dict]]:
    """Every selected trace's rows (feedback events sampled down to ``feedback.max_rows``),
    and what was read (path, hash, streams) for the sidecar."""
    parts, read, group0, point0 = [], [], 0, 0
    for sel in sels:
        trace, mask = load_selection(sel)
        part = trace_table(trace, mask, cfg, group0, point0)
        parts.append(part)
        group0 += trace.n_streams
        point0 += len(part.y) // len(cfg.budgets)
        read.append({"trace": shown_path(trace.source), "sha256": trace.sha256,
                     "streams": [n for n, m in zip(trace.stream_names, mask) if m]})  # fmt: skip
    table = Table(*(np.concatenate([getattr(p, k) for p in parts])
                    for k in ("X", "y", "group", "point")),
                  sum(p.n_feedback for p in parts))  # fmt: skip
    limit = cfg.feedback.max_rows
    if cfg.label.kind == "feedback" and limit is not None and table.n_feedback > limit:
        chosen = np.random.default_rng(cfg.seed).permutation(table.n_feedback)[:limit]
        table = table.take(np.flatnonzero(np.isin(table.point, chosen)), int(limit))
    return table, read


# ----------------------------------------------------------------------------------- fit
def validation_mask(group: np.ndarray, share: float, seed: int) -> np.ndarray:
    """Rows of a seeded ``share`` of the streams (never a split of one stream's rows)."""
    streams = np.unique(group)
    n_val = int(round(share * len(streams)))
    if n_val == 0 or n_val >= len(streams):
        return np.zeros(len(group), bool)
    held = np.random.default_rng(seed).permutation(streams)[:n_val]
    return np.isin(group, held)


def fit(table: Table, cfg: TrainConfig) -> tuple[ValueScorer, dict]:
    """The estimator on the training streams, and AUC / log loss on the held-out ones."""
    from sklearn.metrics import log_loss, roc_auc_score

    if len(np.unique(table.y)) < 2:
        hint = "more traces, or another label"
        if cfg.label.kind == "feedback" and cfg.feedback.store and not cfg.feedback.with_simulated:
            hint = ("a person's pins all say 'keep': add feedback.with_simulated=true to learn "
                    "from them together with the simulated user's labels, or rescore some "
                    "items low")  # fmt: skip
        raise ValueError(f"the training rows have only label {table.y[:1].tolist()}: "
                         f"nothing to learn ({hint})")  # fmt: skip
    val = validation_mask(table.group, cfg.validation_share, cfg.seed)
    est = ValueScorer(**asdict(cfg.model))
    est.fit(table.X[~val], table.y[~val])
    metrics = {"rows": int(len(table.y)), "train_rows": int((~val).sum()),
               "validation_rows": int(val.sum()), "positive_share": float(table.y.mean())}  # fmt: skip
    if val.any() and len(np.unique(table.y[val])) == 2:
        p = est.predict_proba(table.X[val])[:, 1]
        metrics["validation_auc"] = float(roc_auc_score(table.y[val], p))
        metrics["validation_logloss"] = float(log_loss(table.y[val], p, labels=[0, 1]))
    return est, metrics


def as_model(est: ValueScorer, meta: dict | None = None) -> LearnedModel:
    """An in-memory :class:`LearnedModel` of a fitted estimator."""
    return LearnedModel(est.booster_.model_to_string(), meta or {})


def hit_rates(model: LearnedModel | None, sels: list[TraceSel], budgets, decay: float,
              size: float, demand_fetch: bool = False) -> float:  # fmt: skip
    """Mean hit rate of ``policy=learned`` over the selected streams and the budgets."""
    from memlens.policies.learned import LearnedScorer
    from memlens.simulator import simulate

    rates = []
    for sel in sels:
        trace, mask = load_selection(sel)
        refs = mask[trace.req_stream[trace.need_request]]
        for b in budgets:
            policy = LearnedScorer.from_model(model, decay_per_request=decay, size_exponent=size)
            res = simulate(trace, policy, b, demand_fetch, engine="reference", progress=False)
            if refs.any():
                rates.append(float(res.need_hit[refs].mean()))
    return float(np.mean(rates)) if rates else 0.0


def tune(model: LearnedModel, sels: list[TraceSel], cfg: TrainConfig) -> dict:
    """The (decay, size exponent) pair with the best mean training hit rate (first on ties)."""
    best = None
    for decay in cfg.tune.decay_per_request:
        for size in cfg.tune.size_exponent:
            rate = hit_rates(model, sels, cfg.tune.budgets, decay, size)
            if best is None or rate > best[0]:
                best = (rate, decay, size)
    return {"decay_per_request": float(best[1]), "size_exponent": float(best[2]),
            "train_hit_rate": best[0]}  # fmt: skip


# --------------------------------------------------------------------------------- train
def train(cfg: TrainConfig, progress=None) -> tuple[ValueScorer, dict]:
    """Steps 1-3 (no files written), then the test split scored: the fitted estimator and the
    sidecar.  ``progress(text)``, if given, hears each step start (the page's train job)."""
    from memlens.analyze.report import git_commit, package_version

    say = progress or (lambda _text: None)
    t0 = time.perf_counter()
    say("building the feature table")
    table, read = build_table(cfg.split.train, cfg)
    t1 = time.perf_counter()
    say(f"fitting on {len(table.y):,} rows")
    est, metrics = fit(table, cfg)
    t2 = time.perf_counter()
    say("tuning decay and size exponent")
    chosen = tune(as_model(est), cfg.split.train, cfg)
    metrics.update(table_s=t1 - t0, fit_s=t2 - t1, tune_s=time.perf_counter() - t2,
                   train_hit_rate=chosen.pop("train_hit_rate"))  # fmt: skip
    scored = score_test(est, chosen, cfg, metrics, progress)
    meta = {
        "label": cfg.label.spec().params(),
        "n_feedback": table.n_feedback,
        "split": cfg.split.name,
        "training_traces": read,
        "behaviour": {"policy": cfg.behaviour, "budgets": list(cfg.budgets)},
        "params": {**asdict(cfg.model), "lgb": est.lgb_params()},
        "policy": chosen,
        "metrics": metrics,
        "code_version": {"memlens": package_version(), "git_commit": git_commit()},
    }
    if scored is not None:
        meta["test"] = scored
    return est, meta


def score_test(est: ValueScorer, chosen: dict, cfg: TrainConfig, metrics: dict,
               progress=None) -> list[dict] | None:  # fmt: skip
    """The split's test side scored (``memlens.learn.evaluate``), its hit rates also as flat
    metrics (``test_hit_rate_<policy>`` at the first budget, for MLflow); None without one."""
    if not (cfg.split.test and cfg.score_test):
        return None
    from memlens.learn.evaluate import score_test_split

    t0 = time.perf_counter()
    tests = [(*load_selection(sel), sel.label()) for sel in cfg.split.test]
    scored = score_test_split(as_model(est), chosen, tests, cfg.budgets, progress=progress)
    for name, iv in scored[0]["hit_rate"].items():
        if iv["estimate"] is not None:
            metrics[f"test_hit_rate_{name}"] = float(iv["estimate"])
    metrics["test_s"] = time.perf_counter() - t0
    return scored


def importance_plot(est: ValueScorer, path: Path) -> Path:
    """A bar chart of the features' total split gain (what the model leans on)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gain = est.feature_importances_
    order = np.argsort(gain)
    fig, ax = plt.subplots(figsize=(6, 7))
    ax.barh(np.asarray(FEATURE_NAMES)[order], gain[order])
    ax.set_xlabel("total gain")
    ax.set_title("learned value scorer: feature importance")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def log_to_mlflow(cfg: TrainConfig, est: ValueScorer, meta: dict, files: list[Path],
                  resolved_yaml: str) -> str | None:  # fmt: skip
    """Parameters, metrics, plot, sidecar and the registered model; the model's URI.

    A tracking fault is one ``warning:`` line (the model file is written already), as for
    every other command (``memlens.runs.tracking``)."""
    from memlens.runs.tracking import log_run, mlflow_run

    params = {"split": cfg.split.name, "label": meta["label"], "behaviour": meta["behaviour"],
              "model": asdict(cfg.model), "policy": meta["policy"]}  # fmt: skip
    with mlflow_run(cfg.mlflow, run_name=f"train:{cfg.split.name}:{cfg.label.kind}") as run:
        if run is None:
            return None
        log_run(run, params, {}, files, resolved_yaml)
        try:
            return _log_model(cfg, est, meta, run.run_id)
        except Exception as exc:  # MLflow raises many types; the model file is safe
            print(f"warning: MLflow could not log the model: {exc}", file=sys.stderr)
            return None


def _log_model(cfg: TrainConfig, est: ValueScorer, meta: dict, run_id: str) -> str:
    """Metrics and ``mlflow.lightgbm.log_model`` (registered as ``cfg.register_as``) into the
    run ``run_id``; the model's URI (``models:/NAME/VERSION`` when registered)."""
    import mlflow

    mlflow.set_tracking_uri(cfg.mlflow.tracking_uri)
    with mlflow.start_run(run_id=run_id):
        mlflow.log_metrics({k: float(v) for k, v in meta["metrics"].items()})
        info = mlflow.lightgbm.log_model(est.booster_, name="model",
                                         registered_model_name=cfg.register_as,
                                         metadata={"memlens": sidecar(est, meta)},
                                         pip_requirements=[])  # fmt: skip
    version = getattr(info, "registered_model_version", None)
    if cfg.register_as and version is not None:
        return f"models:/{cfg.register_as}/{version}"
    return info.model_uri


def check_train(cfg: DictConfig) -> None:
    """Everything ``train`` can check before it starts: settings, and every trace file."""
    from memlens.config.schema import resolve

    settings: TrainConfig = resolve(cfg)
    for where, sels in (("train", settings.split.train), ("test", settings.split.test)):
        for k, sel in enumerate(sels):
            if sel.trace is not None and not Path(sel.trace).is_file():
                raise ValueError(f"split.{where}[{k}].trace: no such file {sel.trace}")
            if sel.archetype is not None:
                from memlens.datasets.archetypes import GENERATORS

                if sel.archetype not in GENERATORS:
                    raise ValueError(f"split.{where}[{k}].archetype: unknown {sel.archetype!r} "
                                     f"({', '.join(GENERATORS)})")  # fmt: skip
    if settings.feedback.store is not None and not Path(settings.feedback.store).is_file():
        raise ValueError(f"feedback.store: no such file {settings.feedback.store}")


def train_task(cfg: DictConfig) -> dict:
    """``memlens train``: build, fit, tune, write the model, record it in MLflow."""
    from memlens.config.schema import resolve
    from memlens.trace.io import TraceError

    settings: TrainConfig = resolve(cfg)
    try:
        est, meta = train(settings)
    except (TraceError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    model_path, sidecar = save_model(settings.out, est, meta)
    plot = importance_plot(est, model_path.with_name(model_path.stem + "-importance.png"))
    uri = log_to_mlflow(settings, est, meta, [sidecar, plot], OmegaConf.to_yaml(cfg))
    m = meta["metrics"]
    print(f"split {settings.split.name}: {m['rows']:,} rows ({m['train_rows']:,} train, "
          f"{m['validation_rows']:,} validation by stream), label {meta['label']}")  # fmt: skip
    if "validation_auc" in m:
        print(f"validation AUC {m['validation_auc']:.4f}, log loss {m['validation_logloss']:.4f}")
    p = meta["policy"]
    print(f"policy: decay_per_request={p['decay_per_request']:g} size_exponent="
          f"{p['size_exponent']:g} (training hit rate {m['train_hit_rate']:.4f})")  # fmt: skip
    if "test" in meta:
        from memlens.learn.evaluate import heldout_lines

        print("\n".join(heldout_lines(meta["test"])))
    print(f"model written to {model_path.resolve()} (+ {sidecar.name}, {plot.name})")
    if uri:
        print(f"MLflow: {uri}")
    print(f"use it: memlens simulate policy=learned policy.model={model_path.resolve()}")
    return meta
