"""Keeping freed memory from staying resident: the holes of the C heap.

glibc serves allocations below its *mmap threshold* from the heap and keeps freed heap memory
for later; and it raises that threshold (up to 32 MiB) each time a larger mapped block is
freed.  So once the trace parser has freed one big buffer, every array below that size (the
columns growing by reallocation, numpy's temporaries in the replay and the metrics) comes from
the heap and leaves a hole there when it moves or is freed.  Measured on a 5,000,000-event
replay, the holes held about 20 bytes per event of resident memory that nothing used.

* :func:`fix_mmap_threshold` pins the threshold at 1 MiB (``mallopt``, which also switches the
  raising off): an array of a MiB or more is mapped, so its memory goes back to the system when
  it is freed, and it grows by remapping rather than by copying.  Smaller allocations, the
  vast majority, are served from the heap as before.
* :func:`release_free_memory` hands the heap's free pages back (``malloc_trim``).

Both are no-ops where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number
MMAP_THRESHOLD = 1 << 20


@functools.cache
def _libc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


@functools.cache
def fix_mmap_threshold() -> bool:
    """Pin glibc's mmap threshold (once per process); whether it could be done."""
    libc = _libc()
    return bool(libc is not None and libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))


def release_free_memory() -> None:
    """Give the heap's free pages back to the operating system (milliseconds)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)
