"""First load of a large trace (no parsed-trace cache): the exact parser against the bulk one.

Generates a 1,000,000-event agent trace once (``memlens data generate archetype=agent
streams=4 events_per_stream=250000``) as ``.jsonl.gz`` and, decompressed, as ``.jsonl``, then
loads each in a fresh process per measurement and reports wall time, CPU time (user + sys, all
threads: on a shared machine the wall time also counts the time other processes held the
cores), events per second and the process's peak RSS (``ru_maxrss``, the interpreter and
imports included):

* ``exact``: ``trace_io.load_trace_exact`` (the line-by-line ``_Builder``, the old path);
* ``bulk``: ``trace_io.load_trace`` as every command calls it (``memlens.trace.bulk.parse``: the
  compiled scanner, ``memlens.trace.bulk.scan``, reads every block; the run fails if it fell back to
  the exact parser), checked to give the exact parser's hash.  The numba cache is warm and the
  compiled functions are loaded before the clock starts (like the imports); the time that
  loading takes in a fresh process (numba's own start-up, once per process, shared with the
  replay kernels) is reported apart, and ``bulk-cold`` (once) is the first load ever, with an
  empty numba cache: compiling included;
* ``bulk-msgspec``: the same with the scanner switched off (msgspec decodes whole blocks into
  typed events: the tier for blocks the scanner leaves, and the whole bulk parser before);
* ``bulk-orjson``: with the typed decoding switched off too (every block decoded line by line
  by orjson: the bulk parser's general path, for blocks msgspec refuses);
* three candidate floors, parsing only (no range checks, no columns, no id resolution):
  ``pyarrow.json.read_json`` on the file; reading + splitting + ``orjson.loads`` of every line;
  reading + ``msgspec`` ``decode_lines`` of every block into the bulk parser's typed events.

    .venv/bin/python benchmarks/bench_parse.py                 # writes results/parse.md
    .venv/bin/python benchmarks/bench_parse.py --events 200000 --repeat 1 --out /tmp/p.md
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MEMLENS = shutil.which("memlens") or str(Path(sys.executable).parent / "memlens")
MODES = ("exact", "bulk", "bulk-cold", "bulk-msgspec", "bulk-orjson", "arrow", "orjson", "msgspec")
BULK = ("bulk", "bulk-cold", "bulk-msgspec", "bulk-orjson")


def child(mode: str, path: str) -> None:
    """One measurement, in this (fresh) process; prints a JSON line.  (Modules are imported
    before the clock starts: imports are not parsing.)"""
    import gc

    import orjson
    import pyarrow.json as pj

    from memlens.trace import io as trace_io
    from memlens.trace.bulk import parse as fast_parse
    from memlens.trace.lines import open_trace

    out: dict = {}
    if mode in ("bulk", "bulk-msgspec", "bulk-orjson"):
        out.update(numba=load_compiled())
    t0, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    if mode == "exact":
        trace = trace_io.load_trace_exact(path)
        out.update(events=trace.n_events, sha256=trace.sha256)
    elif mode in BULK:

        def refuse(*_args, **_kwargs):
            raise SystemExit("the bulk parser gave up on this trace")

        trace_io.load_trace_exact = refuse
        if mode in ("bulk-msgspec", "bulk-orjson"):
            fast_parse._scanned = lambda scan, text: False
        if mode == "bulk-orjson":
            fast_parse._typed_events = lambda text: None
        trace = trace_io.load_trace(path)
        out.update(events=trace.n_events, sha256=trace.sha256)
    elif mode == "arrow":
        out.update(events=pj.read_json(path).num_rows - 1)  # (the header is a row)
    else:
        gc.disable()
        with open_trace(path) as fh:
            out.update(events=decode_only(fh, orjson.loads if mode == "orjson" else None))
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    out.update(wall=time.perf_counter() - t0, cpu=cpu, rss_mb=r1.ru_maxrss / 1024)
    print(json.dumps(out))


def load_compiled() -> float:
    """Load the bulk parser's compiled functions (from the numba cache) by parsing a tiny
    trace; the seconds it took."""
    import tempfile

    from memlens.trace.bulk import parse as fast_parse

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        tiny = Path(tmp) / "tiny.jsonl"
        tiny.write_bytes(b'{"event":"write","id":"a","tokens":1,"type":"user_input","meta":{}}'
                         b'\n{"event":"request","id":"r","needs":["a"],"meta":{"k":1}}\n')  # fmt: skip
        fast_parse.parse_fast(tiny)
    return time.perf_counter() - t0


def decode_only(fh, loads) -> int:
    """Events decoded by ``loads`` (orjson's, line by line) or, if None, by msgspec into the bulk
    parser's typed events (a block at a time), header excluded: a floor for the decoding."""
    from memlens.trace.bulk.parse import _DECODER

    fh.readline()  # the header
    n, tail = 0, b""
    while block := fh.read(1 << 20):
        cut = block.rfind(b"\n")
        if cut < 0:
            tail += block
            continue
        text, tail = tail + block[:cut], block[cut + 1 :]
        n += len(list(map(loads, text.split(b"\n")))) if loads else len(_DECODER.decode_lines(text))
    return n + bool(tail.strip())


def measure(mode: str, path: Path, repeat: int) -> dict:
    """The best of ``repeat`` fresh-process runs (by CPU time); ``bulk-cold`` once, with an
    empty numba cache (``NUMBA_CACHE_DIR``: the repository's own cache is left alone)."""
    import tempfile

    runs = []
    for _ in range(1 if mode == "bulk-cold" else repeat):
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "NUMBA_CACHE_DIR": cache} if mode == "bulk-cold" else None
            proc = subprocess.run([sys.executable, __file__, "--child", mode, str(path)],
                                  capture_output=True, text=True, check=True, env=env)  # fmt: skip
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return min(runs, key=lambda r: r["cpu"])


def make_traces(events: int) -> tuple[Path, Path]:
    gz = Path(f"/tmp/agent{events}.jsonl.gz")
    plain = gz.with_suffix("")
    if not gz.exists():
        per = events // 4
        subprocess.run([MEMLENS, "data", "generate", "archetype=agent", "streams=4",
                        f"events_per_stream={per}", f"out={gz}"], check=True)  # fmt: skip
    if not plain.exists():
        with gzip.open(gz, "rb") as src, open(plain, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    return plain, gz


def table(results: dict) -> list[str]:
    lines = ["| file | path | events | wall s | events/s (wall) | CPU s | events/s (CPU) "
             "| peak RSS MB | numba load s (apart) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for (name, mode), r in results.items():
        numba = f"{r['numba']:.2f}" if "numba" in r else ""
        lines.append(f"| {name} | {mode} | {r['events']:,} | {r['wall']:.2f} "
                     f"| {r['events'] / r['wall']:,.0f} | {r['cpu']:.2f} "
                     f"| {r['events'] / r['cpu']:,.0f} | {r['rss_mb']:,.0f} | {numba} |")  # fmt: skip
    return lines


def summary(results: dict) -> list[str]:
    """The bulk parser against the others, in CPU time (the wall time of a shared machine
    says more about the other processes than about the parser)."""
    lines = []
    for name in dict.fromkeys(name for name, _ in results):
        cpu = {mode: results[(name, mode)]["cpu"] for mode in MODES}
        bulk = results[(name, "bulk")]
        lines.append(f"* `{name}`: `bulk` takes {bulk['wall']:.2f} s wall "
                     f"({bulk['events'] / bulk['wall']:,.0f} events/s) and {cpu['bulk']:.2f} s "
                     f"of CPU; `exact` takes {cpu['exact'] / cpu['bulk']:.1f}x that CPU, "
                     f"`bulk-msgspec` {cpu['bulk-msgspec'] / cpu['bulk']:.1f}x, `bulk-orjson` "
                     f"{cpu['bulk-orjson'] / cpu['bulk']:.1f}x.")  # fmt: skip
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "parse.md"))
    ap.add_argument("--child", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(*args.child)
    load_before = os.getloadavg()[0]
    results: dict = {}
    for path in make_traces(args.events):
        for mode in MODES:
            results[(path.name, mode)] = r = measure(mode, path, args.repeat)
            print(path.name, mode, r, flush=True)
        exact = results[(path.name, "exact")]
        for mode in BULK:
            bulk = results[(path.name, mode)]
            if exact["sha256"] != bulk["sha256"] or exact["events"] != bulk["events"]:
                raise SystemExit(f"{path.name}: the {mode} trace differs from the exact one")
    command = "benchmarks/bench_parse.py" + (
        f" --events {args.events}" if args.events != 1_000_000 else "")  # fmt: skip
    text = [
        "# First load of a trace (no cache): exact vs bulk parser",
        "",
        f"`.venv/bin/python {command} --repeat {args.repeat}` (best of {args.repeat} fresh "
        f"processes by CPU time; {os.cpu_count()} cores, load average {load_before:.1f} "
        f"at the start and {os.getloadavg()[0]:.1f} at the end: the machine was shared, so "
        "wall times include time other processes held the cores; CPU time does not).",
        "",
        f"Trace: `memlens data generate archetype=agent streams=4 "
        f"events_per_stream={args.events // 4}` ({args.events:,} events; header excluded from "
        "the counts).  `exact` = `load_trace_exact` (the line-by-line parser), `bulk` = "
        "`load_trace` (`memlens.trace.bulk.parse`: the compiled scanner `memlens.trace.bulk.scan` reads "
        "every block; same hash checked; numba cache warm, the compiled functions loaded "
        "before the clock like the imports, that loading's time in a fresh process given "
        "apart), `bulk-cold` = the same, once, with an empty numba cache (the first load "
        "ever: compiling included), `bulk-msgspec` = the scanner switched off (msgspec typed "
        "decoding of whole blocks: the bulk parser before), `bulk-orjson` = the typed "
        "decoding switched off too, every block decoded line by line by orjson, `arrow` / "
        "`orjson` / `msgspec` = decoding only, no range checks, no columns, no id resolution "
        "(candidate floors).",
        "",
        *table(results),
        "",
        *summary(results),
        "",
    ]
    Path(args.out).write_text("\n".join(text))
    print("\n".join(text))


if __name__ == "__main__":
    main()
