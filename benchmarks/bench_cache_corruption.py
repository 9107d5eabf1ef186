"""Cache corruption: damaged entries of every cache kind are detected and rebuilt, never served.

    python benchmarks/bench_cache_corruption.py             # 300 corruptions per kind
    python benchmarks/bench_cache_corruption.py --n 30      # quick look

A small generated trace (``memlens.trace.generate``, archetype ``simple``, seed 5, 2 streams x 150
events) fills the three caches in a temporary folder: the parsed trace, the oracle bounds at
budget 800, and TF-IDF embeddings (dim 16).  Each entry is then damaged ``--n`` times, a third
each way: one byte XOR-ed with a random non-zero value at a random offset, truncation at a random
offset, 1 to 64 random bytes appended.  After each damage the entry is read through the code a
run uses (``load_trace_cached``, ``oracle.solve``, ``embed_trace``) and the outcome sorted:

* detected: exactly one ``warning: discarded corrupt cache entry`` line, and what the call
  returned (rebuilt) equals a computation from scratch;
* identical: no warning, and what was served equals the original bit for bit (the damage hit
  bytes no reader uses: a zip timestamp, the local header's copy of a size, bytes after the
  archive's end...);
* altered: the result differs from the original (must be 0);
* exceptions: the call raised (must be 0); ``>1 warning`` counts calls that warned twice.

For scale, the row ``traces (pickle)`` applies the same damage to the pickle the trace cache
used to write, read the way it used to be read (``pickle.load`` of a field dict; a failed load
silently re-parsed).  Oracle results are compared without their timings when rebuilt (a rebuild
re-times the solve) and with them when served.  The damage is seeded (``--seed``); the oracle
entry holds the solve's timings, so its size, and which flips land in bytes no reader uses, can
differ by a few between runs.

Then, for every bundled trace under ``datasets/``: the size of the file (gzip JSON Lines), of
the pickle the trace cache used to write, and of its entry now, with the time to parse the file
and to load the entry (``load_trace_cached``, best of 3; single runs on a shared machine).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import pickle
import sys
import tempfile
import time
from dataclasses import fields
from pathlib import Path

import numpy as np

from memlens.config.store import DATA_DIR
from memlens.oracle import OracleSettings, clear_memo, solve
from memlens.retrieval.embeddings import EmbeddingsConfig, embed_trace
from memlens.trace.cache import entry_path, load_trace_cached
from memlens.trace.generate import generate_simple
from memlens.trace.io import load_trace, write_trace
from memlens.trace.model import Trace

WARNING = "warning: discarded corrupt cache entry"
HOW = ("flip", "truncate", "append")
OUTCOMES = ("detected", "identical", "altered", "exceptions", ">1 warning")


def same_trace(a: Trace, b: Trace) -> bool:
    for f in fields(Trace):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            if not isinstance(y, np.ndarray) or x.dtype != y.dtype or not np.array_equal(x, y):
                return False
        elif x != y:
            return False
    return True


def oracle_view(result, timings: bool) -> tuple:
    streams = [s.as_dict() for s in result.streams]
    if not timings:
        for s in streams:
            s.pop("solve_s")
    plans = [p.tolist() for p in result.plans]
    wall = result.wall_s if timings else None
    return result.budget, result.demand_fetch, streams, plans, wall


class Cache:
    """One cache kind: fill it, read it as a run would, compare with the truth."""

    def __init__(self, kind: str, folder: Path, trace_file: Path):
        self.kind, self.folder, self.trace_file = kind, folder, trace_file
        self.trace = load_trace(trace_file)
        self.fresh = self.read(cache=False)
        self.read(cache=True)  # writes the entry
        (self.entry,) = folder.glob("*.npz")
        self.original = self.entry.read_bytes()
        self.served = self.read(cache=True)

    def read(self, cache: bool):
        clear_memo()
        if self.kind == "traces":
            return load_trace_cached(self.trace_file, enabled=cache, directory=self.folder)
        if self.kind == "oracle":
            return solve(
                self.trace, 800, False, OracleSettings(cache=cache, cache_dir=str(self.folder))
            )
        cfg = EmbeddingsConfig(dim=16, cache=cache, cache_dir=str(self.folder))
        return embed_trace(self.trace, cfg, seed=0)

    def same(self, value, served: bool) -> bool:
        if self.kind == "traces":
            return same_trace(value, self.served if served else self.fresh)
        if self.kind == "oracle":
            truth = self.served if served else self.fresh
            return oracle_view(value, served) == oracle_view(truth, served)
        return all(
            a.dtype == b.dtype and np.array_equal(a, b)
            for a, b in ((value.items, self.fresh.items), (value.requests, self.fresh.requests))
        )

    def trial(self, damaged: bytes) -> str:
        self.entry.write_bytes(damaged)
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                value = self.read(cache=True)
        except Exception:  # noqa: BLE001 - counting them is the point
            return "exceptions"
        warnings = err.getvalue().count(WARNING)
        if warnings > 1:
            return ">1 warning"
        if not self.same(value, served=warnings == 0):
            return "altered"
        return "detected" if warnings else "identical"


class PickleTraceCache:
    """The trace cache as it was: a pickled field dict, any load error silently re-parsed."""

    kind = "traces (pickle)"

    def __init__(self, trace_file: Path):
        self.fresh = load_trace(trace_file)
        state = {f.name: getattr(self.fresh, f.name) for f in fields(Trace)}
        self.original = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)

    def trial(self, damaged: bytes) -> str:
        try:
            state = pickle.loads(damaged)  # our own bytes, damaged: safe to load here
            trace = Trace(**state) if set(state) == {f.name for f in fields(Trace)} else None
        except Exception:  # noqa: BLE001 - the old code caught these and re-parsed silently
            trace = None
        if trace is None:
            return "detected"  # (silently) re-parsed
        return "identical" if same_trace(trace, self.fresh) else "altered"


def damage(blob: bytes, how: str, rng: np.random.Generator) -> bytes:
    if how == "flip":
        at = int(rng.integers(len(blob)))
        return blob[:at] + bytes([blob[at] ^ int(rng.integers(1, 256))]) + blob[at + 1 :]
    if how == "truncate":
        return blob[: int(rng.integers(len(blob)))]
    return blob + rng.bytes(int(rng.integers(1, 65)))


def run(n: int, seed: int) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="memlens-bench-cache-") as tmp:
        root = Path(tmp)
        trace_file = root / "t.jsonl.gz"
        write_trace(trace_file, generate_simple(seed=5, streams=2, events_per_stream=150))
        caches = [
            Cache(kind, root / kind, trace_file) for kind in ("traces", "oracle", "embeddings")
        ]
        caches.append(PickleTraceCache(trace_file))
        for cache in caches:
            rng = np.random.default_rng(seed)
            for k, how in enumerate(HOW):
                counts = dict.fromkeys(OUTCOMES, 0)
                tries = n // len(HOW) + (k < n % len(HOW))
                for _ in range(tries):
                    counts[cache.trial(damage(cache.original, how, rng))] += 1
                size = len(cache.original)
                rows.append({"kind": cache.kind, "damage": how, "bytes": size, "tried": tries})
                rows[-1].update(counts)
                print(f"  {cache.kind:16} {how:9} done", file=sys.stderr, flush=True)
    return rows


def table(rows: list[dict]) -> str:
    head = ["kind", "damage", "entry bytes", "tried", "detected+rebuilt", "served identical",
            "served altered", "exceptions", ">1 warning"]  # fmt: skip
    keys = ["kind", "damage", "bytes", "tried", *OUTCOMES]
    totals: dict[str, dict] = {}
    for r in rows:
        t = totals.setdefault(r["kind"], {"kind": r["kind"], "damage": "all", "bytes": r["bytes"]})
        for key in ("tried", *OUTCOMES):
            t[key] = t.get(key, 0) + r[key]
    body = [[str(r[k]) for k in keys] for r in [*rows, *totals.values()]]
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    out = ["  ".join(h.ljust(w) for h, w in zip(head, widths))]
    out.append("  ".join("-" * w for w in widths))
    for b in body:
        out.append(
            "  ".join(
                v.ljust(w) if i < 2 else v.rjust(w) for i, (v, w) in enumerate(zip(b, widths))
            )
        )
    return "\n".join(out)


def best_of_3(fn) -> float:
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def sizes() -> str:
    """File, pickle and entry sizes and load times of the bundled traces."""
    out = ["| trace | events | file (gzip) | pickle (before) | entry (now) | parse s | entry load s |",
           "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="memlens-bench-cache-") as tmp:
        for path in sorted(DATA_DIR.rglob("*.jsonl.gz")):
            trace = load_trace(path)
            state = {f.name: getattr(trace, f.name) for f in fields(Trace)}
            pickled = len(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))
            load_trace_cached(path, directory=tmp)
            entry = entry_path(path, tmp).stat().st_size
            parse = best_of_3(lambda p=path: load_trace(p))
            cached = best_of_3(lambda p=path: load_trace_cached(p, directory=tmp))
            out.append(
                f"| {path.relative_to(DATA_DIR)} | {trace.n_events:,} | {path.stat().st_size:,} | "
                f"{pickled:,} | {entry:,} | {parse:.3f} | {cached:.3f} |"
            )
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=300, help="corruptions per cache kind")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rows = run(args.n, args.seed)
    print(table(rows))
    safe = [r for r in rows if r["kind"] != "traces (pickle)"]
    bad = sum(r["altered"] + r["exceptions"] + r[">1 warning"] for r in safe)
    print(f"\nsafecache entries: {sum(r['tried'] for r in safe)} corruptions, "
          f"{sum(r['detected'] for r in safe)} detected and rebuilt, "
          f"{sum(r['identical'] for r in safe)} served identical, {bad} altered or failed")  # fmt: skip
    print("\n" + sizes())


if __name__ == "__main__":
    main()
