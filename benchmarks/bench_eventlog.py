"""Cost of the event log: a run with ``events.enabled=true`` against the same run without it.

    python benchmarks/bench_eventlog.py                 # 1,000,000 events (a few minutes)
    python benchmarks/bench_eventlog.py --events 100000

For each policy, on one generated trace (``generate_simple``, 8 streams):

* ``replay``: the replay alone (``memlens.runs.pipeline.replay``, the value probe attached when the
  log is on), best of ``--repeats``;
* ``log``: building ``events.parquet`` from the finished replay and writing it;
* ``report``: writing ``report.html`` from it (DuckDB queries);
* ``run``: the whole simulate pipeline (replay, analyzers, every file of the run folder) with
  the log on / off / on without values (``events.values=false``);
* ``values``: the scoring policies' values pass after their kernel (``KernelValues``), alone.

The issue's bar: full logging costs under 2x the replay time without it, i.e.
``(replay with probe + log) / replay without`` < 2.  Off, on and the log are timed in turn in
each repeat (a shared machine slows them alike); the table gives the ratio of the best times,
the range of the per-repeat ratios and the same ratio in CPU seconds.  Results go to
``benchmarks/results/eventlog.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import tempfile
import time
from pathlib import Path

from memlens._util.atomic import write_text
from memlens.analyze.eventlog import KernelValues, write_event_log
from memlens.config.compose import compose_config
from memlens.config.schema import resolve
from memlens.present.static_report import write_static_report
from memlens.runs.pipeline import analyze, replay
from memlens.runs.writers import write_run
from memlens.trace.generate import generate_simple
from memlens.trace.io import trace_from_events

RESULTS = Path(__file__).parent / "results"


def best(fn, repeats: int):
    out, wall = None, float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        wall = min(wall, time.perf_counter() - t0)
    return wall, out


def timed(fn):
    """(wall seconds, CPU seconds of this process, result) of one call."""
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - w0, time.process_time() - c0, out


def measure(trace, policy: str, budget: int, repeats: int, tmp: Path) -> dict:
    cfg = compose_config("simulate", [f"policy={policy}", f"budget={budget}",
                                      "mlflow.enabled=false", "progress=false"])  # fmt: skip
    on = resolve(cfg)
    off = dataclasses.replace(on, events=dataclasses.replace(on.events, enabled=False))
    ref = dataclasses.replace(off, engine="reference")
    path = tmp / "events.parquet"
    rep: dict[str, list[float]] = {k: [] for k in ("off", "on", "log", "ref", "off_cpu", "on_cpu",
                                                   "log_cpu")}  # fmt: skip
    novalues = dataclasses.replace(on, events=dataclasses.replace(on.events, values=False))
    done = replay(off, trace, True)  # warm-up, untimed: compiles the kernels of the fast engine
    rep["values"] = []
    for _ in range(repeats):  # interleaved: a busy machine slows every side alike
        w, c, _ = timed(lambda: replay(off, trace, True))
        rep["off"].append(w)
        rep["off_cpu"].append(c)
        w, c, done = timed(lambda: replay(on, trace, True))
        rep["on"].append(w)
        rep["on_cpu"].append(c)
        _ = done.tiers  # the tier log: built for the analyzers and moves.parquet anyway
        probe = getattr(done.policy, "_memlens_value_probe", None)
        if isinstance(probe, KernelValues):  # the values pass after the kernel, alone
            probe.bind(done.trace, done.result)
            rep["values"].append(timed(probe.columns)[0])
        w, c, _ = timed(lambda d=done: write_event_log(path, d))
        rep["log"].append(w)
        rep["log_cpu"].append(c)
        if done.result.engine != "reference":
            rep["ref"].append(timed(lambda: replay(ref, trace, True))[0])
    t_off, t_on, t_log = min(rep["off"]), min(rep["on"]), min(rep["log"])
    t_ref = min(rep["ref"]) if rep["ref"] else t_off
    ratios = [(a + b) / c for a, b, c in zip(rep["on"], rep["log"], rep["off"])]
    cpu = min(rep["on_cpu"]) + min(rep["log_cpu"])
    report = analyze(done)
    t_rep, _ = best(lambda: write_static_report(tmp / "report.html", path, report.to_dict()), 1)
    runs = {}
    for name, settings in (("off", off), ("on", on), ("novalues", novalues)):

        def whole(settings=settings, name=name):
            d = replay(settings, trace, True)
            write_run(tmp / f"run-{name}", d, analyze(d), "")

        runs[name], _ = best(whole, 1)
    import pyarrow.parquet as pq

    rows = pq.ParquetFile(path).metadata.num_rows
    return {"policy": policy, "engine": done.result.engine, "replay_off": t_off,
            "replay_on": t_on, "log": t_log, "report": t_rep, "rows": rows,
            "ratio": (t_on + t_log) / t_off, "spread": (min(ratios), max(ratios)),
            "ratio_cpu": cpu / min(rep["off_cpu"]), "replay_ref": t_ref,
            "ratio_ref": (t_on + t_log) / t_ref, "run_off": runs["off"], "run_on": runs["on"],
            "run_novalues": runs["novalues"], "values": min(rep["values"], default=0.0),
            "ratio_values": runs["on"] / runs["novalues"],
            "mb": path.stat().st_size / 1e6}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--policies", default="lru,window,rule,memorybank,memoryos_heat")
    ap.add_argument("--budget", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(RESULTS / "eventlog.md"))
    args = ap.parse_args()
    streams = 8
    trace = trace_from_events(list(generate_simple(seed=0, streams=streams,
                                                   events_per_stream=args.events // streams)),
                              source="bench")  # fmt: skip
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for policy in args.policies.split(","):
            r = measure(trace, policy, args.budget, args.repeats, Path(tmp))
            rows.append(r)
            print(f"{policy:<12} {r['engine']:<9} replay off {r['replay_off']:7.2f} s  "
                  f"on {r['replay_on']:7.2f} s  log {r['log']:6.2f} s ({r['rows']:,} rows, "
                  f"{r['mb']:.1f} MB)  report {r['report']:5.2f} s  ratio {r['ratio']:.2f}x  "
                  f"(repeats {r['spread'][0]:.2f}-{r['spread'][1]:.2f}x, CPU {r['ratio_cpu']:.2f}x)  "
                  f"vs reference engine {r['ratio_ref']:.2f}x  "
                  f"run off {r['run_off']:.2f} s / on {r['run_on']:.2f} s / values off "
                  f"{r['run_novalues']:.2f} s (values {r['ratio_values']:.2f}x, pass "
                  f"{r['values']:.3f} s)", flush=True)  # fmt: skip
    lines = [
        "# Event log cost",
        "",
        f"`python benchmarks/bench_eventlog.py --events {args.events} --repeats {args.repeats} "
        f"--policies {args.policies}` on "
        f"{platform.processor() or platform.machine()}, Python {platform.python_version()}; "
        f"trace `generate_simple(seed=0, streams={streams})`, {trace.n_events:,} events, "
        f"budget {args.budget}.  Times in seconds (best of {args.repeats}).",
        "",
        "ratio = (replay with the log on + building and writing events.parquet) / replay "
        "with the log off on the same engine; the issue's bar is < 2.  The compiled kernels "
        "(window, LRU) replay so fast that no log written after them can stay within 2x of "
        "them, so their log is also set against the reference engine's replay (the engine "
        "the bar was stated for: ratio vs reference).  Whole run = replay, analyzers and every "
        "file of the run folder (report.html included when the log is on).  Off, on and the log "
        "are measured in turn in each repeat; ratio uses the best of each, ratio range gives "
        "the ratio of each repeat (the machine is shared: that is the noise), CPU ratio the "
        "same as ratio in CPU seconds of the process (less sensitive to other processes).  The "
        "tier log is built before the log is timed: the analyzers and moves.parquet need it "
        "with the log off too.",
        "",
        "Values (issue 31): the scoring policies replay on their kernels with the full log; "
        "their values come from one compiled pass after the replay (`memlens.kernels.values`, "
        "values pass = that pass alone).  values ratio = whole run with the full log / whole "
        "run with `events.values=false` (the log without values): the issue's bar is <= 1.5x.",
        "",
        "| policy | engine | replay off | replay on | events.parquet | rows | MB | report.html "
        "| ratio | ratio range | CPU ratio | reference replay | ratio vs reference "
        "| whole run off | whole run on | whole run values off | values pass | values ratio |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['policy']} | {r['engine']} | {r['replay_off']:.2f} | "
                     f"{r['replay_on']:.2f} | {r['log']:.2f} | {r['rows']:,} | {r['mb']:.1f} | "
                     f"{r['report']:.2f} | {r['ratio']:.2f}x | "
                     f"{r['spread'][0]:.2f}-{r['spread'][1]:.2f}x | {r['ratio_cpu']:.2f}x | "
                     f"{r['replay_ref']:.2f} | "
                     f"{r['ratio_ref']:.2f}x | {r['run_off']:.2f} | "
                     f"{r['run_on']:.2f} | {r['run_novalues']:.2f} | {r['values']:.3f} | "
                     f"{r['ratio_values']:.2f}x |")  # fmt: skip
    write_text(args.out, "\n".join(lines) + "\n")
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
