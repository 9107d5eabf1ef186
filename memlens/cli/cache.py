"""``memlens cache``: see what the caches hold and empty them.

``memlens cache info``           per kind: entries, size, least/most recent use, orphans; the cap
``memlens cache clear [KIND]``   delete the entries and orphans of every kind, or of one kind
``memlens cache warm``           compile every bundled kernel now (``make setup`` does), so that
                                no later command compiles (``memlens.kernels.warm``)

The caches heal themselves (``memlens._util.safecache``: damaged entries are rebuilt, orphaned temp
files removed, the size capped), so these commands are for looking and for reclaiming space,
never needed for correctness.  They act on the folders under the cache root; a cache moved
elsewhere with ``oracle.cache_dir`` or ``embeddings.cache_dir`` is not listed.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

from memlens._util import safecache
from memlens._util.cachedir import KINDS, cache_dir, cache_root
from memlens._util.kernelcache import kernel_cache_dir
from memlens.analyze.table import format_table
from memlens.config.app import subcommand

USAGE = f"""usage: memlens cache info | clear [KIND] | warm

commands:
  info          per kind of cache: entries, size, least and most recent use, orphaned files
  clear [KIND]  delete the entries and orphaned files of every kind, or of KIND
                (KIND: {", ".join(KINDS)})
  warm          compile every registered policy's kernel, the oracle's, the tier replay and
                the bulk trace reader into the kernel cache (skips what is compiled already)

The cache root is $MEMLENS_CACHE (else ~/.cache/memlens).  {safecache.MAX_BYTES_ENV} caps the
total size of the entries (bytes or 512M, 2G, ...; default 2G): least recently used go first.
"""

COLUMNS = ["kind", "entries", "size", "least recent use", "most recent use", "orphans"]


def size_text(n: int) -> str:
    """``n`` bytes for people: ``0 B``, ``812 B``, ``301.2 KiB``, ``2.0 GiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _when(mtime: float | None) -> str:
    return "-" if mtime is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(mtime))


def _kind_row(kind: str, now: float) -> dict:
    stats = []
    for e in safecache.entries(cache_dir(kind)):
        with contextlib.suppress(OSError):
            st = e.stat()
            stats.append((st.st_mtime, st.st_size))
    orphans = safecache.orphans(cache_dir(kind), now)
    return {
        "kind": kind,
        "entries": len(stats),
        "bytes": sum(size for _, size in stats),
        "oldest": min((m for m, _ in stats), default=None),
        "newest": max((m for m, _ in stats), default=None),
        "orphans": len(orphans),
    }


def info_text() -> str:
    now = time.time()
    kinds = [_kind_row(kind, now) for kind in KINDS]
    rows = [
        {
            "kind": k["kind"],
            "entries": str(k["entries"]),
            "size": size_text(k["bytes"]),
            "least recent use": _when(k["oldest"]),
            "most recent use": _when(k["newest"]),
            "orphans": str(k["orphans"]),
        }
        for k in kinds
    ]
    total = sum(k["bytes"] for k in kinds)
    rows.append(
        {
            "kind": "total",
            "entries": str(sum(k["entries"] for k in kinds)),
            "size": size_text(total),
            "least recent use": "",
            "most recent use": "",
            "orphans": str(sum(k["orphans"] for k in kinds)),
        }
    )
    cap = safecache.max_bytes()
    source = safecache.MAX_BYTES_ENV if os.environ.get(safecache.MAX_BYTES_ENV) else "default"
    where = "$MEMLENS_CACHE" if os.environ.get("MEMLENS_CACHE") else "default"
    return (
        f"cache root: {cache_root()} ({where})\n"
        f"size cap:   {size_text(cap)} ({source}); {100 * total / cap:.1f}% used\n\n"
        + format_table(rows, COLUMNS)
        + "\norphans: temp files of killed writes and pickle-era entries (removed on next use)"
    )


def clear(kinds: list[str]) -> str:
    """Delete the entries and orphans of ``kinds``; what was removed, as one line."""
    files = nbytes = 0
    for kind in kinds:
        folder = cache_dir(kind)
        doomed = safecache.entries(folder) + safecache.orphans(folder)
        for e in doomed:
            with contextlib.suppress(OSError):
                size = e.stat().st_size
                os.unlink(e.path)
                files += 1
                nbytes += size
    noun = "file" if files == 1 else "files"
    return f"removed {files} {noun} ({size_text(nbytes)}) from {cache_root()} ({', '.join(kinds)})"


def warm_all(progress: bool | None = None, jobs: int | None = None) -> str:
    """Compile every stage a run could need (each registered policy's kernel with its default
    settings, the oracle, the tier replay, the bulk reader), on ``jobs`` processes (None: every
    core); one line saying what was done."""
    from memlens.cli.replay import composed_policy
    from memlens.config.schema import build_policy
    from memlens.config.store import registered_policies
    from memlens.kernels.warm import reader_stage, stages_for, warm

    policies = [build_policy(composed_policy(name, [])) for name in registered_policies()]
    stages = [reader_stage(), *stages_for(policies, demand_fetch=False, seed=0, oracle=True,
                                          tiers=True)]  # fmt: skip
    done = warm(stages, progress, jobs=jobs or os.cpu_count() or 1)
    where = kernel_cache_dir()
    if not done:
        return f"every kernel stage ({len(stages)}) is compiled already (in {where})"
    return f"compiled {len(done)} of {len(stages)} kernel stages into {where}"


def _problem(command: str, rest: list[str]) -> str | None:
    if command in ("info", "warm"):
        return f"cache {command} takes no arguments, got {' '.join(rest)!r}" if rest else None
    if command != "clear":
        return f"unknown cache command {command!r} (commands: info, clear, warm)"
    if len(rest) > 1:
        return f"cache clear takes at most one kind, got {' '.join(rest)!r}"
    if rest and rest[0] not in KINDS:
        return f"unknown cache kind {rest[0]!r} (kinds: {', '.join(KINDS)})"
    return None


def main(argv: list[str]) -> int:
    """``memlens cache <command>``; returns the exit code (2: bad arguments or settings)."""
    picked = subcommand(argv, USAGE)
    if picked is None:
        return 0
    command, rest = picked
    problem = _problem(command, rest) or safecache.environment_error()
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if command == "info":
        print(info_text())
    elif command == "warm":
        print(warm_all(progress=None))
    else:
        print(clear(rest or list(KINDS)))
    return 0
