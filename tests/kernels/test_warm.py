"""Compile once (memlens.kernels.warm): the announcement, a line per stage off a terminal, stamps
that skip a compiled stage and follow its sources, a failing stage that does not fail the run,
the stages a run needs, and one kernel cache shared by every process."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import fresh_python
from memlens.policies.lru import LRU
from memlens.policies.oracle import Oracle
from memlens.policies.rule import RuleScorer

from memlens.kernels import warm


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty kernel cache for the stamps (no numba involved: the stages are fakes)."""
    monkeypatch.setenv("MEMLENS_KERNEL_CACHE", str(tmp_path / "kernels"))
    monkeypatch.setattr(warm, "COMPILE_S", {})
    return tmp_path / "kernels"


def fake(label: str, calls: list, fail: bool = False) -> warm.Stage:
    def run():
        calls.append(label)
        if fail:
            raise RuntimeError("no compiler today")

    return warm.Stage(label, ("kernels/queues.py",), run)


def test_announces_compiles_each_stage_once_and_stamps_it(cache):
    calls, out = [], io.StringIO()
    done = warm.warm([fake("rule", calls), fake("lru", calls)], stream=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == f"compiling kernels for rule, lru: first run only (cached in {cache})"
    assert lines[1].startswith("  [1/2] rule ...") and lines[1].endswith(" s")
    assert lines[2].startswith("  [2/2] lru ...") and lines[3].startswith("compiled 2 kernel")
    assert calls == ["rule", "lru"] and set(done) == {"rule", "lru"}
    assert warm.compile_seconds(["rule"]) == done["rule"] >= 0
    assert len(list((cache / warm.STAMPS).iterdir())) == 2
    # the same process again: nothing to do, nothing said
    again = io.StringIO()
    assert warm.warm([fake("rule", calls), fake("lru", calls)], stream=again) == {}
    assert again.getvalue() == "" and calls == ["rule", "lru"]


def test_a_new_process_finds_the_stamps(cache, monkeypatch):
    calls = []
    warm.warm([fake("rule", calls)], stream=io.StringIO())
    monkeypatch.setattr(warm, "COMPILE_S", {})  # as in a fresh process
    out = io.StringIO()
    assert warm.warm([fake("rule", calls), fake("lfu", calls)], stream=out) == {
        "lfu": pytest.approx(0, abs=1)
    }
    assert calls == ["rule", "lfu"]
    assert out.getvalue().startswith("compiling kernels for lfu: first run only")


def test_a_changed_source_invalidates_the_stamp(cache, tmp_path, monkeypatch):
    package = tmp_path / "pkg"
    (package / "kernels").mkdir(parents=True)
    src = package / "kernels" / "queues.py"
    src.write_text("x = 1\n")
    monkeypatch.setattr(warm, "PACKAGE", package)
    stage = fake("lru", [])
    before = warm.stamp(stage)
    src.write_text("x = 22\n")  # another size (and time): numba recompiles it, so do we
    assert warm.stamp(stage) != before


def test_a_stage_that_fails_is_reported_and_left_unstamped(cache):
    calls, out = [], io.StringIO()
    warm.warm([fake("memgpt", calls, fail=True), fake("lfu", calls)], stream=out)
    text = out.getvalue()
    assert "not warmed (RuntimeError: no compiler today): it compiles when first used" in text
    assert calls == ["memgpt", "lfu"]  # the next stage still ran
    stamps = [p.name for p in (cache / warm.STAMPS).iterdir()]
    assert len(stamps) == 1 and stamps[0].startswith("lfu-")


def test_on_a_terminal_one_rewritten_line(cache):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    out = Tty()
    warm.warm([fake("rule", []), fake("lru", [])], stream=out)
    text = out.getvalue()
    assert "\r\033[K  [....................] 1/2 rule" in text
    assert "\r\033[K  [##########..........] 2/2 lru" in text


def test_the_stages_a_run_needs(tmp_path, monkeypatch):
    from memlens.trace.bulk import parse

    small = tmp_path / "small.jsonl"
    small.write_text("{}\n")
    stages = warm.stages_for([LRU(), RuleScorer(), LRU(), Oracle()], demand_fetch=False,
                             seed=0, oracle=True, traces=[str(small)])  # fmt: skip
    assert [s.label for s in stages] == ["lru", "rule", "oracle", "content features",  # oracle:
                                         "intervals"]  # once  # fmt: skip
    assert [s.label for s in warm.stages_for([LRU()], demand_fetch=False, seed=0, oracle=False,
                                             tiers=True)] == ["lru", "tiers", "event log values",
                                                              "content features", "intervals"]  # fmt: skip
    monkeypatch.setattr(parse, "SCAN_MIN_BYTES", 2)  # a trace the compiled scanner reads
    labels = [s.label for s in warm.stages_for([], demand_fetch=False, seed=0, oracle=False,
                                               traces=[str(small)])]  # fmt: skip
    assert labels == ["trace reader", "content features", "intervals"]


def test_every_process_shares_one_kernel_cache(tmp_path):
    """The session warm-up (tests/conftest.py) compiled LRU's kernel: a new process, finding
    the folder through the inherited NUMBA_CACHE_DIR, loads it and compiles nothing."""
    code = (
        "import memlens, json, os\n"
        "from memlens.kernels import queues\n"
        "from memlens.kernels.warm import tiny_trace\n"
        "from memlens.policies.lru import LRU\n"
        "from memlens.simulator import simulate\n"
        "r = simulate(tiny_trace(), LRU(), 64)\n"
        "s = queues._replay.stats\n"
        "print(json.dumps({'engine': r.engine, 'misses': sum(s.cache_misses.values()),"
        " 'hits': sum(s.cache_hits.values()), 'dir': os.environ['NUMBA_CACHE_DIR']}))\n"
    )
    env = {**os.environ, "MEMLENS_CACHE": str(tmp_path / "elsewhere")}  # kernels do not move
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          check=True)  # fmt: skip
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["engine"] == "fast" and got["misses"] == 0 and got["hits"] >= 1
    assert Path(got["dir"]) == Path(os.environ["NUMBA_CACHE_DIR"])


def _simulate(small_trace, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memlens", "simulate", f"trace={small_trace}",
                           "policy=lru", "oracle.enabled=false", "mlflow.enabled=false",
                           f"hydra.run.dir={out}"], capture_output=True, text=True, check=True)  # fmt: skip


@pytest.mark.slow  # a simulate in a fresh process that compiles a stage: 8 s
def test_simulate_announces_a_stage_it_compiles_and_times_it(tmp_path, small_trace):
    """Off a terminal: the announcement and a line per stage on stderr, the seconds in
    metrics.json's timing; the next run says nothing and spent nothing."""
    warm.stamp(warm.kernel_stage(LRU(), False, 0)).unlink(missing_ok=True)
    first = _simulate(small_trace, tmp_path / "a")
    lines = first.stderr.splitlines()
    assert lines[0].startswith("compiling kernels for lru") and "first run only" in lines[0]
    assert any(line.startswith("  [1/") and line.endswith(" s") for line in lines)
    timing = json.loads((tmp_path / "a" / "metrics.json").read_text())["timing"]
    assert timing["compile_s"] > 0
    second = _simulate(small_trace, tmp_path / "b")
    assert "compiling kernels" not in second.stderr
    assert json.loads((tmp_path / "b" / "metrics.json").read_text())["timing"]["compile_s"] == 0


def test_cache_warm_takes_no_arguments():
    proc = subprocess.run([sys.executable, "-m", "memlens", "cache", "warm", "now"],
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 2 and proc.stderr.startswith("error: cache warm takes no arguments")


def test_a_stage_another_process_holds_is_taken_last_and_not_compiled_twice(cache):
    """Another process compiling ``rule`` (its lock held here): this one compiles ``lru``
    first, then waits for ``rule``, finds it stamped and does not run it."""
    import fcntl
    import threading
    import time

    calls, out = [], io.StringIO()
    rule, lru = fake("rule", calls), fake("lru", calls)
    lock = cache / warm.LOCKS / warm.stamp(rule).name
    lock.parent.mkdir(parents=True)
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        worker = threading.Thread(target=warm.warm, args=([rule, lru],), kwargs={"stream": out})
        worker.start()
        deadline = time.monotonic() + 60
        while calls != ["lru"] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert calls == ["lru"]  # the free stage first
        warm.stamp(rule).parent.mkdir(parents=True, exist_ok=True)
        warm.stamp(rule).touch()  # the other process finished
        fcntl.flock(held, fcntl.LOCK_UN)
    worker.join()
    assert calls == ["lru"]  # rule was never compiled here
    text = out.getvalue()
    assert text.index("[2/2] lru") < text.index("[1/2] rule")


def _pid_writer(label: str, folder: Path) -> warm.Stage:
    def run():
        (folder / label).write_text(str(os.getpid()))

    return warm.Stage(label, ("kernels/queues.py",), run)


def test_stages_compile_side_by_side_in_other_processes(cache, tmp_path):
    """``jobs=2``: each stage runs in a worker process (its own numba, the shared cache), one
    line per stage as it finishes, every stage stamped and timed in this process."""
    out = io.StringIO()
    stages = [_pid_writer(name, tmp_path) for name in ("rule", "lru", "lfu")]
    done = warm.warm(stages, stream=out, jobs=2)
    assert set(done) == {"rule", "lru", "lfu"}
    pids = {int((tmp_path / name).read_text()) for name in done}
    assert os.getpid() not in pids
    lines = out.getvalue().splitlines()
    assert sorted(ln.split("] ")[1].split(" ...")[0] for ln in lines[1:4]) == ["lfu", "lru", "rule"]
    assert lines[-1].startswith("compiled 3 kernel stage(s) on 2 processes")
    assert len(list((cache / warm.STAMPS).iterdir())) == 3
    assert warm.compile_seconds() == pytest.approx(sum(done.values()))


def test_the_text_policies_stages_follow_their_compiled_words():
    """Generative Agents' and the learned scorer's preparation runs compiled code in
    ``memlens/trace/words.py`` (words, MurmurHash3, row norms): a change there compiles their
    stages again before a sweep fans out, not inside its workers."""
    from memlens.policies.generative_agents import GenerativeAgents
    from memlens.policies.learned import LearnedScorer

    for policy in (GenerativeAgents(), LearnedScorer()):
        assert "trace/words.py" in warm.kernel_stage(policy, False, 0).sources
    assert "trace/words.py" not in warm.kernel_stage(LRU(), False, 0).sources


def test_the_intervals_stage_compiles_what_the_intervals_run(tmp_path):
    """After the ``intervals`` stage, an interval adds no specialisation of the replicate
    sums: the stage compiled the one the intervals use (a read-only count matrix), not only a
    writable one (which left a first run's jobs to compile it, unannounced)."""
    code = (
        "import numpy as np\n"
        "from memlens.kernels.warm import intervals_stage\n"
        "from memlens.kernels.bootstrap import replicate_sums as k\n"
        "from memlens.analyze.stats import interval, StatsConfig\n"
        "intervals_stage().run()\n"
        "before = len(k.signatures)\n"
        "interval((np.arange(30.0), np.ones(30)), StatsConfig())\n"
        "print(before, len(k.signatures))\n"
    )
    before, after = fresh_python(code).split()
    assert before == after == "2"


def test_the_oracle_stage_compiles_both_of_the_oracles_paths(tmp_path):
    """After the ``oracle`` stage, solving a generated many-stream trace both ways (the exact
    dynamic program, and the LP path it leaves wider streams to) compiles nothing more in any
    of the oracle's kernels: a first run announces all of its compiling."""
    code = (
        "import importlib, pkgutil, numba\n"
        "import memlens.oracle as pkg\n"
        "from memlens.kernels.warm import oracle_stage\n"
        "from memlens.datasets.archetypes import generate\n"
        "from memlens.trace.io import trace_from_events\n"
        "from memlens.oracle.solve import OracleSettings, clear_memo, solve\n"
        "oracle_stage(False).run()\n"
        "mods = [importlib.import_module('memlens.oracle.' + m.name)\n"
        "        for m in pkgutil.iter_modules(pkg.__path__)]\n"
        "mods.append(importlib.import_module('memlens.kernels.oracle'))\n"
        "jit = {f'{m.__name__}.{n}': f for m in mods for n, f in vars(m).items()\n"
        "       if isinstance(f, numba.core.registry.CPUDispatcher)}\n"
        "before = {n: len(f.signatures) for n, f in jit.items()}\n"
        "tr = trace_from_events(generate('agent', streams=12, events_per_stream=60, seed=5))\n"
        "for states in (OracleSettings.exact_max_states, 0):\n"
        "    for budget in (256, 1024):\n"
        "        solve(tr, budget, False, OracleSettings(cache=False, exact_max_states=states))\n"
        "        clear_memo()\n"
        "grown = sorted(n for n, f in jit.items() if len(f.signatures) > before[n])\n"
        "print(len(jit), sum(v > 0 for v in before.values()), grown)\n"
    )
    n_jit, compiled, grown = fresh_python(code).strip().split(" ", 2)
    assert int(n_jit) >= 5 and int(compiled) >= 5
    assert grown == "[]"
