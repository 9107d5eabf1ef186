"""Hostile inputs: every command, fed bad settings and bad files, must refuse them cleanly.

Each case runs the installed ``memlens`` in a fresh, empty working directory (its own
``MEMLENS_CACHE``, run folder and MLflow store inside it) and passes when:

* the exit code is 2, within the timeout (a hang counts as a failure);
* stderr is exactly one line, starting ``error:`` and mentioning the setting or file named by
  the case; no traceback; nothing on stdout;
* nothing was created: the working directory is as it was (no run folder, no output file, no
  ``mlflow.db``, no cache entry), and the bundled default trace is byte for byte unchanged.

    .venv/bin/python benchmarks/bench_bad_inputs.py             # every case, 2 workers
    .venv/bin/python benchmarks/bench_bad_inputs.py -k trace    # the cases whose name has "trace"

Prints the cases tried, how many were handled (exit 2 and one line, nothing created) and the
failures by name with what went wrong.

Issue 33's cases are the groups ``models`` (crafted LightGBM models), ``runs`` (the newline
bomb, run folders that cannot hold a run, the smaller cases) and ``ui`` (HTTP requests to a
``memlens ui`` started for them: the what-if's code execution, DNS rebinding, the token, 500s,
body size, files outside the root).  Each case's exit code (HTTP status for ``ui``) and first
line are recorded, so the same cases run against another checkout give a before/after table::

    .venv/bin/python benchmarks/bench_bad_inputs.py --group issue33 --json after.json
    .venv/bin/python benchmarks/bench_bad_inputs.py --group issue33 --json before.json \\
        --memlens /path/to/old/.venv/bin/memlens
    .venv/bin/python benchmarks/bench_bad_inputs.py --table before.json after.json
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MEMLENS = shutil.which("memlens") or str(Path(sys.executable).parent / "memlens")
BUNDLED = ROOT / "datasets" / "default" / "agent-small.jsonl.gz"
TIMEOUT_S = 60


@dataclass
class Case:
    name: str
    argv: list[str]  # after `memlens`; {F} is the fixture folder, {W} the working folder
    mention: str  # the setting or file the error line must mention
    existing: str | None = None  # a file created in the working dir first (must stay as is)
    env: dict | None = None  # extra environment ({F}, {W} replaced)
    timeout: float = TIMEOUT_S
    mount: str | None = None  # "ro" or "full": a tmpfs mounted at {W}/disk first (root only)
    cleans_root: bool = False  # remove the run files a case wrote into / (an old checkout did)


# ------------------------------------------------------------------------- fixtures
HEADER = {"event": "header", "version": 1}
W1 = {"event": "write", "id": "a", "stream": "s", "t": 0.0, "type": "user_input", "tokens": 5}
R1 = {"event": "request", "id": "r", "stream": "s", "t": 1.0, "needs": ["a"]}


def _jsonl(*events) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in events)


def make_fixtures(folder: Path) -> None:
    """Bad trace files (and a good one) that the cases name as ``{F}/<name>``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "good.jsonl").write_bytes(_jsonl(HEADER, W1, R1))
    (folder / "empty.jsonl").write_bytes(b"")
    (folder / "header_only.jsonl").write_bytes(_jsonl(HEADER))
    (folder / "corrupt.jsonl.gz").write_bytes(gzip.compress(_jsonl(HEADER, W1, R1))[:-12] + b"x")
    (folder / "not_gzip.jsonl.gz").write_bytes(_jsonl(HEADER, W1, R1))
    (folder / "latin1.jsonl").write_bytes(
        _jsonl(HEADER) + b'{"event": "write", "id": "a", "stream": "s", "t": 0, '
        b'"type": "user_input", "tokens": 5, "text": "caf\xe9"}\n' + _jsonl(R1)
    )
    lines = _jsonl(HEADER, W1).rstrip(b"\n").split(b"\n")
    (folder / "lone_cr.jsonl").write_bytes(lines[0] + b"\n" + lines[1] + b"\r" + _jsonl(R1))
    (folder / "tokens_2_64.jsonl").write_bytes(_jsonl(HEADER, {**W1, "tokens": 2**64}, R1))
    (folder / "tokens_1e300.jsonl").write_bytes(
        _jsonl(HEADER) + json.dumps(W1).replace('"tokens": 5', '"tokens": 1e300').encode()
        + b"\n" + _jsonl(R1)
    )  # fmt: skip
    deep: dict = {}
    for _ in range(500):
        deep = {"x": deep}
    (folder / "deep_meta.jsonl").write_bytes(_jsonl(HEADER, {**W1, "meta": deep}, R1))
    (folder / "huge_line.jsonl").write_bytes(
        _jsonl(HEADER, {**W1, "text": "x" * (20 * 1024 * 1024)}, R1)
    )
    (folder / "not_json.jsonl").write_bytes(_jsonl(HEADER) + b"{nope\n")
    (folder / "unknown_need.jsonl").write_bytes(_jsonl(HEADER, W1, {**R1, "needs": ["zz"]}))
    (folder / "negative_tokens.jsonl").write_bytes(_jsonl(HEADER, {**W1, "tokens": -3}, R1))
    (folder / "nan_time.jsonl").write_bytes(
        _jsonl(HEADER) + json.dumps(W1).replace('"t": 0.0', '"t": NaN').encode() + b"\n"
    )
    (folder / "dir").mkdir(exist_ok=True)
    fifo = folder / "fifo.jsonl"
    if not fifo.exists():
        os.mkfifo(fifo)
    (folder / "corpus_dir").mkdir(exist_ok=True)
    (folder / "not_json_src.json").write_text("{nope")


# ----------------------------------------------------------------------------- cases
def sim(name: str, args: str, mention: str) -> Case:
    return Case(f"simulate {name}", ["simulate", *args.split()], mention)


def cmp(name: str, args: str, mention: str) -> Case:
    return Case(f"compare {name}", ["compare", *args.split()], mention)


def rec(name: str, args: str, mention: str) -> Case:
    return Case(f"recommend {name}", ["recommend", "target=0.5", *args.split()], mention)


def data(name: str, args: str, mention: str, existing: str | None = None) -> Case:
    return Case(f"data {name}", ["data", *args.split()], mention, existing)


ISSUE = [
    sim("demand_fetch=no", "demand_fetch=no", "demand_fetch"),
    sim("demand_fetch=off", "demand_fetch=off", "demand_fetch"),
    sim("budget=1e20", "budget=1e20", "budget"),
    sim("engine=fast retraining", "engine=fast policy=learned policy.retrain_every=5", "fast"),
    sim("compression.default=zip", "compression.default=zip", "compression.default"),
    sim("embeddings.kind=foo", "embeddings.kind=foo", "embeddings.kind"),
    sim("mlflow.tracking_uri=bogus", "mlflow.tracking_uri=bogus://x", "mlflow.tracking_uri"),
    sim("price_per_mtok=nan", "price_per_mtok=nan", "price_per_mtok"),
    sim("price_per_mtok=inf", "price_per_mtok=inf", "price_per_mtok"),
    sim("tiers.short_term_tokens=-5", "tiers.short_term_tokens=-5", "tiers.short_term_tokens"),
    sim("tiers.ttl_s=-1", "tiers.ttl_s=-1", "tiers.ttl_s"),
]

BOOLEANS = [
    sim(f"demand_fetch={v or 'empty'}", f"demand_fetch={v}", "demand_fetch")
    for v in ("1", "yes", "maybe", "")
] + [
    sim("trace_cache=0", "trace_cache=0", "trace_cache"),
    sim("retrieval.enabled=on", "retrieval.enabled=on", "retrieval.enabled"),
    sim("oracle.enabled=no", "oracle.enabled=no", "oracle.enabled"),
    sim("progress=off", "progress=off", "progress"),
    sim("output.moves=2", "output.moves=2", "output.moves"),
    sim("mlflow.enabled=yes", "mlflow.enabled=yes", "mlflow.enabled"),
    sim("policy.admit_fetched=no", "policy=rule policy.admit_fetched=no", "admit_fetched"),
    sim("policy.stochastic=1", "policy=memorybank policy.stochastic=1", "stochastic"),
    sim("policy.normalize=maybe", "policy=generative_agents policy.normalize=maybe", "normalize"),
    cmp("policy.admit_fetched=off", "policies=[rule] policy.admit_fetched=off", "admit_fetched"),
    cmp("demand_fetch=yes", "policies=[lru] demand_fetch=yes", "demand_fetch"),
    rec("retrieval.promote=1", "policies=[lru,rule] retrieval.promote=1", "retrieval.promote"),
]

NUMBERS = [
    sim("budget=nan", "budget=nan", "budget"),
    sim("budget=inf", "budget=inf", "budget"),
    sim("budget=-inf", "budget=-inf", "budget"),
    sim("budget=2**64", f"budget={2**64}", "budget"),
    sim("budget=-1", "budget=-1", "budget"),
    sim("budget=0", "budget=0", "budget"),
    sim("budget=abc", "budget=abc", "budget"),
    sim("budget=1.5", "budget=1.5", "budget"),
    sim("seed=-1", "seed=-1", "seed"),
    sim("seed=2**64", f"seed={2**64}", "seed"),
    sim("seed=nan", "seed=nan", "seed"),
    sim("price_per_mtok=-inf", "price_per_mtok=-inf", "price_per_mtok"),
    sim("price_per_mtok=-1", "price_per_mtok=-1", "price_per_mtok"),
    sim("price_per_mtok=cheap", "price_per_mtok=cheap", "price_per_mtok"),
    sim("tiers.short_term_tokens=2**64", f"tiers.short_term_tokens={2**64}", "short_term_tokens"),
    sim("tiers.ttl_s=inf", "tiers.ttl_s=inf", "tiers.ttl_s"),
    sim("tiers.ttl_s=nan", "tiers.ttl_s=nan", "tiers.ttl_s"),
    sim("tiers.short_term_latency_ms=inf", "tiers.short_term_latency_ms=inf", "latency_ms"),
    sim("retrieval.k=-1", "retrieval.k=-1", "retrieval.k"),
    sim("retrieval.budget=2**64", f"retrieval.budget={2**64}", "retrieval.budget"),
    sim("retrieval.min_similarity=nan", "retrieval.min_similarity=nan", "min_similarity"),
    sim("retrieval.min_similarity=5", "retrieval.min_similarity=5", "min_similarity"),
    sim("retrieval.query.goal_weight=inf", "retrieval.query.goal_weight=inf", "goal_weight"),
    sim("retrieval.rerank.value=nan", "retrieval.rerank.value=nan", "rerank.value"),
    sim(
        "retrieval.rerank.freshness_half_life_s=0",
        "retrieval.rerank.freshness_half_life_s=0",
        "freshness_half_life_s",
    ),  # fmt: skip
    sim("retrieval.filter.max_age_s=-1", "retrieval.filter.max_age_s=-1", "max_age_s"),
    sim("retrieval.hnsw.M=1", "retrieval.hnsw.M=1", "hnsw.M"),
    sim("retrieval.hnsw.M=10**8", "retrieval.hnsw.M=100000000", "hnsw.M"),
    sim("retrieval.hnsw.ef_search=0", "retrieval.hnsw.ef_search=0", "ef_search"),
    sim("embeddings.dim=0", "embeddings.dim=0", "embeddings.dim"),
    sim("embeddings.dim=2**64", f"embeddings.dim={2**64}", "embeddings.dim"),
    sim("compression.summary_fraction=0", "compression.summary_fraction=0", "summary_fraction"),
    sim(
        "compression.summary_fraction=nan", "compression.summary_fraction=nan", "summary_fraction"
    ),  # fmt: skip
    sim(
        "compression.low_value_threshold=inf",
        "compression.low_value_threshold=inf",
        "low_value_threshold",
    ),  # fmt: skip
    sim("oracle.milp_node_limit=2**40", f"oracle.milp_node_limit={2**40}", "milp_node_limit"),
    sim("oracle.lp_max_references=-1", "oracle.lp_max_references=-1", "lp_max_references"),
    sim("stats.bootstrap=10", "stats.bootstrap=10", "stats.bootstrap"),
    sim("stats.bootstrap=10**12", "stats.bootstrap=1000000000000", "stats.bootstrap"),
    sim("stats.ci=1", "stats.ci=1", "stats.ci"),
    sim("stats.ci=nan", "stats.ci=nan", "stats.ci"),
    sim("stats.seed=-1", "stats.seed=-1", "stats.seed"),
    sim("stats.min_streams=1", "stats.min_streams=1", "stats.min_streams"),
    sim(
        "costs.miss_penalty_usd.user_input=nan",
        "costs.miss_penalty_usd.user_input=nan",
        "miss_penalty_usd",
    ),  # fmt: skip
    sim("costs.value_weight.llm_thought=2", "costs.value_weight.llm_thought=2", "value_weight"),
    sim("policy.admit_threshold=nan", "policy=rule policy.admit_threshold=nan", "admit_threshold"),
    sim(
        "policy.half_life_hours=inf",
        "policy=rule policy.half_life_hours.user_input=inf",
        "half_life_hours",
    ),  # fmt: skip
    sim(
        "policy.pressure_fraction=2",
        "policy=memgpt policy.pressure_fraction=2",
        "pressure_fraction",
    ),  # fmt: skip
    sim(
        "policy.recency_decay=-1",
        "policy=generative_agents policy.recency_decay=-1",
        "recency_decay",
    ),  # fmt: skip
    sim(
        "policy.length_unit_tokens=0",
        "policy=memoryos_heat policy.length_unit_tokens=0",
        "length_unit_tokens",
    ),  # fmt: skip
    sim(
        "policy.time_unit_hours=-inf",
        "policy=memorybank policy.time_unit_hours=-inf",
        "time_unit_hours",
    ),  # fmt: skip
    cmp("budgets=[512,nan]", "policies=[lru] budgets=[512,nan]", "budgets"),
    cmp("budgets=[0]", "policies=[lru] budgets=[0]", "budgets"),
    cmp("budgets=[512,512]", "policies=[lru] budgets=[512,512]", "budgets"),
    cmp("budgets=[]", "policies=[lru] budgets=[]", "budgets"),
    cmp("budgets=512", "policies=[lru] budgets=512", "budgets"),
    rec("target=nan", "policies=[lru,rule] target=nan", "target"),
    rec("target=2", "policies=[lru,rule] target=2", "target"),
    rec("target=-0.1", "policies=[lru,rule] target=-0.1", "target"),
    Case("recommend target missing", ["recommend", "policies=[lru]"], "target"),
]

NAMES = [
    sim("unknown key", "no_such_key=1", "no_such_key"),
    sim("unknown +key", "+zzz=1", "zzz"),
    sim("unknown nested key", "tiers.no_such=1", "no_such"),
    sim("unknown policy param", "policy.no_such_parameter=1", "no_such_parameter"),
    sim("unknown +policy param", "+policy.extra=1", "extra"),
    sim("unknown policy", "policy=nonesuch", "nonesuch"),
    sim("policy name case", "policy=LRU", "LRU"),
    sim("engine=turbo", "engine=turbo", "engine"),
    sim("engine=fast policy=memgpt", "engine=fast policy=memgpt", "engine=fast"),
    sim(
        "engine=fast promote",
        "engine=fast policy=lru retrieval.enabled=true retrieval.promote=true",
        "engine=fast",
    ),  # fmt: skip
    sim("tiers.short_term_policy=lfu", "tiers.short_term_policy=lfu", "short_term_policy"),
    sim(
        "compression.low_value_strategy=zip",
        "compression.low_value_strategy=zip",
        "low_value_strategy",
    ),  # fmt: skip
    sim(
        "compression.by_type bad strategy",
        "compression.by_type={llm_thought:zip}",
        "compression.by_type",
    ),  # fmt: skip
    sim("compression.by_type bad type", "compression.by_type={robot:none}", "compression.by_type"),
    sim("oracle.method=psychic", "oracle.method=psychic", "oracle.method"),
    sim("stats.method=jackknife", "stats.method=jackknife", "stats.method"),
    sim("retrieval.filter.types=[robot]", "retrieval.filter.types=[robot]", "filter.types"),
    sim("costs unknown type", "+costs.miss_latency_s.robot=1", "robot"),
    sim("embeddings.kind=sentence no model", "embeddings.kind=sentence", "embeddings"),
    sim("mlflow.tracking_uri=s3", "mlflow.tracking_uri=s3://bucket/x", "mlflow.tracking_uri"),
    sim("mlflow.tracking_uri=http://", "mlflow.tracking_uri=http://", "mlflow.tracking_uri"),
    sim("mlflow.tracking_uri empty", "mlflow.tracking_uri=", "mlflow.tracking_uri"),
    sim("mlflow.experiment empty", "mlflow.experiment=", "mlflow.experiment"),
    sim("experiment=nonesuch", "experiment=nonesuch", "nonesuch"),
    sim("experiment=bundled (compare only)", "experiment=bundled", "traces"),
    cmp("policies=[lru,nonesuch]", "policies=[lru,nonesuch]", "nonesuch"),
    cmp("policies=[]", "policies=[]", "policies"),
    cmp("policies=[lru,lru]", "policies=[lru,lru]", "policies"),
    cmp("policy=lru", "policy=lru", "policies"),
    cmp("reference not compared", "policies=[lru,rule] reference=window", "reference"),
    cmp("engine=fast", "policies=[learned] policy.retrain_every=5 engine=fast", "engine=fast"),
    cmp("unknown key", "policies=[lru] nonesuch=1", "nonesuch"),
    cmp(
        "policy param for other",
        "policies=[lru,rule] policy.admit_threshold=0.3",
        "admit_threshold",
    ),
    rec("metric unknown", "policies=[lru,rule] metric=nonesuch", "metric"),
    rec("metric is a count", "policies=[lru,rule] metric=hits", "metric"),
    rec("cost higher is better", "policies=[lru,rule] cost=hit_rate", "cost"),
    rec("exclude unknown", "policies=[lru,rule] exclude=[nonesuch]", "nonesuch"),
    rec("nothing left", "policies=[oracle]", "policy"),
    rec("policy=lru", "policy=lru", "policies"),
]


def trace_cases() -> list[Case]:
    files = [
        ("a directory", "{F}/dir"),
        ("/dev/zero", "/dev/zero"),
        ("a FIFO", "{F}/fifo.jsonl"),
        ("a missing file", "{F}/missing.jsonl"),
        ("an empty file", "{F}/empty.jsonl"),
        ("a header-only file", "{F}/header_only.jsonl"),
        ("a corrupt gzip", "{F}/corrupt.jsonl.gz"),
        ("plain text named .gz", "{F}/not_gzip.jsonl.gz"),
        ("non-UTF-8 bytes", "{F}/latin1.jsonl"),
        ("a lone CR", "{F}/lone_cr.jsonl"),
        ("tokens 2**64", "{F}/tokens_2_64.jsonl"),
        ("tokens 1e300", "{F}/tokens_1e300.jsonl"),
        ("meta nested 500 deep", "{F}/deep_meta.jsonl"),
        ("a 20 MB line", "{F}/huge_line.jsonl"),
        ("malformed JSON", "{F}/not_json.jsonl"),
        ("an unknown need", "{F}/unknown_need.jsonl"),
        ("negative tokens", "{F}/negative_tokens.jsonl"),
        ("t=NaN", "{F}/nan_time.jsonl"),
    ]
    out = []
    for what, path in files:
        mention = path.replace("{F}/", "")
        out.append(sim(f"trace: {what}", f"trace={path}", mention))
        out.append(data(f"stats trace: {what}", f"stats trace={path}", mention))
    for what, path in files[:4] + [files[6], files[8]]:
        mention = path.replace("{F}/", "")
        out.append(cmp(f"traces: {what}", f"policies=[lru] traces=[{path}]", mention))
    out.append(rec("trace: a FIFO", "policies=[lru,rule] trace={F}/fifo.jsonl", "fifo.jsonl"))
    out.append(sim("embeddings.corpus: a directory", "embeddings.corpus={F}/corpus_dir",
                   "embeddings.corpus"))  # fmt: skip
    out.append(sim("embeddings.corpus: missing", "embeddings.corpus={F}/nope.txt",
                   "embeddings.corpus"))  # fmt: skip
    out.append(sim("oracle.cache_dir: a file", "oracle.cache_dir={F}/good.jsonl",
                   "oracle.cache_dir"))  # fmt: skip
    return out


DATA = [
    data("generate out=bundled trace", f"generate out={BUNDLED}", "out"),
    data("generate out=existing", "generate out=existing.jsonl", "out", existing="existing.jsonl"),
    data(
        "generate out=existing.gz",
        "generate out=existing.jsonl.gz streams=1",
        "out",
        existing="existing.jsonl.gz",
    ),  # fmt: skip
    data("generate out=a directory", "generate out={F}/dir", "out"),
    data("generate out in missing folder", "generate out=nofolder/t.jsonl", "out"),
    data("generate out missing", "generate archetype=coding", "out"),
    data("generate unknown archetype", "generate archetype=nope out=t.jsonl", "archetype"),
    data("generate unknown knob", "generate out=t.jsonl colour=blue", "colour"),
    data("generate seed=-1", "generate out=t.jsonl seed=-1", "seed"),
    data("generate streams=0", "generate out=t.jsonl streams=0", "streams"),
    data("generate streams=2**64", f"generate out=t.jsonl streams={2**64}", "streams"),
    data(
        "generate events_per_stream=1.5",
        "generate out=t.jsonl events_per_stream=1.5",
        "events_per_stream",
    ),  # fmt: skip
    data(
        "generate token_scale=inf",
        "generate archetype=coding out=t.jsonl token_scale=inf",
        "token_scale",
    ),  # fmt: skip
    data(
        "generate token_sigma=1e308",
        "generate archetype=coding out=t.jsonl token_sigma=1e308",
        "token_sigma",
    ),  # fmt: skip
    data("generate request_share=nan", "generate out=t.jsonl request_share=nan", "request_share"),
    data("generate overwrite=yes", "generate out=t.jsonl overwrite=yes", "overwrite"),
    data("generate -m", "generate -m seed=1,2 out=t.jsonl", "multirun"),
    data(
        "convert out=existing",
        "convert dataset=taubench "
        f"src={ROOT}/datasets/taubench/gpt-4o-airline.json out=existing.jsonl",
        "out",
        existing="existing.jsonl",
    ),  # fmt: skip
    data(
        "convert unknown dataset", "convert dataset=csv src={F}/good.jsonl out=o.jsonl", "dataset"
    ),  # fmt: skip
    data("convert src missing", "convert dataset=locomo src={F}/nope.json out=o.jsonl", "src"),
    data("convert src a directory", "convert dataset=locomo src={F}/dir out=o.jsonl", "src"),
    data("convert src a FIFO", "convert dataset=locomo src={F}/fifo.jsonl out=o.jsonl", "src"),
    data(
        "convert src malformed",
        "convert dataset=locomo src={F}/not_json_src.json out=o.jsonl",
        "not_json_src.json",
    ),  # fmt: skip
    data(
        "convert bad enum",
        "convert dataset=locomo src={F}/good.jsonl out=o.jsonl placement=middle",
        "placement",
    ),  # fmt: skip
    data(
        "convert captions=off",
        "convert dataset=locomo src={F}/good.jsonl out=o.jsonl captions=off",
        "captions",
    ),  # fmt: skip
    data(
        "convert turn_seconds=nan",
        "convert dataset=locomo src={F}/good.jsonl out=o.jsonl turn_seconds=nan",
        "turn_seconds",
    ),  # fmt: skip
    data("stats json=1", "stats trace={F}/good.jsonl json=1", "json"),
    data("stats missing trace setting", "stats", "trace"),
    data("unknown data command", "frobnicate", "frobnicate"),
]


# ------------------------------------------------------- issue 33: models, run folders
def _crafted_models(folder: Path) -> None:
    """The bundled model with the issue's same-length edits, each with a sidecar whose
    ``model_sha256`` is that of the edited text (``sha``) or absent (``nosha``: the issue's
    "an edited model is not noticed")."""
    src = ROOT / "memlens" / "models" / "default_learned"
    text = src.with_suffix(".txt").read_text()
    meta = json.loads(src.with_suffix(".json").read_text())
    edits = {
        "cycle": ("left_child=3 2 6 -1", "left_child=0 2 6 -1"),
        "feature9999": ("split_feature=10 22 1 10 16 22", "split_feature=10 22 1 9999 1 2"),
        # (the first threshold made nan, the second written with zeros: the same length)
        "nanthreshold": ("threshold=0.78202600845996517 0.65562375515179283",
                         "threshold=nan 0.655623755151792830000000000000000"),
        "edited": ("shrinkage=1\n", "shrinkage=2\n"),
    }  # fmt: skip
    for name, (old, new) in edits.items():
        assert old in text and len(old) == len(new), name
        edited = text.replace(old, new, 1)
        for kind in ("sha", "nosha"):
            side = {k: v for k, v in meta.items() if k != "model_sha256"}
            if kind == "sha":
                side["model_sha256"] = hashlib.sha256(edited.encode()).hexdigest()
            (folder / f"{name}_{kind}.txt").write_text(edited)
            (folder / f"{name}_{kind}.json").write_text(json.dumps(side))


def _newline_bomb(path: Path, mebibytes: int = 4096) -> None:
    """A header, then 4 GiB of newlines in about 4.3 MB (concatenated gzip members)."""
    member = gzip.compress(b"\n" * (1 << 20), mtime=0)
    with open(path, "wb") as f:
        f.write(gzip.compress(json.dumps(HEADER).encode() + b"\n", mtime=0))
        for _ in range(mebibytes):
            f.write(member)


def make_issue33_fixtures(folder: Path) -> None:
    _crafted_models(folder)
    _newline_bomb(folder / "bomb.jsonl.gz")
    (folder / "a[1].jsonl").write_bytes(_jsonl(HEADER, W1, R1))
    (folder / "sub").mkdir(exist_ok=True)
    (folder / "sub" / "good.jsonl").write_bytes(_jsonl(HEADER, W1, R1))


def model(name: str, file: str) -> Case:
    return sim(f"policy.model: {name}", f"policy=learned policy.model={{F}}/{file}.txt", file)


MODELS = [
    model("a cycle (left_child=0), checksum matching", "cycle_sha"),
    model("a cycle (left_child=0), no checksum", "cycle_nosha"),
    model("split_feature=9999, checksum matching", "feature9999_sha"),
    model("split_feature=9999, no checksum", "feature9999_nosha"),
    model("threshold=nan, checksum matching", "nanthreshold_sha"),
    model("an edited model, no checksum", "edited_nosha"),
]

RUNS = [
    Case(
        "simulate trace: 4 GiB of newlines in 4 MB of gzip",
        ["simulate", "trace={F}/bomb.jsonl.gz"],
        "bomb.jsonl.gz",
        timeout=150,
    ),  # fmt: skip
    Case(
        "data stats trace: 4 GiB of newlines in 4 MB of gzip",
        ["data", "stats", "trace={F}/bomb.jsonl.gz"],
        "bomb.jsonl.gz",
        timeout=150,
    ),  # fmt: skip
    Case(
        "simulate hydra.run.dir=an existing file",
        ["simulate", "hydra.run.dir=existing"],
        "hydra.run.dir",
        existing="existing",
    ),  # fmt: skip
    Case(
        "simulate hydra.run.dir=under a file",
        ["simulate", "hydra.run.dir=existing/run"],
        "hydra.run.dir",
        existing="existing",
    ),  # fmt: skip
    Case(
        "simulate hydra.run.dir=/proc/self/x",
        ["simulate", "hydra.run.dir=/proc/self/x"],
        "hydra.run.dir",
    ),  # fmt: skip
    Case(
        "simulate hydra.run.dir=/",
        ["simulate", "hydra.run.dir=/"],
        "hydra.run.dir",
        cleans_root=True,
    ),  # fmt: skip
    Case(
        "simulate hydra.run.dir=a read-only mount",
        ["simulate", "hydra.run.dir={W}/disk/run"],
        "hydra.run.dir",
        mount="ro",
    ),  # fmt: skip
    Case(
        "simulate hydra.run.dir=a full disk (1 MiB tmpfs)",
        ["simulate", "hydra.run.dir={W}/disk/run", "mlflow.enabled=false"],
        "hydra.run.dir",
        mount="full",
        env={"MEMLENS_CACHE": "{W}-cache"},  # (the caches the replay filled are not run files,
        # and a failed run is recorded in MLflow by design: both are kept out of this case)
    ),  # fmt: skip
    Case(
        "data generate out=a full disk (1 MiB tmpfs)",
        ["data", "generate", "out={W}/disk/t.jsonl", "streams=400"],
        "out",
        mount="full",
    ),  # fmt: skip
    Case(
        "simulate hydra.run.dir=the trace's folder",
        ["simulate", "trace={F}/sub/good.jsonl", "hydra.run.dir={F}/sub"],
        "hydra.run.dir",
    ),  # fmt: skip
    cmp(
        "traces: one trace under two spellings",
        "policies=[lru] budgets=[512] traces=[{F}/good.jsonl,{F}/sub/../good.jsonl]",
        "traces",
    ),
    Case(
        "simulate MEMLENS_CACHE=a regular file",
        ["simulate"],
        "MEMLENS_CACHE",
        env={"MEMLENS_CACHE": "{F}/good.jsonl"},
    ),  # fmt: skip
    Case(
        "simulate mlflow.tracking_uri=sqlite:///a folder",
        ["simulate", "mlflow.tracking_uri=sqlite:///{F}/dir"],
        "mlflow.tracking_uri",
        timeout=200,
    ),  # fmt: skip
    sim("trace: a path holding [", "trace={F}/a[1].jsonl", "trace="),
    Case(
        "simulate --experimental-rerun a pickle",
        ["simulate", "--experimental-rerun", "{F}/good.jsonl"],
        "experimental-rerun",
    ),  # fmt: skip
]


def all_cases() -> list[Case]:
    return ISSUE + BOOLEANS + NUMBERS + NAMES + trace_cases() + DATA


GROUPS = {"settings": all_cases, "models": lambda: MODELS, "runs": lambda: RUNS}


# --------------------------------------------------------------------------- running
def snapshot(folder: Path) -> dict[str, str]:
    """Every path under ``folder`` with a digest of its bytes (directories as ``dir``)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        rel = str(p.relative_to(folder))
        out[rel] = "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@dataclass
class Result:
    case: Case
    why: str | None  # what went wrong, or None: handled
    wall: float
    code: str  # the exit code (HTTP status for ui cases), "timeout" or "skipped"
    first: str  # the first line of stderr (of the answer for ui cases)


def _mount(case: Case, work: Path) -> str | None:
    """Mount the case's tmpfs at ``work/disk``; why it could not be, or None."""
    if case.mount is None:
        return None
    disk = work / "disk"
    disk.mkdir()
    opts = "ro,size=1m" if case.mount == "ro" else "size=1m"
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(disk)],
                          capture_output=True)  # fmt: skip
    return None if proc.returncode == 0 else "mounting a tmpfs needs root"


#: What a run writes into its folder: removed from / after the case that let an old checkout
#: write there (``hydra.run.dir=/``).
ROOT_LEFTOVERS = (".hydra", "simulate.log", "metrics.json", "per_request.parquet",
                  "moves.parquet", "resolved_config.yaml", "events.parquet", "report.html")  # fmt: skip


def _clean_root(existed: set[str]) -> None:
    """Remove the run files in / that were not there before the case."""
    for name in set(ROOT_LEFTOVERS) - existed:
        path = Path("/") / name
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        elif path.exists():
            path.unlink()


def run_case(case: Case, fixtures: Path, memlens: str = MEMLENS) -> Result:
    """Run one case in a fresh working folder and judge it."""
    work = Path(tempfile.mkdtemp(prefix="bad-input-"))
    try:
        if case.existing:
            (work / case.existing).write_text("precious\n")
        if (problem := _mount(case, work)) is not None:
            return Result(case, None, 0.0, "skipped", problem)
        before = snapshot(work)

        def fill(a: str) -> str:
            return a.replace("{F}", str(fixtures)).replace("{W}", str(work))

        argv = [fill(a) for a in case.argv]
        if argv[0] in ("simulate", "compare", "recommend"):  # the case's own settings win
            own = " ".join(argv)
            argv = [argv[0], *([] if "hydra.run.dir=" in own else [f"hydra.run.dir={work / 'run'}"]),
                    *([] if "mlflow.tracking_uri=" in own
                      else [f"mlflow.tracking_uri=sqlite:///{work / 'mlflow.db'}"]),
                    *argv[1:]]  # fmt: skip
        env = {**os.environ, "MEMLENS_CACHE": str(work / "cache"), "PYTHONWARNINGS": "ignore",
               **{k: fill(v) for k, v in (case.env or {}).items()}}  # fmt: skip
        in_root = {n for n in ROOT_LEFTOVERS if (Path("/") / n).exists()}
        t0 = time.perf_counter()
        try:
            proc = subprocess.run([memlens, *argv], cwd=work, env=env, capture_output=True,
                                  timeout=case.timeout, stdin=subprocess.DEVNULL)  # fmt: skip
        except subprocess.TimeoutExpired:
            why = f"timed out after {case.timeout:.0f} s"
            return Result(case, why, time.perf_counter() - t0, "timeout", why)
        wall = time.perf_counter() - t0
        if case.cleans_root:
            _clean_root(in_root)
        lines = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        first = lines[0][:200] if lines else "(no stderr)"
        why = judge(case, proc, before, snapshot(work))
        return Result(case, why, wall, str(proc.returncode), first)
    finally:
        if case.mount is not None:
            subprocess.run(["umount", str(work / "disk")], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(f"{work}-cache", ignore_errors=True)


def judge(case: Case, proc, before: dict, after: dict) -> str | None:
    err = proc.stderr.decode("utf-8", "replace")
    lines = err.strip().splitlines()
    first = lines[0][:160] if lines else "(no stderr)"
    if proc.returncode != 2:
        return f"exit {proc.returncode}: {first if proc.returncode else 'accepted'}"
    if "Traceback" in err:
        return f"traceback: {lines[-1][:160]}"
    if len(lines) != 1 or not lines[0].startswith("error: "):
        return f"{len(lines)} stderr lines: {first}"
    if proc.stdout.strip():
        return f"stdout not empty: {proc.stdout.decode()[:80]!r}"
    if case.mention not in lines[0]:
        return f"does not mention {case.mention!r}: {first}"
    if after != before:
        created = sorted(set(after) - set(before)) or sorted(
            k for k in after if after[k] != before.get(k)
        )
        return f"left files behind: {', '.join(created[:4])}"
    return None


# ------------------------------------------------------------------ issue 33: the page
@dataclass
class Page:
    """A ``memlens ui`` subprocess on a free port, and how to talk to it (cookie, token)."""

    proc: subprocess.Popen
    port: int
    cookie: str = ""
    token: str = ""

    def call(self, path: str, method: str = "GET", body: bytes | None = None,
             headers: dict | None = None, auth: bool = True) -> tuple[int, dict, bytes]:  # fmt: skip
        """(status, headers, body); ``auth``: send the session cookie and the token."""
        import http.client

        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        sent = {"Content-Type": "application/json"}
        if auth and self.cookie:
            sent["Cookie"] = self.cookie
        if auth and self.token:
            sent["X-MemLens-Token"] = self.token
        sent.update(headers or {})
        try:
            conn.request(method, path, body=body, headers=sent)
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            conn.close()

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_page(memlens: str, root: Path, work: Path) -> Page:
    """Start ``memlens ui`` and sign in as its printed URL lets one (before issue 33 the page
    handed its token to whoever asked; now the URL carries a one-time code)."""
    import re

    port = _free_port()
    proc = subprocess.Popen([memlens, "ui", f"root={root}", f"port={port}", "mlflow_uri=null",
                             f"feedback_store={work / 'fb.db'}", "prewarm=false"], cwd=work,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    line = proc.stdout.readline()
    match = re.search(r"http://[^/]+(/\S*)", line)
    assert match, f"memlens ui printed {line!r}"
    page = Page(proc, port)
    for _ in range(300):
        try:
            status, headers, body = page.call(match.group(1), auth=False)
            break
        except OSError:
            time.sleep(0.1)
    if status == 303:  # the code was spent: the session cookie
        page.cookie = headers["set-cookie"].split(";", 1)[0]
        status, headers, body = page.call("/")
    token = re.search(rb'name="memlens-token" content="([^"]+)"', body)
    page.token = token.group(1).decode() if token else ""
    return page


def make_ui_root(root: Path, outside: Path) -> None:
    """The page's hand-made runs plus the issue's hostile folders (``memlens.ui.sample``)."""
    from omegaconf import OmegaConf

    from memlens.ui.sample import make_sample_runs

    make_sample_runs(root)
    make_sample_runs(outside)

    def clone(name: str) -> Path:
        shutil.copytree(root / "lru", root / name)
        return root / name

    evil = clone("evil") / "resolved_config.yaml"
    cfg = OmegaConf.load(evil)
    cfg.policy = {"_target_": "subprocess.Popen", "args": f"touch {root.parent / 'PWNED'}",
                  "shell": True}  # fmt: skip
    OmegaConf.save(cfg, evil)
    (clone("garbage") / "events.parquet").write_bytes(b"PAR1 not parquet " * 64)
    (clone("shape") / "metrics.json").write_text('{"trace":"notadict","overall":5}')
    linked = clone("linked") / "metrics.json"
    linked.unlink()
    os.symlink(outside / "lru" / "metrics.json", linked)
    far = clone("far") / "metrics.json"
    metrics = json.loads(far.read_text())
    metrics["trace"]["path"] = str(outside / "trace.jsonl")
    far.write_text(json.dumps(metrics))


def _first(body: bytes) -> str:
    text = body.decode("utf-8", "replace").strip()
    return (text.splitlines() or ["(empty)"])[0][:140]


def ui_cases(page: Page, root: Path, note_mb: int) -> list[tuple[str, str, str, bool]]:
    """(case, status, first line, handled) of every page case of the issue."""
    evil_host = {"Host": f"evil.example:{page.port}"}
    rebound = {**evil_host, "Origin": f"http://evil.example:{page.port}"}
    pin = json.dumps({"run": "lru", "item_id": "a", "action": "pin"}).encode()
    note = json.dumps({"run": "lru", "item_id": "a", "action": "annotate",
                       "note": "x" * (note_mb << 20)}).encode()  # fmt: skip
    out = []

    def case(name: str, answer, handled, extra: str = "") -> None:
        status, _, body = answer
        out.append((name, str(status), (_first(body) + extra)[:200], handled(status, body)))

    marker = root.parent / "PWNED"
    answer = page.call("/api/whatif", "POST", b'{"run": "evil"}')
    time.sleep(1)  # (a process it started would have touched the marker by now)
    case("ui what-if of a run folder naming subprocess.Popen", answer,
         lambda st, b: st < 500 and st != 200 and not marker.exists(),
         f" [process started: {'YES' if marker.exists() else 'no'}]")  # fmt: skip
    answer = page.call("/", headers=evil_host, auth=False)
    case("ui GET / with Host: evil.example (DNS rebinding)", answer,
         lambda st, b: st in (403, 421) and b"memlens-token" not in b,
         f" [token in the answer: {'YES' if b'memlens-token' in answer[2] else 'no'}]")  # fmt: skip
    case(
        "ui POST /api/feedback rebound (Host and Origin evil.example, token)",
        page.call("/api/feedback", "POST", pin, headers=rebound),
        lambda st, b: st in (403, 421),
    )
    answer = page.call("/", auth=False)
    case("ui GET / without a session: the token handed out", answer,
         lambda st, b: b"memlens-token" not in b,
         f" [token in the answer: {'YES' if b'memlens-token' in answer[2] else 'no'}]")  # fmt: skip
    for name in (".", "./"):
        case(f"ui GET /api/summary?run={name}", page.call(f"/api/summary?run={name}"),
             lambda st, b: 400 <= st < 500)  # fmt: skip
    case("ui POST a body of 100,000 '['", page.call("/api/feedback", "POST", b"[" * 100_000),
         lambda st, b: 400 <= st < 500)  # fmt: skip
    case("ui GET /api/summary of a garbage events.parquet", page.call("/api/summary?run=garbage"),
         lambda st, b: 400 <= st < 500)  # fmt: skip
    answer = page.call("/api/runs")
    listed = answer[0] == 200 and b'"run":"lru"' in answer[2]
    case(
        "ui GET /api/runs with one wrongly shaped metrics.json",
        answer,
        lambda st, b: listed,
        f" [other runs listed: {'yes' if listed else 'NO'}]",
    )
    before = page.rss_mb()
    answer = page.call("/api/feedback", "POST", note)
    case(
        f"ui POST a {note_mb} MB note",
        answer,
        lambda st, b: st == 413,
        f" [server RSS {before:.0f} -> {page.rss_mb():.0f} MB]",
    )
    case("ui GET /api/summary of a metrics.json symlinked out of the root",
         page.call("/api/summary?run=linked"), lambda st, b: 400 <= st < 500)  # fmt: skip
    case(
        "ui what-if of a run whose trace lies outside the root",
        page.call("/api/whatif", "POST", b'{"run": "far"}'),
        lambda st, b: 400 <= st < 500,
    )
    return out


def run_ui(memlens: str, note_mb: int) -> list[Result]:
    """The page cases, against a ``memlens ui`` started for them."""
    with tempfile.TemporaryDirectory(prefix="bad-input-ui-") as tmp:
        work = Path(tmp)
        # the runs are made by the memlens under test (its own resolved_config.yaml format)
        python = Path(memlens).parent / "python"
        subprocess.run([str(python), __file__, "--make-ui-root", str(work)], check=True,
                       env={**os.environ, "MEMLENS_CACHE": str(work / "cache")})  # fmt: skip
        page = start_page(memlens, work / "runs", work)
        try:
            t0 = time.perf_counter()
            rows = ui_cases(page, work / "runs", note_mb)
            wall = (time.perf_counter() - t0) / max(len(rows), 1)
        finally:
            page.proc.terminate()
            page.proc.wait(timeout=30)
    return [Result(Case(name, [], ""), None if ok else "not handled", wall, code, first)
            for name, code, first, ok in rows]  # fmt: skip


def run_sigterm(memlens: str) -> Result:
    """The issue's last case: a compare stopped by SIGTERM must leave no dated folder."""
    with tempfile.TemporaryDirectory(prefix="bad-input-term-") as tmp:
        work = Path(tmp)
        env = {**os.environ, "MEMLENS_CACHE": str(work / "cache"), "PYTHONWARNINGS": "ignore"}
        t0 = time.perf_counter()
        proc = subprocess.Popen([memlens, "compare", "policies=[lru,rule,memorybank]",
                                 "budgets=[256,512,1024]", "mlflow.enabled=false", "n_jobs=1",
                                 "resume=false"], cwd=work, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip
        while proc.poll() is None and not list((work / "outputs").glob("*/.*.staging.*")):
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        left = sorted(str(p.relative_to(work)) for p in (work / "outputs").rglob("*")) if (
            work / "outputs").exists() else []  # fmt: skip
        first = (err.strip().splitlines() or ["(no stderr)"])[0]
        shown = f"{first} [left: {', '.join(left) or 'nothing'}]"
        return Result(Case("compare stopped by SIGTERM", [], ""),
                      None if not left and proc.returncode == 143 else "left a folder",
                      time.perf_counter() - t0, str(proc.returncode), shown[:200])  # fmt: skip


# ------------------------------------------------------------------ the table
def write_json(path: str, results: list[Result]) -> None:
    Path(path).write_text(json.dumps({r.case.name: {"code": r.code, "first": r.first,
                                                    "handled": r.why is None}
                                      for r in results}, indent=1) + "\n")  # fmt: skip


def print_table(before_path: str, after_path: str) -> None:
    """A Markdown table of every case: exit code (status) and first line, before and after
    (the fixture folder shown as ``F/``, a case's working folder as ``W/``)."""
    import re

    before, after = (json.loads(Path(p).read_text()) for p in (before_path, after_path))
    print("| case | before | after |\n|---|---|---|")
    for name, a in after.items():
        b = before.get(name, {"code": "-", "first": "(not run)"})

        def cell(r: dict) -> str:
            text = re.sub(r"/tmp/bad-input-fixtures-\w+/", "F/", f"{r['code']}: {r['first']}")
            text = re.sub(r"/tmp/bad-input-(?:ui-|term-)?\w+/", "W/", text)
            return text.replace("|", "\\|")

        print(f"| {name} | {cell(b)} | {cell(a)} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", default="", help="run only cases whose name contains this")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--group",
        default="settings",
        choices=["settings", "models", "runs", "ui", "issue33", "all"],
        help="issue33: models, runs and ui (default: settings, the original set)",
    )
    parser.add_argument("--memlens", default=MEMLENS, help="the memlens command to test")
    parser.add_argument("--json", help="write each case's exit code and first line here")
    parser.add_argument(
        "--table",
        nargs=2,
        metavar=("BEFORE", "AFTER"),
        help="print the Markdown table of two --json files, run nothing",
    )
    parser.add_argument("--note-mb", type=int, default=300, help="ui: the size of the big note")
    parser.add_argument("--make-ui-root", help=argparse.SUPPRESS)  # (run by the ui group)
    args = parser.parse_args()
    if args.make_ui_root:
        make_ui_root(Path(args.make_ui_root) / "runs", Path(args.make_ui_root) / "outside")
        return 0
    if args.table:
        print_table(*args.table)
        return 0
    groups = {"issue33": ["models", "runs", "ui"], "all": ["settings", "models", "runs", "ui"]}
    chosen = groups.get(args.group, [args.group])
    cases = [c for g in chosen if g in GROUPS for c in GROUPS[g]() if args.k in c.name]
    names = [c.name for c in cases]
    dupes = {n for n in names if names.count(n) > 1}
    assert not dupes, f"duplicate case names: {dupes}"
    bundled = hashlib.sha256(BUNDLED.read_bytes()).hexdigest()
    with tempfile.TemporaryDirectory(prefix="bad-input-fixtures-") as tmp:
        fixtures = Path(tmp)
        make_fixtures(fixtures)
        if set(chosen) & {"models", "runs"}:
            make_issue33_fixtures(fixtures)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.workers) as pool:
            results = list(pool.map(lambda c: run_case(c, fixtures, args.memlens), cases))
        if "runs" in chosen and args.k in "compare stopped by SIGTERM":
            results.append(run_sigterm(args.memlens))
        if "ui" in chosen:
            results += [r for r in run_ui(args.memlens, args.note_mb) if args.k in r.case.name]
        wall = time.perf_counter() - t0
    report(results, wall, args.workers, bundled)
    if args.json:
        write_json(args.json, results)
    failures = [r for r in results if r.why is not None]
    return 1 if failures or hashlib.sha256(BUNDLED.read_bytes()).hexdigest() != bundled else 0


def report(results: list[Result], wall: float, workers: int, bundled: str) -> None:
    """The summary: cases tried, handled, the bundled trace, the slowest case, the failures."""
    failures = [(r.case.name, r.why) for r in results if r.why is not None]
    unchanged = hashlib.sha256(BUNDLED.read_bytes()).hexdigest() == bundled
    slowest = max(results, key=lambda r: r.wall)
    skipped = [r for r in results if r.code == "skipped"]
    print(f"cases tried: {len(results)}" + (f" ({len(skipped)} skipped: {skipped[0].first})"
                                            if skipped else ""))  # fmt: skip
    print(f"handled (exit 2, one error line naming the setting or file, nothing created): "
          f"{len(results) - len(failures) - len(skipped)}")  # fmt: skip
    print(f"bundled default trace unchanged: {'yes' if unchanged else 'NO'}")
    print(f"wall {wall:.0f} s with {workers} workers; slowest case "
          f"{slowest.wall:.1f} s ({slowest.case.name})")  # fmt: skip
    print(f"failures: {len(failures)}")
    for name, why in failures:
        print(f"  {name}: {why}")


if __name__ == "__main__":
    sys.exit(main())
