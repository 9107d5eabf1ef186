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
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import shutil
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
    argv: list[str]  # after `memlens`; {F} is replaced by the fixture folder
    mention: str  # the setting or file the error line must mention
    existing: str | None = None  # a file created in the working dir first (must stay as is)


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


def all_cases() -> list[Case]:
    return ISSUE + BOOLEANS + NUMBERS + NAMES + trace_cases() + DATA


# --------------------------------------------------------------------------- running
def snapshot(folder: Path) -> dict[str, str]:
    """Every path under ``folder`` with a digest of its bytes (directories as ``dir``)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        rel = str(p.relative_to(folder))
        out[rel] = "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def run_case(case: Case, fixtures: Path) -> tuple[Case, str | None, float]:
    """(case, what went wrong or None, seconds)."""
    work = Path(tempfile.mkdtemp(prefix="bad-input-"))
    try:
        if case.existing:
            (work / case.existing).write_text("precious\n")
        before = snapshot(work)
        argv = [a.replace("{F}", str(fixtures)) for a in case.argv]
        if argv[0] in ("simulate", "compare", "recommend"):  # the case's own settings win
            argv = [argv[0], f"hydra.run.dir={work / 'run'}",
                    f"mlflow.tracking_uri=sqlite:///{work / 'mlflow.db'}", *argv[1:]]  # fmt: skip
        env = {**os.environ, "MEMLENS_CACHE": str(work / "cache"), "PYTHONWARNINGS": "ignore"}
        t0 = time.perf_counter()
        try:
            proc = subprocess.run([MEMLENS, *argv], cwd=work, env=env, capture_output=True,
                                  timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)  # fmt: skip
        except subprocess.TimeoutExpired:
            return case, f"timed out after {TIMEOUT_S} s", time.perf_counter() - t0
        wall = time.perf_counter() - t0
        return case, judge(case, proc, before, snapshot(work)), wall
    finally:
        shutil.rmtree(work, ignore_errors=True)


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", default="", help="run only cases whose name contains this")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    cases = [c for c in all_cases() if args.k in c.name]
    names = [c.name for c in cases]
    dupes = {n for n in names if names.count(n) > 1}
    assert not dupes, f"duplicate case names: {dupes}"
    bundled = hashlib.sha256(BUNDLED.read_bytes()).hexdigest()
    with tempfile.TemporaryDirectory(prefix="bad-input-fixtures-") as tmp:
        fixtures = Path(tmp)
        make_fixtures(fixtures)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.workers) as pool:
            results = list(pool.map(lambda c: run_case(c, fixtures), cases))
        wall = time.perf_counter() - t0
    failures = [(c.name, why) for c, why, _ in results if why is not None]
    if hashlib.sha256(BUNDLED.read_bytes()).hexdigest() != bundled:
        failures.append(("bundled default trace", "changed by the run"))
    slowest = max(results, key=lambda r: r[2])
    print(f"cases tried: {len(cases)}")
    print(f"handled (exit 2, one error line naming the setting or file, nothing created): "
          f"{len(cases) - len([f for f in failures if f[0] != 'bundled default trace'])}")  # fmt: skip
    print(f"bundled default trace unchanged: "
          f"{'yes' if not any(f[0] == 'bundled default trace' for f in failures) else 'NO'}")  # fmt: skip
    print(f"wall {wall:.0f} s with {args.workers} workers; slowest case "
          f"{slowest[2]:.1f} s ({slowest[0].name})")  # fmt: skip
    print(f"failures: {len(failures)}")
    for name, why in failures:
        print(f"  {name}: {why}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
