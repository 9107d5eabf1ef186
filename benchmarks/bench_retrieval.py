"""Long-term store retrieval latency at 10k and 1M stored items (issue 5's benchmark).

For each size N: build the store's hnswlib index once (timed; items added in one call, on
``--threads`` threads), then time ``--queries`` searches through ``LongTermIndex.search``
(the path the replay uses): unfiltered, and with a type pre-filter that admits a quarter of the
items (hnswlib filter callable).  Recall@k against brute force on a sample of queries says what
the latency buys.  Vectors: a seeded mixture of 256 Gaussian clusters in ``--dim`` dimensions
(unit length), queries are stored vectors plus small noise (0.05 per coordinate), so neighbourhoods exist as in real text.

Also measured: the reference replay loop with retrieval off (the hot loop must stay >= 500k
events/s) and one full replay of the bundled trace with retrieval on (assembly latency).

    .venv/bin/python benchmarks/bench_retrieval.py                 # 10k and 1M, writes results
    .venv/bin/python benchmarks/bench_retrieval.py --sizes 10000   # quick
"""

from __future__ import annotations

import argparse
import platform
import resource
import time
from pathlib import Path

import numpy as np

from memlens._util.atomic import write_text
from memlens.retrieval.index import LongTermIndex, Prefilter

RESULTS = Path(__file__).resolve().parent / "results" / "retrieval.md"


def clustered(rng: np.random.Generator, n: int, dim: int, centers: int = 256) -> np.ndarray:
    c = rng.standard_normal((centers, dim)).astype(np.float32)
    x = np.empty((n, dim), dtype=np.float32)
    step = 200_000
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        x[lo:hi] = c[rng.integers(centers, size=hi - lo)]
        x[lo:hi] += 0.6 * rng.standard_normal((hi - lo, dim)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def pct(ms: list[float]) -> tuple[float, float]:
    a = np.asarray(ms)
    return float(np.percentile(a, 50)), float(np.percentile(a, 95))


def bench_size(n: int, args, rng: np.random.Generator) -> dict:
    vecs = clustered(rng, n, args.dim)
    types = rng.integers(4, size=n)
    idx = LongTermIndex(vecs, np.zeros(n, dtype=np.int64), 1, M=args.M,
                        ef_construction=args.ef_construction, ef_search=args.ef_search,
                        seed=0, exact_below=64, item_type=types)  # fmt: skip
    t0 = time.perf_counter()
    idx.add_many(np.arange(n), num_threads=args.threads)
    build_s = time.perf_counter() - t0
    qi = rng.integers(n, size=args.queries)
    queries = vecs[qi] + 0.05 * rng.standard_normal((args.queries, args.dim)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    out = {"n": n, "build_s": build_s}
    for label, allow in (
        ("unfiltered", None),
        ("type pre-filter (25%)", Prefilter(types=(0,))),
    ):
        times, results = [], []
        for q in queries:
            t = time.perf_counter()
            items, _ = idx.search(0, q, args.k, allow)
            times.append((time.perf_counter() - t) * 1e3)
            results.append(items)
        sample = range(min(args.recall_sample, args.queries))
        hits = 0
        for j in sample:
            mask = slice(None) if allow is None else (types == 0)
            cand = np.arange(n)[mask]
            sims = vecs[cand] @ queries[j]
            truth = set(cand[np.argpartition(-sims, args.k)[: args.k]].tolist())
            hits += len(truth & set(results[j].tolist()))
        p50, p95 = pct(times)
        out[label] = (p50, p95, hits / (args.k * len(sample)))
    del idx, vecs
    return out


def replay_numbers() -> tuple[float, str]:
    """Reference loop events/s with retrieval off, and retrieval latency on the bundled trace."""
    from memlens.policies.lru import LRU

    from memlens.config.store import data_path
    from memlens.retrieval.config import RetrievalConfig
    from memlens.simulator import simulate
    from memlens.trace.cache import load_trace_cached
    from memlens.trace.generate import generate_simple
    from memlens.trace.io import trace_from_events

    tr = trace_from_events(generate_simple(seed=1, streams=8, events_per_stream=125_000))
    best = 0.0
    for _ in range(3):
        res = simulate(tr, LRU(), 2048, engine="reference", progress=False)
        best = max(best, tr.n_events / res.wall_s)
    trace = load_trace_cached(data_path("default/agent-small.jsonl.gz"))
    m = replay_metrics(trace, "lru", 1024, RetrievalConfig(enabled=True))["timing"]
    line = (
        f"agent-small, lru @ 1024, retrieval budget 512: assembly p50 "
        f"{m['retrieval_latency_ms_p50']:.3f} ms, p95 {m['retrieval_latency_ms_p95']:.3f} ms; "
        f"index query p50 {m['index_query_ms_p50']:.3f} ms, p95 {m['index_query_ms_p95']:.3f} ms"
    )
    return best, line


TRACES = (
    "default/agent-small.jsonl.gz",
    "locomo/locomo10-end.jsonl.gz",
    "locomo/locomo10-after_evidence.jsonl.gz",
    "taubench/airline.jsonl.gz",
)


def bundled_traces():
    """(name, trace) for each bundled trace that exists."""
    from memlens.config.store import data_path
    from memlens.trace.cache import load_trace_cached

    for rel in TRACES:
        path = data_path(rel)
        if Path(path).exists():
            yield rel, load_trace_cached(path)


def replay_metrics(trace, policy: str, wm_budget: int, retrieval, embeddings=None,
                   compression=None) -> dict:  # fmt: skip
    """``overall`` and ``timing`` of the run ``memlens simulate`` does for the registered
    ``policy`` (default parameters) with these typed settings; tiers, embeddings and compression
    at their defaults unless given, seed 0, no oracle (not measured here, and slow)."""
    from memlens.config.schema import RunConfig
    from memlens.config.store import policy_targets
    from memlens.oracle.solve import OracleSettings
    from memlens.retrieval.compression import CompressionConfig
    from memlens.retrieval.embeddings import EmbeddingsConfig
    from memlens.runs import pipeline

    settings = RunConfig(
        policy={"_target_": policy_targets()[policy]},
        budget=wm_budget,
        retrieval=retrieval,
        embeddings=EmbeddingsConfig() if embeddings is None else embeddings,
        compression=CompressionConfig() if compression is None else compression,
        oracle=OracleSettings(enabled=False),
        progress=False,
    )
    _, report = pipeline.run(settings, trace)
    return {"overall": report.overall, "timing": report.timing}


def context_table(policies: list[str], wm_budget: int, ret_budget: int) -> list[str]:
    """context_recall and context tokens, retrieval off and on, on the bundled traces."""
    from memlens.retrieval.config import RetrievalConfig

    lines = [
        f"Working-memory budget {wm_budget}, retrieval budget {ret_budget} (defaults otherwise: "
        "k 8, rerank similarity 1.0 / value 0.2 / freshness 0.2, TF-IDF+SVD 256-d, STC 8192 "
        "tokens, no promotion, no compression).  `ctx` = mean context tokens (WM + retrieved).",
        "",
        "| trace | policy | hit_rate | recall off | recall on | precision | ctx off | ctx on "
        "| p95 ctx on | assembly p50/p95 ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for rel, trace in bundled_traces():
        for name in policies:
            row = {}
            for on in (False, True):
                retrieval = RetrievalConfig(enabled=on, budget=ret_budget)
                row[on] = replay_metrics(trace, name, wm_budget, retrieval)
            off, on = row[False]["overall"], row[True]["overall"]
            t = row[True]["timing"]
            lines.append(
                f"| {rel} | {name} | {off['hit_rate']:.3f} | {off['context_recall']:.3f} "
                f"| {on['context_recall']:.3f} | {on['retrieval_precision']:.3f} "
                f"| {off['mean_context_tokens_total']:.0f} | {on['mean_context_tokens_total']:.0f} "
                f"| {on['p95_context_tokens_total']:.0f} "
                f"| {t['retrieval_latency_ms_p50']:.3f} / {t['retrieval_latency_ms_p95']:.3f} |"
            )
            print(lines[-1], flush=True)
    return lines


SWEEP = ((64, 8, 0.2, 0.2), (64, 8, 0.0, 0.0), (64, 32, 0.0, 0.0), (256, 8, 0.2, 0.2),
         (256, 8, 0.0, 0.0), (256, 32, 0.0, 0.0), (256, 32, 0.05, 0.05))  # fmt: skip


def sweep_table(wm_budget: int, ret_budget: int) -> list[str]:
    """How embedding dimension, k and the rerank weights move context recall (LRU)."""
    from memlens.retrieval.config import RerankConfig, RetrievalConfig
    from memlens.retrieval.embeddings import EmbeddingsConfig

    lines = [
        f"LRU, working-memory budget {wm_budget}, retrieval budget {ret_budget}; recall / "
        "precision.  The defaults (dim 256, k 8, value 0.2, freshness 0.2) come from this table.",
        "",
        "| trace | dim | k | w_value | w_freshness | context_recall | retrieval_precision |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for rel, trace in bundled_traces():
        for dim, k, wv, wf in SWEEP:
            retrieval = RetrievalConfig(enabled=True, budget=ret_budget, k=k,
                                        rerank=RerankConfig(value=wv, freshness=wf))  # fmt: skip
            emb = EmbeddingsConfig(dim=dim)
            o = replay_metrics(trace, "lru", wm_budget, retrieval, emb)["overall"]
            lines.append(
                f"| {rel} | {dim} | {k} | {wv} | {wf} | {o['context_recall']:.3f} "
                f"| {o['retrieval_precision']:.3f} |"
            )
            print(lines[-1], flush=True)
    return lines


def variants(ret_budget: int) -> list[tuple]:
    """(label, retrieval settings, compression settings): one change from the defaults each."""
    from dataclasses import replace

    from memlens.retrieval.compression import CompressionConfig as Comp
    from memlens.retrieval.config import FilterConfig, QueryConfig, RetrievalConfig

    on, full = RetrievalConfig(enabled=True, budget=ret_budget), Comp()
    thoughts = {"llm_thought": "summary"}
    return [
        ("retrieval (defaults)", on, full),
        ("+ promote", replace(on, promote=True), full),
        ("+ prefetch", replace(on, prefetch=True), full),
        ("+ goal & last action in query (0.5 each)",
         replace(on, query=QueryConfig(goal_weight=0.5, last_action_weight=0.5)), full),
        ("+ same-task pre-filter", replace(on, filter=FilterConfig(same_task=True)), full),
        ("compression: thoughts summary", on, Comp(by_type=thoughts)),
        ("compression: thoughts summary (counts)", on,
         Comp(by_type=thoughts, summary_counts_as_hit=True)),
        ("compression: all entities", on, Comp(default="entities")),
        ("compression: tool results pointer", on, Comp(by_type={"tool_result": "pointer"})),
    ]  # fmt: skip


def variants_table(wm_budget: int, ret_budget: int) -> list[str]:
    """Promotion, prefetch, query enrichment, pre-filter and compression, one at a time (LRU)."""
    lines = [
        f"LRU, working-memory budget {wm_budget}, retrieval budget {ret_budget}; each row changes "
        "one thing from the defaults.  `lost` = needs retrieved only in a lossy form that does not "
        "serve them; `saved ctx` = context tokens compression saved over all requests; `saved "
        "LTS` = tokens saved over the long-term store at the end; `lat` = modeled critical-path "
        "latency p50 (configured 1 ms STC, 20 ms LTS).",
        "",
        "| trace | variant | hit_rate | context_recall | precision | ctx tokens | lost "
        "| saved ctx | saved LTS | prefetch served | lat ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for rel, trace in bundled_traces():
        for label, retrieval, compression in variants(ret_budget):
            o = replay_metrics(trace, "lru", wm_budget, retrieval, compression=compression)
            o = o["overall"]
            served = o["prefetch_served_share"]
            lines.append(
                f"| {rel} | {label} | {o['hit_rate']:.3f} | {o['context_recall']:.3f} "
                f"| {o['retrieval_precision']:.3f} | {o['mean_context_tokens_total']:.0f} "
                f"| {o['needs_lost_to_compression']} | {o['compression_context_tokens_saved']} "
                f"| {o['compression_stored_tokens_saved']} "
                f"| {'-' if served is None else f'{served:.3f}'} "
                f"| {o['retrieval_latency_modeled_ms_p50']:.0f} |"
            )
            print(lines[-1], flush=True)
    return lines


def update_section(path: Path, name: str, body: list[str]) -> None:
    """Replace one marked section of the results file, keeping the others."""
    start, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    text = path.read_text(encoding="utf-8") if path.exists() else "# Retrieval benchmarks\n"
    block = "\n".join([start, *body, end])
    if start in text and end in text:
        head, rest = text.split(start, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    write_text(path, text)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 1_000_000])
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--recall-sample", type=int, default=100)
    ap.add_argument("--M", type=int, default=16)
    ap.add_argument("--ef-construction", type=int, default=100)
    ap.add_argument("--ef-search", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1, help="threads for the one-off build")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--no-replay", action="store_true", help="skip the replay measurements")
    ap.add_argument(
        "--table",
        action="store_true",
        help="only the context table (recall, tokens) on the bundled traces",
    )
    ap.add_argument("--policies", nargs="+", default=["window", "lru", "rule"])
    ap.add_argument("--wm-budget", type=int, default=1024)
    ap.add_argument("--retrieval-budget", type=int, default=512)
    ap.add_argument(
        "--sweep",
        action="store_true",
        help="only the embedding dim / k / rerank weight sweep (LRU)",
    )
    ap.add_argument(
        "--variants",
        action="store_true",
        help="only promotion / prefetch / query / filter / compression variants",
    )
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    # each flag writes one section of the results file: (flag, section, title, table maker)
    sections = [
        ("variants", "variants", "Variants: promotion, prefetch, query, pre-filter, compression",
         lambda: variants_table(args.wm_budget, args.retrieval_budget)),
        ("sweep", "sweep", "Settings sweep",
         lambda: sweep_table(args.wm_budget, args.retrieval_budget)),
        ("table", "context", "Context recall with and without retrieval",
         lambda: context_table(args.policies, args.wm_budget, args.retrieval_budget)),
    ]  # fmt: skip
    for flag, section, title, make_table in sections:
        if getattr(args, flag):
            command = f"Command: `.venv/bin/python benchmarks/bench_retrieval.py --{flag}`"
            update_section(args.out, section, [f"## {title}", "", command, "", *make_table()])
            return
    rng = np.random.default_rng(0)
    rows = []
    for n in args.sizes:
        r = bench_size(n, args, rng)
        rows.append(r)
        print(r, flush=True)
    rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    lines = [
        "## Retrieval latency (long-term store, hnswlib)",
        "",
        f"Command: `.venv/bin/python benchmarks/bench_retrieval.py "
        f"--sizes {' '.join(map(str, args.sizes))}`  ",
        f"Machine: {platform.processor() or platform.machine()}, Python {platform.python_version()}; "
        f"dim {args.dim}, k {args.k}, M {args.M}, ef_construction {args.ef_construction}, "
        f"ef_search {args.ef_search}, build threads {args.threads}, {args.queries} queries, "
        f"single-threaded queries; peak RSS {rss_gb:.2f} GB.",
        "",
        "| stored items | build s | query | p50 ms | p95 ms | recall@k |",
        "|---:|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        for label in ("unfiltered", "type pre-filter (25%)"):
            p50, p95, rec = r[label]
            lines.append(
                f"| {r['n']:,} | {r['build_s']:.1f} | {label} | {p50:.3f} | {p95:.3f} | {rec:.3f} |"
            )
    if not args.no_replay:
        ev_s, line = replay_numbers()
        lines += [
            "",
            f"Reference replay loop, retrieval off (1,000,000 events, LRU @ 2048, best of 3): "
            f"{ev_s:,.0f} events/s.  ",
            line + ".",
        ]
    lines += [
        "",
        "The pre-filtered query counts the eligible items from the store's (task, type) groups "
        "(no scan) and walks the graph with a per-label Python filter callable; all N items in "
        "one stream is the worst case (the replay keeps one index per stream).  Build: one "
        "`add_items` call on the build threads; the replay adds items one at a time, "
        "single-threaded, in replay order (deterministic).  The machine is shared (load average "
        "about 2.5-3.5 on 2 cores during these runs), so timings are indicative.",
    ]
    update_section(args.out, "latency", lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
