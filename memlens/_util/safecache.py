"""Cache entries that cannot run code, detect their own damage, and heal by being rebuilt.

Every MemLens cache (parsed traces, oracle bounds, embeddings) stores its entries through this
module, so the rules below hold for all of them.

**Format.**  An entry is a set of numeric numpy arrays plus JSON metadata, written as one
``.npz`` file (deflate-compressed zip of ``.npy`` members) and read back with
``np.load(..., allow_pickle=False)``.  That reader parses the ``.npy`` headers as literals and
the data as raw numbers, and refuses object arrays, so a planted or damaged file can at worst
be *wrong*, never *run* (the pickle this replaced executed whatever it was given).  ``.npz``
rather than Arrow IPC: numpy is already required, the entries are a handful of flat columns,
and compressed members keep a parsed trace at 1.0-1.5 times the size of its gzipped JSON Lines
(the pickle was 4-9 times; ``benchmarks/bench_cache_corruption.py`` measures both).

**Verification.**  Besides the arrays, an entry holds ``__header__`` (JSON: this module's
``FORMAT``, the cache kind, the caller's metadata, and every array's name, dtype and shape) and
``__digest__`` (XXH3-128 over the header and every array's name, dtype, shape and bytes; format
1 used BLAKE2b-256, which took 0.32 s of the 0.42 s a parsed trace of 870,000 events takes to
load, where XXH3 takes 0.02 s: the digest is there to find damage, not forgery, so a
non-cryptographic hash of 128 bits serves; issue 34).
The zip's CRC-32 covers only each member's bytes, not which members exist or what they mean,
hence the digest of our own.  :func:`load` checks everything; *any* failure (missing member,
other version or kind, bad digest, truncated zip, object dtype, a decoder that raises) deletes
the entry, prints ONE line ``warning: discarded corrupt cache entry PATH (REASON); rebuilding``
and returns ``None``, so the caller recomputes and stores a good entry.  The digest detects
damage, not forgery: whoever can write the cache folder can plant a well-formed entry with wrong
numbers (never code), so a shared cache should be writable only by people you trust.

**Writes** go to ``.NAME.PID.RANDOM.tmp`` beside the entry and are renamed onto it (as in
``memlens._util.atomic``), so a killed writer leaves at most that temp file, never a torn entry.  The
writer's pid is in the name so :func:`clean_orphans`, run at the start of every cache use, can
remove a dead writer's file at once (and any temp file idle for a minute).  No fsync: a killed
process loses nothing the kernel already has, and a torn file after a power cut fails the
digest and is rebuilt.

**Size cap.**  After each write, entries of every cache kind under the cache root (and in the
folder just written) are evicted least recently used first until their total is at most
``MEMLENS_CACHE_MAX_BYTES`` (bytes, or with a K/M/G/T suffix; default 2 GiB).  A hit touches
the entry's mtime, which is the "last used" time (atime is unreliable under noatime).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import numpy as np
import orjson
import xxhash
from isal import isal_zlib

from memlens._util.cachedir import KINDS, cache_dir

FORMAT = 2  # 2: XXH3-128 digest; 1: BLAKE2b-256 (every cache's key names it: a new key)
MAX_BYTES_ENV = "MEMLENS_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 2 * 1024**3
ORPHAN_AGE_S = 60.0

_HEADER, _DIGEST = "__header__", "__digest__"
SEED = 0x6D656D6C656E73  # "memlens": the digest's seed, so that it is MemLens's own
_NUMERIC = frozenset("biufc")  # bool, signed, unsigned, float, complex
#: an entry: a hex content key (every cache's key is a hex digest)
ENTRY = re.compile(r"^[0-9a-f]{16,64}\.npz$")
#: a parsed-trace entry of the pickle era: never read, removed on sight
LEGACY = re.compile(r"^[0-9a-f]{64}\.pkl$")
#: a temp file of an entry write (with the writer's pid), or of the pickle era (without)
TEMP = re.compile(r"^\.[0-9a-f]{16,64}\.(?:npz|pkl)\.(?:(?P<pid>\d+)\.)?[A-Za-z0-9_]+\.tmp$")

T = TypeVar("T")


class CacheConfigError(ValueError):
    """``MEMLENS_CACHE_MAX_BYTES`` is not a size."""


# ----------------------------------------------------------------------------- settings
def max_bytes() -> int:
    """The size cap from ``MEMLENS_CACHE_MAX_BYTES`` (default 2 GiB); raises on a bad value."""
    raw = os.environ.get(MAX_BYTES_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_BYTES
    match = re.fullmatch(r"(\d+)\s*([kmgt]?)(?:i?b)?", raw, re.IGNORECASE)
    if not match or int(match[1]) == 0:
        raise CacheConfigError(
            f"{MAX_BYTES_ENV} must be a positive size in bytes (e.g. 2147483648 or 2G), got {raw!r}"
        )
    return int(match[1]) * 1024 ** " KMGT".index(match[2].upper() or " ")


def environment_error() -> str | None:
    """What is wrong with the cache settings in the environment, or ``None``: a size cap
    that is not a size, or a ``MEMLENS_CACHE`` that is not a folder (every cache would
    otherwise fail to write without a word, and every run recompute what it could reuse)."""
    try:
        max_bytes()
    except CacheConfigError as exc:
        return str(exc)
    root = os.environ.get("MEMLENS_CACHE")
    if root:
        where = Path(root).expanduser()
        if where.exists() and not where.is_dir():
            return f"MEMLENS_CACHE={root}: exists and is not a folder (the cache root)"
    return None


# ------------------------------------------------------------------------- load / store
def load(path: str | os.PathLike, kind: str, decode: Callable[[dict, dict], T]) -> T | None:
    """``decode(arrays, meta)`` of a verified entry; ``None`` if absent or discarded.

    A damaged entry (or one ``decode`` rejects by raising) is deleted with one warning line.
    """
    path = Path(path)
    clean_orphans(path.parent)
    if not path.exists():
        return None
    try:
        arrays, meta = _read(path, kind)
        value = decode(arrays, meta)
    except FileNotFoundError:
        return None  # evicted or replaced by another process between the check and the read
    except Exception as exc:  # noqa: BLE001 - whatever is wrong with the file, rebuild it
        discard(path, f"{type(exc).__name__}: {exc}")
        return None
    with contextlib.suppress(OSError):
        os.utime(path)  # "last used", for the LRU eviction
    return value


def store(path: str | os.PathLike, kind: str, arrays: dict[str, np.ndarray], meta, *,
          default: Callable | None = None, level: int | None = None) -> bool:  # fmt: skip
    """Write an entry atomically, then apply the size cap; ``False`` if it could not be written.

    A read-only or full cache folder must not stop a run, so ``OSError`` is swallowed.
    ``default`` turns what JSON cannot hold in ``meta`` into what it can (``json.dumps``'s);
    ``level`` is the members' deflate level (zlib's default, 6, when None; 1 for entries
    written often, such as a sweep's finished jobs: a fifth of the time, a tenth larger).
    """
    path = Path(path)
    clean_orphans(path.parent)
    arrays = {name: np.asarray(a) for name, a in arrays.items()}
    for name, a in arrays.items():
        if a.dtype.kind not in _NUMERIC or name in (_HEADER, _DIGEST):
            raise ValueError(f"cache array {name!r} of dtype {a.dtype}: numeric arrays only")
    layout = [[name, a.dtype.str, list(a.shape)] for name, a in arrays.items()]
    header = json.dumps({"format": FORMAT, "kind": kind, "meta": meta, "arrays": layout},
                        default=default).encode()  # fmt: skip
    members = {
        _HEADER: np.frombuffer(header, dtype=np.uint8),
        _DIGEST: np.frombuffer(_digest(header, arrays), dtype=np.uint8),
        **arrays,
    }
    try:
        _write_atomic(path, members, level)
    except OSError:
        return False
    evict(path)
    return True


def discard(path: Path, reason: str) -> None:
    """Delete a bad entry and say so on one line of stderr."""
    with contextlib.suppress(OSError):
        os.unlink(path)
    reason = " ".join(reason.split())
    reason = reason if len(reason) <= 160 else reason[:157] + "..."
    print(f"warning: discarded corrupt cache entry {path} ({reason}); rebuilding", file=sys.stderr)


def _digest(header: bytes, arrays: dict[str, np.ndarray]) -> bytes:
    h = _hasher(header)
    for name, a in arrays.items():
        _hash_array(h, name, a)
    return h.digest()


def _hasher(header: bytes):
    h = xxhash.xxh3_128(seed=SEED)
    h.update(len(header).to_bytes(8, "little"))
    h.update(header)
    return h


def _hash_array(h, name: str, a: np.ndarray) -> None:
    h.update(f"\0{name}\0{a.dtype.str}\0{a.shape}\0".encode())
    h.update(_raw(a))


def _raw(a: np.ndarray):
    """The array's bytes as ``tobytes()`` gives them, without the copy (a parsed trace of
    870,000 events is 185 MB: the copy was a third of the digest's time)."""
    c = np.ascontiguousarray(a)
    return memoryview(c.reshape(-1)).cast("B") if c.size else b""


def _bytes(a: np.ndarray) -> bytes:
    if a.dtype != np.uint8 or a.ndim != 1:
        raise ValueError(f"a byte member has dtype {a.dtype} and shape {a.shape}")
    return a.tobytes()


def _read(path: Path, kind: str) -> tuple[dict[str, np.ndarray], dict]:
    """The arrays and metadata of a verified entry; raises on any problem."""
    z = np.load(path, allow_pickle=False)
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise ValueError("not an .npz archive")
    with z:
        header_bytes, digest = _bytes(z[_HEADER]), _bytes(z[_DIGEST])
        header = _parse_header(header_bytes)
        if header["format"] != FORMAT or header["kind"] != kind:
            raise ValueError(
                f"{header['kind']!r} entry of format {header['format']!r}, "
                f"expected {kind!r} of format {FORMAT}"
            )
        declared = header["arrays"]
        if sorted(z.files) != sorted([_HEADER, _DIGEST, *(d[0] for d in declared)]):
            raise ValueError("the members differ from the header's list")
        arrays, h = {}, _hasher(header_bytes)
        # Members are inflated on two threads (ISA-L lets go of the GIL) while this one checks
        # and hashes them in order: a parsed trace of 870,000 events (185 MB) is read in 0.37 s
        # (0.66 s one member after another through zipfile; issue 34).  The same digest.
        with (
            ThreadPoolExecutor(max_workers=2, thread_name_prefix="memlens-cache") as pool,
            open(path, "rb") as fh,
        ):
            infos = {i.filename: i for i in z.zip.infolist()}
            members = []
            for d in declared:  # each member inflated while the next is read
                info = infos[f"{d[0]}.npy"]
                members.append((d, pool.submit(_member_array, info, _raw_member(fh, info))))
            for (name, dtype, shape), member in members:
                a = member.result()
                if a.dtype.str != dtype or list(a.shape) != shape or a.dtype.kind not in _NUMERIC:
                    raise ValueError(
                        f"array {name!r} is {a.dtype.str}{a.shape}, not {dtype}{shape}"
                    )
                arrays[name] = a
                _hash_array(h, name, a)
    if h.digest() != digest:
        raise ValueError("checksum mismatch")
    return arrays, header["meta"]


def _parse_header(text: bytes):
    """``json.loads(text)``, by orjson where it can (a finished job's header holds every
    stream's metrics: 55 ms a job by ``json`` on 5,800 streams, a quarter of that by orjson);
    what orjson refuses (the NaN and infinity ``json`` writes, integers beyond 64 bits) goes
    to ``json``, so the same document comes back."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def _raw_member(fh, info: zipfile.ZipInfo) -> bytes:
    """The stored (compressed) bytes of one member, read past its local header."""
    fh.seek(info.header_offset)
    local = fh.read(30)
    if len(local) != 30 or local[:4] != b"PK\x03\x04":
        raise ValueError(f"member {info.filename!r}: no local header")
    skip = int.from_bytes(local[26:28], "little") + int.from_bytes(local[28:30], "little")
    fh.seek(info.header_offset + 30 + skip)
    raw = fh.read(info.compress_size)
    if len(raw) != info.compress_size:
        raise ValueError(f"member {info.filename!r} is truncated")
    return raw


def _member_array(info: zipfile.ZipInfo, raw: bytes) -> np.ndarray:
    """One ``.npy`` member, inflated by ISA-L (what zipfile does with zlib, in 0.27 s instead
    of 0.43 for a parsed trace's 185 MB), its CRC-32 and size checked as zipfile checks them,
    parsed by numpy's reader with pickles refused."""
    if info.compress_type == zipfile.ZIP_DEFLATED:
        data = isal_zlib.decompress(raw, wbits=-15)
    elif info.compress_type == zipfile.ZIP_STORED:
        data = raw
    else:
        raise ValueError(f"member {info.filename!r}: compression {info.compress_type}")
    if len(data) != info.file_size or isal_zlib.crc32(data) != info.CRC:
        raise ValueError(f"member {info.filename!r}: bad CRC-32 or size")
    return np.lib.format.read_array(io.BytesIO(data), allow_pickle=False)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _write_atomic(path: Path, members: dict[str, np.ndarray], level: int | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(
        prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent
    )
    try:
        with (
            os.fdopen(fd, "wb") as fh,
            zipfile.ZipFile(fh, "w", zipfile.ZIP_DEFLATED, compresslevel=level) as z,
        ):
            for name, a in members.items():  # what np.savez_compressed writes, at ``level``
                with z.open(f"{name}.npy", "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, a, allow_pickle=False)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a shared cache must be readable
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# ------------------------------------------------------------------ housekeeping
def entries(directory: str | os.PathLike) -> list[os.DirEntry]:
    """The cache entries in ``directory`` (files named by a hex key, ``.npz``)."""
    return [e for e in _scan(directory) if ENTRY.match(e.name) and e.is_file()]


def orphans(directory: str | os.PathLike, now: float | None = None) -> list[os.DirEntry]:
    """Files :func:`clean_orphans` would remove: dead writers' temp files, pickle-era entries."""
    now = time.time() if now is None else now
    return [e for e in _scan(directory) if LEGACY.match(e.name) or _is_orphan_temp(e, now)]


def clean_orphans(directory: str | os.PathLike, now: float | None = None) -> int:
    """Remove :func:`orphans` from ``directory``; returns how many were removed (cheap)."""
    removed = 0
    for e in orphans(directory, now):
        with contextlib.suppress(OSError):
            os.unlink(e.path)
            removed += 1
    return removed


def evict(keep: Path, cap: int | None = None) -> list[Path]:
    """Delete least recently used entries until all of them fit in ``cap``; never ``keep``."""
    cap = max_bytes() if cap is None else cap
    folders = {Path(cache_dir(kind)).resolve() for kind in KINDS} | {keep.parent.resolve()}
    found = []
    for folder in folders:
        for e in entries(folder):
            with contextlib.suppress(OSError):
                st = e.stat()
                found.append((st.st_mtime_ns, st.st_size, Path(e.path)))
    total = sum(size for _, size, _ in found)
    removed = []
    keep = keep.resolve()
    for _, size, path in sorted(found):
        if total <= cap:
            break
        if path.resolve() == keep:
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        total -= size
        removed.append(path)
    return removed


def _scan(directory: str | os.PathLike) -> list[os.DirEntry]:
    try:
        with os.scandir(directory) as it:
            return list(it)
    except OSError:
        return []


def _is_orphan_temp(e: os.DirEntry, now: float) -> bool:
    match = TEMP.match(e.name)
    if not match:
        return False
    try:
        idle = now - e.stat().st_mtime
    except OSError:
        return False
    pid = match["pid"]
    return idle > ORPHAN_AGE_S or (pid is not None and not _alive(int(pid)))


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine (unknown off POSIX: assume so)."""
    if pid == os.getpid() or os.name != "posix":
        return True  # on Windows os.kill(pid, 0) would send CTRL_C_EVENT, not probe
    if pid <= 0:
        return False  # os.kill(0, 0) would probe our own process group
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except OSError:
        return True  # PermissionError: it exists, under another user
    return True
