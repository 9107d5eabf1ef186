"""``memlens tune``: a policy's constants tuned for deployment, on a training split.

    memlens tune hparams_search=rule split=locomo target=0.3 budget=1024 n_trials=40
    memlens tune hparams_search=learned split=taubench target=0.2 out=my/learned_tuned.yaml

The deployment question is "the cheapest setting that still serves requests well enough": the
objective is the least ``total_cost_usd`` (context tokens plus the cost of missed needs) among
settings whose ``request_success`` is at least ``target``, measured on the split's *training*
streams only.  A setting below the target is infeasible and ranks after every feasible one, by
how far it falls short.  The best setting is then replayed on the split's *test* streams, next
to the policy's shipped defaults on both sides, and all four are reported; the tuned policy is
written as a ready policy config (a ``conf/policy/*.yaml`` with its schema and every
parameter) to ``out`` (default ``tuned/<policy>_tuned.yaml`` in the run folder), never into
``conf/policy/`` itself: a file there becomes a registered policy that every ``compare`` runs
(copy it there on purpose to ship it).

Search spaces live in ``conf/hparams_search/<name>.yaml`` (parameter -> range).  Optuna is
called directly (TPE sampler seeded with ``seed``, one trial at a time), not through
hydra-optuna-sweeper: that plugin pins optuna<3 and runs each trial as a Hydra job, whereas a
trial here is one replay per training trace in this process (traces parsed once), and the
train/test evaluation and the written config need the study's result in hand.  Same settings
and seed, same trials, same best parameters (the replays are deterministic).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from memlens.config.schema import CommonConfig, check_budget, schema_name
from memlens.learn.train import SplitConfig, load_selection

INFEASIBLE = 1e9  # objective offset of a setting below the target (ranks after any feasible one)


@dataclass
class ParamRange:
    """One searched parameter: a float range (``log``: sampled on a log scale) or choices."""

    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: list[Any] | None = None


@dataclass
class SearchSpace:
    """``conf/hparams_search/<name>.yaml``: the policy and the ranges of its parameters."""

    policy: str = "???"
    params: dict[str, ParamRange] = field(default_factory=dict)


@dataclass
class TuningConfig(CommonConfig):
    """``memlens tune``: search ``hparams_search`` on ``split``'s training streams."""

    hparams_search: SearchSpace = field(default_factory=SearchSpace)
    split: SplitConfig = field(default_factory=SplitConfig)
    budget: int = 2048
    target: float = 0.5  # the least acceptable request_success
    n_trials: int = 30
    out: str | None = None  # null: tuned/<policy>_tuned.yaml in the run folder

    def __post_init__(self) -> None:
        super().__post_init__()
        check_budget(self.budget)
        if not (isinstance(self.target, (int, float)) and 0 <= self.target <= 1):
            raise ValueError(f"target must be a number in [0, 1], got {self.target!r}")
        if isinstance(self.n_trials, bool) or not 1 <= self.n_trials <= 100_000:
            raise ValueError(f"n_trials must be from 1 to 100000, got {self.n_trials!r}")
        for name, r in self.hparams_search.params.items():
            if r.choices is None and not (r.low is not None and r.high is not None
                                          and r.low <= r.high and (not r.log or r.low > 0)):  # fmt: skip
                raise ValueError(f"hparams_search.params.{name}: needs low <= high (both > 0 "
                                 f"with log) or choices, got {r}")  # fmt: skip


def register_configs() -> None:
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="tune_schema", node=TuningConfig)
    cs.store(group="hparams_search", name="hparams_search_schema", node=SearchSpace)


register_configs()


# ------------------------------------------------------------------------- evaluation
@dataclass
class Score:
    """A setting's totals over the selected streams of a split side."""

    request_success: float
    total_cost_usd: float
    streams: int

    def feasible(self, target: float) -> bool:
        return self.request_success >= target

    def objective(self, target: float) -> float:
        """Least cost when feasible; else after every feasible setting, by the shortfall."""
        if self.feasible(target):
            return self.total_cost_usd
        return INFEASIBLE * (1 + target - self.request_success)


def side_traces(settings: TuningConfig, side: str) -> list[tuple[object, np.ndarray]]:
    """(trace, stream mask) of every entry of one side of the split (parsed once)."""
    return [load_selection(sel) for sel in getattr(settings.split, side)]


def evaluate(settings: TuningConfig, overrides: list[str], traces) -> Score:
    """Replay the policy with ``overrides`` on every (trace, mask); sum the selected streams."""
    from memlens.config.compose import policy_config
    from memlens.config.schema import RunConfig
    from memlens.runs.pipeline import analyze_metrics, replay

    policy = policy_config(settings.hparams_search.policy, overrides)
    shared = {f: getattr(settings, f) for f in CommonConfig.__dataclass_fields__}
    ok = num_cost = 0.0
    den_ok = 0.0
    streams = 0
    for trace, mask in traces:
        run = RunConfig(**{**shared, "trace": trace.source, "progress": False}, policy=policy,
                        budget=settings.budget)  # fmt: skip
        parts = analyze_metrics(replay(run, trace)).stream_parts
        num, den = parts["request_success"]
        ok += float(np.asarray(num)[mask].sum())
        den_ok += float(np.asarray(den)[mask].sum())
        num_cost += float(np.asarray(parts["total_cost_usd"][0])[mask].sum())
        streams += int(mask.sum())
    return Score(ok / den_ok if den_ok else 0.0, num_cost, streams)


def overrides_of(params: dict) -> list[str]:
    """``policy.<param>=<value>`` overrides, in the grammar of ``memlens simulate``."""
    out = []
    for k, v in params.items():
        shown = "true" if v is True else "false" if v is False else repr(v)
        out.append(f"policy.{k}={shown}")
    return out


def suggest(trial, space: SearchSpace) -> dict:
    out = {}
    for name, r in space.params.items():
        if r.choices is not None:
            out[name] = trial.suggest_categorical(name, list(r.choices))
        else:
            out[name] = trial.suggest_float(name, r.low, r.high, log=r.log)
    return out


def search(settings: TuningConfig, train) -> tuple[dict, Score, list[dict]]:
    """The Optuna study (TPE, seeded): best parameters, their training score, every trial."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=settings.seed)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    trials = []

    def objective(trial) -> float:
        params = suggest(trial, settings.hparams_search)
        score = evaluate(settings, overrides_of(params), train)
        trials.append({"number": trial.number, "params": params, **vars(score),
                       "feasible": score.feasible(settings.target)})  # fmt: skip
        return score.objective(settings.target)

    study.optimize(objective, n_trials=settings.n_trials, show_progress_bar=False)
    best = next(t for t in trials if t["number"] == study.best_trial.number)
    score = Score(best["request_success"], best["total_cost_usd"], best["streams"])
    return dict(study.best_trial.params), score, trials


# ----------------------------------------------------------------------- the output
def tuned_yaml(settings: TuningConfig, params: dict, comment: str) -> str:
    """A ready policy config: the policy's own schema, its target and every parameter."""
    from memlens.config.compose import policy_config
    from memlens.config.schema import policy_kwargs

    name = settings.hparams_search.policy
    target, kwargs = policy_kwargs(policy_config(name, overrides_of(params)))
    body = OmegaConf.to_yaml(OmegaConf.create({"_target_": target, **kwargs}))
    head = "".join(f"# {line}\n" for line in comment.splitlines())
    return f"{head}defaults:\n  - {schema_name(name)}\n  - _self_\n{body}"


def report_lines(settings: TuningConfig, scores: dict[str, Score]) -> list[str]:
    rows = [f"{'setting':<16} {'split':<6} {'request_success':>15} {'total_cost_usd':>14} "
            f"{'streams':>7}  meets target {settings.target:g}"]  # fmt: skip
    for key, s in scores.items():
        setting, side = key.split("/")
        rows.append(f"{setting:<16} {side:<6} {s.request_success:>15.4f} "
                    f"{s.total_cost_usd:>14.4f} {s.streams:>7}  "
                    f"{'yes' if s.feasible(settings.target) else 'no'}")  # fmt: skip
    return rows


def tune(settings: TuningConfig) -> dict:
    """Search on the training streams; the best and the defaults on both sides."""
    train, test = side_traces(settings, "train"), side_traces(settings, "test")
    params, best_train, trials = search(settings, train)
    scores = {"tuned/train": best_train, "tuned/test": evaluate(settings, overrides_of(params), test),
              "defaults/train": evaluate(settings, [], train),
              "defaults/test": evaluate(settings, [], test)}  # fmt: skip
    return {"policy": settings.hparams_search.policy, "split": settings.split.name,
            "budget": settings.budget, "target": settings.target, "seed": settings.seed,
            "n_trials": settings.n_trials, "best_params": params,
            "scores": {k: vars(v) | {"feasible": v.feasible(settings.target)}
                       for k, v in scores.items()},
            "trials": trials}  # fmt: skip


def check_tune(cfg: DictConfig) -> None:
    """The settings, the policy and every searched parameter, before any replay."""
    from memlens.config.compose import policy_config
    from memlens.config.schema import resolve
    from memlens.config.store import SettingsError

    settings: TuningConfig = resolve(cfg)
    space = settings.hparams_search
    probe = {k: (r.choices[0] if r.choices else r.low) for k, r in space.params.items()}
    try:
        policy_config(space.policy, overrides_of(probe))
    except Exception as exc:
        raise SettingsError(f"hparams_search: {exc}") from None
    for where in ("train", "test"):
        if not getattr(settings.split, where):
            raise SettingsError(f"split.{where} lists no trace (split {settings.split.name})")


def tune_task(cfg: DictConfig) -> dict:
    """``memlens tune``: tune, write tune.json and the tuned policy config, print the table."""
    from hydra.core.hydra_config import HydraConfig

    from memlens._util.atomic import write_json, write_text
    from memlens.config.schema import resolve
    from memlens.runs.tracking import log_run, mlflow_run

    settings: TuningConfig = resolve(cfg)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    name = settings.hparams_search.policy
    out = Path(settings.out) if settings.out else run_dir / "tuned" / f"{name}_tuned.yaml"
    with mlflow_run(settings.mlflow, run_name=f"tune:{name}") as tracking:
        doc = tune(settings)
        comment = (f"{name} tuned by `memlens tune` on split {settings.split.name} (training "
                   f"streams), budget {settings.budget}: least total_cost_usd with "
                   f"request_success >= {settings.target:g}; {settings.n_trials} trials, seed "
                   f"{settings.seed}.\nTest split: {doc['scores']['tuned/test']}")  # fmt: skip
        out.parent.mkdir(parents=True, exist_ok=True)
        write_text(out, tuned_yaml(settings, doc["best_params"], comment))
        write_json(run_dir / "tune.json", doc)
        scores = {k.replace("/", "_"): {m: v[m] for m in ("request_success", "total_cost_usd")}
                  for k, v in doc["scores"].items()}  # fmt: skip
        log_run(tracking, {"policy": name, "split": settings.split.name, "target": settings.target,
                           "budget": settings.budget, "best": doc["best_params"],
                           "score": scores}, {}, [out, run_dir / "tune.json"])  # fmt: skip
    scores = {k: Score(v["request_success"], v["total_cost_usd"], v["streams"])
              for k, v in doc["scores"].items()}  # fmt: skip
    print("\n".join(report_lines(settings, scores)))
    print(f"\nbest parameters: {doc['best_params']}\ntuned policy config: {out} (copy it into "
          f"conf/policy/ to ship it); every trial: {run_dir / 'tune.json'}")  # fmt: skip
    if not scores["tuned/train"].feasible(settings.target):
        print(f"warning: no trial reached request_success >= {settings.target:g} on the training "
              "streams; the config written is the closest one", file=sys.stderr)  # fmt: skip
    return doc
