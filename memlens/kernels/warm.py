"""Compile the kernels a run needs once, before any work fans out, and say so while it happens.

Numba compiles a kernel the first time it is called and caches it on disk
(``memlens._util.kernelcache``).  Left to the work itself, a first ``memlens compare`` on two
cores had both sweep workers compile every kernel for themselves, for minutes, with no word
printed.  So a command first warms the *stages* its jobs need (:func:`stages_for`): the
replay kernel of each policy that has one, the oracle's compiled parts when the oracle is on,
the tier replay and the event log's values pass for ``simulate``, the bulk trace scanner for a trace large enough to use it.
Each stage is warmed by calling the real code on a tiny generated trace (a kernel's argument
types do not depend on the trace's size, with one exception a kernel module names in its
``warm_variants``: Generative Agents' int32 terms, for 32,767 request terms or more), in the main process, before the sweep or the oracle
pre-solve starts its workers; the workers then load the kernels from numba's cache.

A stage warmed once leaves a stamp in the kernel cache, keyed by the stage's source files
(path, size, modification time, as numba keys its own entries), the package's folder, numba's
and Python's versions and the machine: a later command skips the stage at once and says nothing.  Only a stage
without its stamp is announced, within a moment of the command starting::

    compiling kernels for rule, lru, oracle: first run only (cached in ~/.cache/memlens/kernels)
      [1/3] rule ... 41.2 s

with a progress bar on a terminal and a line per stage elsewhere (logs, CI).  The seconds go
into the run's timing section (``compile_s``: :func:`compile_seconds`).  A stage that fails to
warm is reported in one line and left to compile when first used: warming is an optimisation,
never a reason for a run to fail.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from memlens._util.kernelcache import kernel_cache_dir

PACKAGE = Path(__file__).resolve().parents[1]  # the memlens package
STAMPS = "memlens-stamps"
LOCKS = "memlens-locks"

#: Seconds this process spent warming each stage (label -> seconds), for the timing section.
COMPILE_S: dict[str, float] = {}


@dataclass(frozen=True)
class Stage:
    """One group of compiled functions: warmed together, stamped together."""

    label: str  # what the announcement calls it: a policy's name, "oracle", "trace reader"
    sources: tuple[str, ...]  # folders/files (relative to the package) the functions live in
    run: Callable[[], object]  # calls the compiled code on a tiny input


def tiny_trace():
    """Two short streams of the ``simple`` generator (writes, requests, pins): every event
    kind a kernel handles, in a trace that replays in microseconds."""
    from memlens.trace.generate import generate_simple
    from memlens.trace.io import trace_from_events

    events = generate_simple(seed=0, streams=2, events_per_stream=40)
    return trace_from_events(events, source="<kernel warm-up>")


def _source_key(sources: tuple[str, ...]) -> str:
    import numba

    # the package's own path too: numba keys its entries by the source's absolute path, so two
    # checkouts with the same files and times (git archive sets them) share no entry
    h = hashlib.sha256(f"{numba.__version__}\0{sys.version}\0{platform.machine()}\0"
                       f"{PACKAGE}".encode())  # fmt: skip
    for rel in sources:
        root = PACKAGE / rel
        files = sorted(root.rglob("*.py")) if root.is_dir() else [root]
        for f in files:
            st = f.stat()
            h.update(f"{f.relative_to(PACKAGE)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def stamp(stage: Stage) -> Path:
    """The file saying ``stage`` was compiled for its current sources on this machine."""
    slug = "".join(c if c.isalnum() else "-" for c in stage.label)
    return kernel_cache_dir() / STAMPS / f"{slug}-{_source_key(stage.sources)}"


# ------------------------------------------------------------------------- the stages
#: The kernels whose preparation reads the items' content features (``static_value``,
#: ``content_features``): their stage compiles the features' passes too, on the tiny trace, so
#: it must be warmed again when ``memlens/trace/features.py`` changes.
READS_CONTENT_FEATURES = ("memlens.kernels.rule:", "memlens.kernels.generative_agents:",
                          "memlens.kernels.learned:")  # fmt: skip


def kernel_stage(policy, demand_fetch: bool, seed: int) -> Stage | None:
    """The replay kernel of ``policy`` (None: it has none, or the oracle's, which the oracle
    stage compiles)."""
    from memlens.policy import kernel_of

    target = kernel_of(policy)
    if target is None or target.startswith("memlens.kernels.oracle:"):
        return None

    def run() -> None:
        import importlib

        from memlens.kernels import run_kernel

        run_kernel(target, policy, tiny_trace(), 64, demand_fetch, seed)
        # argument types a tiny trace does not reach (Generative Agents' int32 terms)
        variants = getattr(importlib.import_module(target.partition(":")[0]), "warm_variants", None)
        if variants is not None:
            variants(policy)

    sources = ["kernels", "trace/model.py", "simulator.py"]
    if target.startswith("memlens.kernels.learned:"):
        sources.append("scorer")
    if target.startswith(("memlens.kernels.learned:", "memlens.kernels.generative_agents:")):
        sources.append("trace/words.py")  # their preparation's compiled words, hashes, norms
    if target.startswith(READS_CONTENT_FEATURES):
        sources.append("trace/features.py")  # the content features' compiled passes
    return Stage(getattr(policy, "name", type(policy).__name__), tuple(sources), run)


def oracle_stage(demand_fetch: bool) -> Stage:
    """The oracle's compiled parts (its walk, exact dynamic program, rounding, cuts and plan
    replay): solved twice, since the exact program takes every stream of the tiny trace that
    the LP path would otherwise compile its parts on."""

    def run() -> None:
        from memlens.oracle.solve import OracleSettings, clear_memo, solve

        for exact_max_states in (OracleSettings.exact_max_states, 0):
            settings = OracleSettings(cache=False, exact_max_states=exact_max_states)
            solve(tiny_trace(), 64, demand_fetch, settings)
            clear_memo()  # nothing of the tiny trace stays in this process

    return Stage("oracle", ("oracle", "kernels/oracle.py", "kernels/moves.py"), run)


def tiers_stage(policy) -> Stage:
    """The lower tiers' replay of the move log (``simulate``'s tier section), on a replay of
    ``policy`` (any policy: the tier replay reads only the move log)."""

    def run() -> None:
        from memlens.retrieval.tiers import replay_tiers
        from memlens.simulator import simulate

        trace = tiny_trace()
        replay_tiers(trace, simulate(trace, policy, 64, progress=False), 32)

    return Stage("tiers", ("retrieval/tiers.py",), run)


def values_stage(policy) -> Stage:
    """The event log's values pass (``memlens.kernels.values``: one function for the three
    scoring policies), after a replay of ``policy`` (any)."""

    def run() -> None:
        import numpy as np

        from memlens.kernels.values import HEAT, records
        from memlens.simulator import simulate

        trace = tiny_trace()
        result = simulate(trace, policy, 64, progress=False)
        records(HEAT, np.ones(4), trace, result, 1.0, length=np.ones(trace.n_items))

    return Stage("event log values", ("kernels/values.py",), run)


def reader_stage() -> Stage:
    """The bulk trace reader's compiled scanner (used for traces of ``SCAN_MIN_BYTES`` or more)."""

    def run() -> None:
        from memlens.trace.bulk import parse
        from memlens.trace.generate import generate_simple
        from memlens.trace.io import load_trace, write_trace

        with tempfile.TemporaryDirectory(prefix="memlens-warm-") as d:
            path = Path(d) / "tiny.jsonl"
            write_trace(path, generate_simple(seed=0, streams=2, events_per_stream=40))
            least, parse.SCAN_MIN_BYTES = parse.SCAN_MIN_BYTES, 0
            try:
                load_trace(path)
            finally:
                parse.SCAN_MIN_BYTES = least

    return Stage("trace reader", ("trace/bulk",), run)


def intervals_stage() -> Stage:
    """The bootstrap's replicate sums (``memlens.kernels.bootstrap``): every run's intervals,
    with the read-only ``uint8`` count matrix the intervals pass (``memlens.analyze.stats``: a
    specialisation of its own, which another matrix alone left to the first run's jobs to
    compile unannounced) and a writable float one."""

    def run() -> None:
        import numpy as np

        from memlens.kernels.bootstrap import replicate_sums

        replicate_sums(np.ones((2, 3)), np.ones((3, 2)))
        counts = np.ones((2, 3), np.uint8)
        counts.flags.writeable = False  # as memlens.analyze.stats.resample_counts gives it
        replicate_sums(counts, np.ones((3, 2)))

    return Stage("intervals", ("kernels/bootstrap.py", "kernels/warm.py"), run)


def features_stage() -> Stage:
    """The content features' compiled passes (``memlens.trace.features``: the shapes, the
    keywords, the distinct texts): besides the three
    policies whose stages compute them, the event log's values and request-time retrieval's
    priors read them whatever the policy, so they are compiled for every run."""

    def run() -> None:
        from memlens.trace.features import distinct_packed, text_features
        from memlens.trace.packed import PackedStrings

        text_features(["Error at app.py line 42, said Alice", "x"])
        distinct_packed(PackedStrings.from_strings(["a", "b", "a"]))

    return Stage("content features", ("trace/features.py",), run)


def scans_trace(path: str) -> bool:
    """Whether loading ``path`` runs the compiled scanner (a file large enough)."""
    from memlens.trace.bulk.parse import SCAN_MIN_BYTES

    try:
        return Path(path).stat().st_size >= SCAN_MIN_BYTES
    except OSError:
        return False


def stages_for(policies: list, *, demand_fetch: bool, seed: int, oracle: bool,
               traces: list[str] = (), tiers: bool = False) -> list[Stage]:  # fmt: skip
    """The stages a run of ``policies`` (instances) needs, in the order they run."""
    out = [reader_stage()] if any(scans_trace(t) for t in traces) else []
    for policy in policies:
        stage = kernel_stage(policy, demand_fetch, seed)
        if stage is not None and stage.label not in {s.label for s in out}:
            out.append(stage)
    if oracle:
        out.append(oracle_stage(demand_fetch))
    if tiers and policies:  # simulate: the tier replay and the event log's values
        out += [tiers_stage(policies[0]), values_stage(policies[0])]
    return [*out, features_stage(), intervals_stage()]


def stage_labels(policy, oracle: bool) -> list[str]:
    """The labels of the stages one job of ``policy`` needs (what its ``compile_s`` sums)."""
    return [getattr(policy, "name", type(policy).__name__), *(["oracle"] if oracle else [])]


# --------------------------------------------------------------------------- warming
def _display(stderr) -> bool:
    return bool(getattr(stderr, "isatty", lambda: False)())


def warm(stages: list[Stage], progress: bool | None = None, stream=None,
         jobs: int = 1) -> dict[str, float]:  # fmt: skip
    """Compile every stage without a stamp; announce it first.  Returns label -> seconds for
    the stages compiled (or waited for) here, also added to :data:`COMPILE_S`.  ``jobs`` > 1
    compiles stages side by side in that many processes (numba compiles on one core; the
    entries it writes to the shared cache are what this process then loads).

    Each stage is compiled under its own file lock, so processes warming at once (the
    pytest-xdist workers, two commands started together) compile each stage once between
    them: serially, a process takes the stages no other holds first, then waits for the
    others and finds them stamped; side by side, each worker waits for a held stage."""
    stream = stream or sys.stderr
    todo = [s for s in stages if s.label not in COMPILE_S and not stamp(s).exists()]
    if not todo:
        return {}
    names = ", ".join(s.label for s in todo)
    print(f"compiling kernels for {names}: first run only (cached in {kernel_cache_dir()})",
          file=stream, flush=True)  # fmt: skip
    if jobs > 1 and len(todo) > 1:
        return _warm_side_by_side(todo, min(jobs, len(todo)), stream)
    bar = progress if progress is not None else _display(stream)
    done: dict[str, float] = {}
    start = time.perf_counter()
    pending = list(enumerate(todo, 1))
    for blocking in (False, True):  # first the stages free to take, then wait for the rest
        later = []
        for i, stage in pending:
            with _stage_lock(stage, blocking) as held:
                if not held:
                    later.append((i, stage))
                    continue
                _begin(stream, bar, i, len(todo), stage.label, time.perf_counter() - start)
                t0 = time.perf_counter()
                problem = None if stamp(stage).exists() else _run(stage)  # else: done elsewhere
                done[stage.label] = time.perf_counter() - t0
            COMPILE_S[stage.label] = COMPILE_S.get(stage.label, 0.0) + done[stage.label]
            _end(stream, bar, done[stage.label], problem)
        pending = later
    if bar:
        stream.write("\r\033[K")
    total = sum(done.values())
    print(f"compiled {len(done)} kernel stage(s) in {total:.1f} s", file=stream, flush=True)
    return done


@contextlib.contextmanager
def _stage_lock(stage: Stage, blocking: bool) -> Iterator[bool]:
    """Hold ``stage``'s lock file (``memlens-locks/`` beside the stamps); yields whether it
    is held.  A cache folder that cannot be written gives no lock: the stage runs anyway."""
    import fcntl

    path = kernel_cache_dir() / LOCKS / stamp(stage).name
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a")  # noqa: SIM115 - closed below, after the lock is released
    except OSError:
        yield True
        return
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _timed_run(stage: Stage, folder: str) -> tuple[str, float, str | None]:
    """(label, seconds, problem) of warming one stage, in whichever process runs it; the
    kernel cache ``folder`` is the caller's (a reused worker may have started under another)."""
    from memlens._util import kernelcache

    os.environ[kernelcache.ENV] = folder
    kernelcache.configure()
    t0 = time.perf_counter()
    with _stage_lock(stage, blocking=True):  # another process compiling it: wait, then skip
        problem = None if stamp(stage).exists() else _run(stage)
    return stage.label, time.perf_counter() - t0, problem


def _warm_side_by_side(todo: list[Stage], jobs: int, stream) -> dict[str, float]:
    """:func:`warm` over ``jobs`` worker processes (joblib's loky pickles the stages' closures);
    a line per stage as each finishes, in the order they finish."""
    from joblib import Parallel, delayed

    start = time.perf_counter()
    done: dict[str, float] = {}
    runs = Parallel(n_jobs=jobs, backend="loky", return_as="generator_unordered")(
        delayed(_timed_run)(stage, str(kernel_cache_dir())) for stage in todo)  # fmt: skip
    for i, (label, seconds, problem) in enumerate(runs, 1):
        done[label] = seconds
        COMPILE_S[label] = COMPILE_S.get(label, 0.0) + seconds
        print(f"  [{i}/{len(todo)}] {label} ... {seconds:.1f} s" if problem is None else
              f"  [{i}/{len(todo)}] {label}: not warmed ({problem}): it compiles when first used",
              file=stream, flush=True)  # fmt: skip
    print(f"compiled {len(done)} kernel stage(s) on {jobs} processes in "
          f"{time.perf_counter() - start:.1f} s", file=stream, flush=True)  # fmt: skip
    return done


def _run(stage: Stage) -> str | None:
    """Warm one stage; stamp it.  Returns the problem, if warming it failed."""
    try:
        stage.run()
    except Exception as exc:  # noqa: BLE001 - the stage compiles when first used instead
        return f"{type(exc).__name__}: {exc}"
    path = stamp(stage)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    except OSError:
        pass  # a read-only cache: the next run warms again (and loads numba's entries)
    return None


def _begin(stream, bar: bool, i: int, n: int, label: str, elapsed: float) -> None:
    if bar:  # one line, rewritten: [####....] 2/5 rule (41 s)
        filled = int(20 * (i - 1) / n)
        stream.write(f"\r\033[K  [{'#' * filled}{'.' * (20 - filled)}] {i}/{n} {label} "
                     f"({elapsed:.0f} s)")  # fmt: skip
        stream.flush()
    else:  # a log: one line per stage
        print(f"  [{i}/{n}] {label} ...", end="", file=stream, flush=True)


def _end(stream, bar: bool, seconds: float, problem: str | None) -> None:
    if problem is not None:
        print(f"\n  not warmed ({problem}): it compiles when first used", file=stream, flush=True)
    elif not bar:
        print(f" {seconds:.1f} s", file=stream, flush=True)


def compile_seconds(labels=None) -> float:
    """Seconds this process spent warming ``labels`` (every stage when None)."""
    if labels is None:
        return sum(COMPILE_S.values())
    return sum(COMPILE_S.get(label, 0.0) for label in labels)
