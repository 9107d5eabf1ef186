"""What a replay command checks before it starts, beyond the settings' own ranges.

The typed settings (``memlens.config.schema``) check each value on its own.  What is left needs
the settings together or the file system, and is checked here by ``memlens.cli.replay``'
``check_*`` functions, before Hydra creates the run folder, MLflow opens a run or a cache entry
is written:

* the engine against the policies: ``engine=fast`` needs a compiled kernel for every policy
  it replays (and no retrieval running inside the replay);
* every file a setting names (``memlens.config.paths``): a trace, an embeddings corpus, must be
  a readable regular file (a directory, a FIFO or ``/dev/zero`` would hang or fail mid-run); a
  cache directory must not be a file; an embedder's package must be installed;
* the traces themselves, parsed and validated (:func:`trace_loader`): returned as a deferred
  step, run once every job's settings have passed, so a bad setting in one job of a sweep never
  costs a trace parse (and the parsed trace is the one the run then uses).
"""

from __future__ import annotations

import importlib.util
import os
import zlib
from collections.abc import Callable

from memlens.config.paths import check_cache_dir, check_input_file
from memlens.config.schema import CommonConfig
from memlens.config.store import SettingsError, policy_targets
from memlens.policy import COMPILED_KERNELS, kernel_of


def policies_with_kernels() -> list[str]:
    """Registered policies whose class has a compiled kernel (``engine=fast`` can run them)."""
    from hydra.utils import get_class

    return [n for n, target in policy_targets().items() if get_class(target) in COMPILED_KERNELS]


def check_engine(settings: CommonConfig, policies: dict[str, object]) -> None:
    """``engine=fast`` with policies (name -> instance) it can replay, and no live retrieval."""
    if settings.engine != "fast":
        return
    if settings.retrieval.enabled and settings.retrieval.promote:
        raise SettingsError("engine=fast cannot run retrieval.promote=true (retrieval must run "
                            "inside the replay): use engine=auto or engine=reference")  # fmt: skip
    slow = [name for name, policy in policies.items() if kernel_of(policy) is None]
    if slow:
        name = slow[0]
        what = (": its compiled kernel does not cover these settings"
                if type(policies[name]) in COMPILED_KERNELS else " has no compiled kernel")  # fmt: skip
        raise SettingsError(
            f"engine=fast: policy {name}{what} (policies with one: "
            f"{', '.join(policies_with_kernels())}); use engine=auto or engine=reference"
        )


def check_files(settings: CommonConfig, traces: list[str], policies: list = ()) -> None:
    """Every file and directory the settings name, without reading any of them; and the
    sentence-transformers package when the retrieval tiers or one of ``policies``
    (``reads_embeddings``: generative_agents relevance=embeddings) need embeddings.kind=sentence."""
    for path in traces:
        check_input_file("trace", path)
    emb = settings.embeddings
    if emb.corpus is not None:
        check_input_file("embeddings.corpus", emb.corpus)
    check_cache_dir("embeddings.cache_dir", emb.cache_dir)
    check_cache_dir("oracle.cache_dir", settings.oracle.cache_dir)
    readers = [getattr(p, "name", type(p).__name__) for p in policies
               if getattr(p, "reads_embeddings", False)]  # fmt: skip
    needs = (settings.retrieval.enabled or readers) and emb.kind == "sentence"
    if needs and importlib.util.find_spec("sentence_transformers") is None:
        who = f" (for policy {readers[0]} relevance=embeddings)" if readers else ""
        raise SettingsError(f"embeddings.kind=sentence{who} needs the sentence-transformers "
                            "package, which is not installed (embeddings.kind=tfidf needs "
                            "nothing)")  # fmt: skip


def trace_loader(settings: CommonConfig, traces: list[str], policies: list = (),
                 tiers: bool = False, whole: bool = True) -> Callable[[], None]:  # fmt: skip
    """The deferred step: compile the kernels the run needs (``memlens.kernels.warm``: the
    kernel of each of ``policies``, the oracle's, the tier replay with ``tiers``, the bulk
    scanner for a large trace; announced, and only those not compiled before), then parse and
    validate every trace (a ``TraceError`` names file, line and field).  Both happen here, in
    the main process, before any worker starts; ``memlens.runs.pipeline.load_trace`` memoises,
    so the run reuses the parse.  Without ``whole`` (a compare whose workers replay the
    traces and whose oracle is off), a trace with a cache entry is checked from the entry's
    header (``memlens.runs.pipeline.trace_facts``): the workers read its arrays."""
    from memlens.runs.pipeline import load_trace, trace_facts
    from memlens.trace.io import TraceError

    def load() -> None:
        warm_kernels(settings, list(policies), traces, tiers)
        for path in dict.fromkeys(traces):
            try:
                load_trace(settings, path) if whole else trace_facts(settings, path)
            except TraceError:
                raise
            except (ValueError, TypeError, OverflowError, EOFError, zlib.error) as exc:
                # what the parser did not turn into a TraceError still names the file
                raise SettingsError(f"trace={path}: cannot be read: {exc}") from None

    return load


def warm_kernels(settings: CommonConfig, policies: list, traces: list[str] = (),
                 tiers: bool = False) -> dict[str, float]:  # fmt: skip
    """Compile what a run of ``policies`` needs that is not compiled yet (before fan-out)."""
    from memlens.kernels.warm import stages_for, warm

    stages = stages_for(policies, demand_fetch=settings.demand_fetch, seed=settings.seed,
                        oracle=settings.oracle.enabled, traces=list(traces), tiers=tiers)  # fmt: skip
    n_jobs = getattr(settings, "n_jobs", -1)  # compare's workers; simulate: every core
    jobs = (os.cpu_count() or 1) if n_jobs == -1 else n_jobs
    return warm(stages, settings.progress, jobs=jobs)
