"""Caches never run code, never serve damaged data, clean up after killed writers, stay capped.

Every cache (parsed traces, oracle bounds, embeddings) goes through ``memlens._util.safecache``.  The
expectations here are independent of its code: a pickle payload that would create a file; the
result of parsing / solving / embedding from scratch; hand-placed file names, pids and times.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import pickle
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
import xxhash
from hypothesis import given
from hypothesis import strategies as st

from memlens._util import safecache
from memlens.oracle import OracleSettings, clear_memo, solve
from memlens.retrieval.embeddings import EmbeddingsConfig, embed_trace
from memlens.testing import random_events, traces
from memlens.trace.cache import entry_path, load_trace_cached
from memlens.trace.io import load_trace, trace_from_events, write_trace
from memlens.trace.model import Trace

WARNING = "warning: discarded corrupt cache entry"
PYTHON = sys.executable
BUDGET = 60


# ------------------------------------------------------------------------ helpers
def same_trace(a: Trace, b: Trace) -> bool:
    for f in fields(Trace):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            if x.dtype != y.dtype or not np.array_equal(x, y):
                return False
        elif x != y:
            return False
    return True


def oracle_numbers(result) -> tuple:
    """What an oracle result says (its timings aside: a rebuild re-times the solve)."""
    streams = [
        (s.upper, s.lower, s.references, s.upper_method, s.lower_method, s.gaps)
        for s in result.streams
    ]
    plans = [p.tolist() for p in result.plans]
    return result.budget, result.demand_fetch, streams, plans


def oracle_timings(result) -> tuple:
    return result.wall_s, [s.solve_s for s in result.streams]


class Payload:
    """Unpickling this creates ``marker``: the proof that a cache ran code."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def evil_pickle(marker: Path) -> bytes:
    return pickle.dumps({"ev_kind": Payload(marker)})


def run_quietly(fn):
    """``fn()`` and the warning lines it printed on stderr."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        value = fn()
    return value, [line for line in err.getvalue().splitlines() if line.startswith("warning:")]


def corrupt(blob: bytes, how: str, offset: int, xor: int, garbage: bytes) -> bytes:
    offset %= len(blob)
    if how == "flip":
        return blob[:offset] + bytes([blob[offset] ^ xor]) + blob[offset + 1 :]
    if how == "truncate":
        return blob[:offset]
    return blob + garbage


def middle_of_largest_member(blob: bytes) -> int:
    """The offset of the middle byte of the largest member's stored data in a zip (``.npz``)."""
    import io
    import struct
    import zipfile

    info = max(zipfile.ZipFile(io.BytesIO(blob)).infolist(), key=lambda i: i.compress_size)
    name_len, extra_len = struct.unpack(
        "<HH", blob[info.header_offset + 26 : info.header_offset + 30]
    )
    start = info.header_offset + 30 + name_len + extra_len
    return start + info.compress_size // 2


CORRUPTIONS = st.tuples(
    st.sampled_from(["flip", "truncate", "append"]),
    st.integers(0, 10**9),
    st.integers(1, 255),
    st.binary(min_size=1, max_size=64),
)


# ----------------------------------------------------------------- the three caches
class Kind:
    """One cache: how to fill it, where its entry is, how to read it, and what is right."""

    def __init__(self, name, folder: Path, trace_file: Path):
        self.name, self.folder, self.trace_file = name, folder, trace_file
        self.trace = load_trace(trace_file)
        self.fresh = self.compute(cache=False)
        self.load()  # writes the entry
        self.entry = self.find_entry()
        self.original = self.entry.read_bytes()
        self.served = self.load()  # read back from the entry, as a later run would

    def find_entry(self) -> Path:
        (entry,) = [p for p in self.folder.rglob("*.npz")]
        return entry

    def compute(self, cache: bool):
        clear_memo()
        if self.name == "traces":
            return load_trace_cached(self.trace_file, enabled=cache, directory=self.folder)
        if self.name == "oracle":
            settings = OracleSettings(cache=cache, cache_dir=str(self.folder))
            return solve(self.trace, BUDGET, False, settings)
        settings = EmbeddingsConfig(dim=8, cache=cache, cache_dir=str(self.folder))
        return embed_trace(self.trace, settings, seed=3)

    def load(self):
        return self.compute(cache=True)

    def same(self, value, served: bool) -> bool:
        """``value`` equals a fresh computation (and, if served from the entry, the entry)."""
        if self.name == "traces":
            return same_trace(value, self.fresh)
        if self.name == "oracle":
            same = oracle_numbers(value) == oracle_numbers(self.fresh)
            return same and (not served or oracle_timings(value) == oracle_timings(self.served))
        return all(
            a.dtype == b.dtype and np.array_equal(a, b)
            for a, b in ((value.items, self.fresh.items), (value.requests, self.fresh.requests))
        )


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("trace") / "t.jsonl.gz"
    write_trace(path, random_events(np.random.default_rng(7), n_events=120), header={"g": 2})
    return path


@pytest.fixture(scope="module")
def kinds(tmp_path_factory, trace_file) -> dict[str, Kind]:
    root = tmp_path_factory.mktemp("caches")
    return {
        name: Kind(name, root / name, trace_file) for name in ("traces", "oracle", "embeddings")
    }


# ------------------------------------------------------------------- no code runs
def test_the_payload_really_runs_code_when_unpickled(tmp_path):
    marker = tmp_path / "ran"
    pickle.loads(evil_pickle(marker))
    assert marker.exists()  # so the tests below would notice a cache that unpickles


def test_a_planted_pickle_never_runs_and_the_trace_equals_a_fresh_parse(
    tmp_path, monkeypatch, trace_file
):
    monkeypatch.setenv("MEMLENS_CACHE", str(tmp_path / "cache"))
    marker = tmp_path / "pwned"
    old_key = hashlib.sha256(b"memlens-trace-cache-v1\n" + trace_file.read_bytes()).hexdigest()
    old_entry = tmp_path / "cache" / "traces" / f"{old_key}.pkl"  # where the pickle cache read
    new_entry = entry_path(trace_file)
    for planted in (old_entry, new_entry):
        planted.parent.mkdir(parents=True, exist_ok=True)
        planted.write_bytes(evil_pickle(marker))
    got, warnings = run_quietly(lambda: load_trace_cached(trace_file))
    assert not marker.exists()
    assert same_trace(got, load_trace(trace_file))
    assert len(warnings) == 1 and str(new_entry) in warnings[0]
    assert not old_entry.exists()  # pickle-era entries are removed, never read
    assert same_trace(load_trace_cached(trace_file), got)  # and the entry is healed


def test_planted_pickles_in_the_oracle_and_embeddings_caches_never_run(tmp_path, kinds):
    marker = tmp_path / "pwned"
    for name in ("oracle", "embeddings"):
        kind = kinds[name]
        kind.entry.write_bytes(evil_pickle(marker))
        got, warnings = run_quietly(kind.load)
        assert kind.same(got, served=False) and len(warnings) == 1
        # a well-formed entry but for one member: a pickled object array (np.savez pickles
        # object arrays), which the reader must refuse rather than unpickle
        header = {
            "format": safecache.FORMAT,
            "kind": name,
            "meta": {},
            "arrays": [["x", "|O", [1]]],
        }
        with open(kind.entry, "wb") as fh:
            np.savez(
                fh,
                __header__=np.frombuffer(json.dumps(header).encode(), np.uint8),
                __digest__=np.zeros(32, np.uint8),
                x=np.array([Payload(marker)]),
            )
        got, warnings = run_quietly(kind.load)
        assert kind.same(got, served=False) and len(warnings) == 1
        assert "allow_pickle" in warnings[0]
        assert not marker.exists()
        kind.entry.write_bytes(kind.original)


@pytest.mark.slow  # a memlens run in a fresh process over a planted cache: 9 s
def test_a_planted_pickle_in_a_memlens_run_changes_nothing(tmp_path, trace_file):
    """The reported attack end to end: a later ``memlens simulate`` exits 0 with the same
    numbers as a run without the cache, warns once, and the payload never runs."""
    env = {**os.environ, "MEMLENS_CACHE": str(tmp_path / "cache"), "PYTHONWARNINGS": "ignore"}
    marker = tmp_path / "pwned"
    old_key = hashlib.sha256(b"memlens-trace-cache-v1\n" + trace_file.read_bytes()).hexdigest()
    for planted in (
        tmp_path / "cache" / "traces" / f"{old_key}.pkl",
        entry_path(trace_file, tmp_path / "cache" / "traces"),
    ):
        planted.parent.mkdir(parents=True, exist_ok=True)
        planted.write_bytes(evil_pickle(marker))

    def simulate(run: str, *extra: str) -> tuple[dict, str]:
        args = [f"trace={trace_file}", "policy=lru", "budget=100", "mlflow.enabled=false"]
        proc = subprocess.run(
            [PYTHON, "-m", "memlens", "simulate", *args, *extra, f"hydra.run.dir={tmp_path / run}"],
            cwd=tmp_path, env=env, capture_output=True, text=True,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        metrics = json.loads((tmp_path / run / "metrics.json").read_text())
        metrics.pop("timing")
        return metrics, proc.stderr

    cached, stderr = simulate("a")
    assert not marker.exists()
    assert stderr.count(WARNING) == 1
    fresh, stderr = simulate("b", "trace_cache=false")
    assert cached == fresh and WARNING not in stderr


# ----------------------------------------------------------- damage is never served
@pytest.mark.parametrize("name", ["traces", "oracle", "embeddings"])
@given(damage=CORRUPTIONS)
def test_a_damaged_entry_is_served_intact_or_rebuilt_never_altered(kinds, name, damage):
    kind = kinds[name]
    kind.entry.write_bytes(corrupt(kind.original, *damage))
    got, warnings = run_quietly(kind.load)
    assert len(warnings) <= 1
    assert kind.same(got, served=not warnings)
    if warnings:
        assert str(kind.entry) in warnings[0] and warnings[0].endswith("; rebuilding")
        again, warnings = run_quietly(kind.load)  # the rebuilt entry is served, silently
        assert kind.same(again, served=False) and warnings == []


@pytest.mark.parametrize("name", ["traces", "oracle", "embeddings"])
def test_each_kind_detects_a_flip_in_its_data(kinds, name):
    """A flip in the middle of the largest array's stored bytes is always detected."""
    kind = kinds[name]
    kind.entry.write_bytes(
        corrupt(kind.original, "flip", middle_of_largest_member(kind.original), 0x40, b"")
    )
    got, warnings = run_quietly(kind.load)
    assert len(warnings) == 1 and kind.same(got, served=False)
    kind.entry.write_bytes(kind.original)


@given(events=traces(max_events=30))
def test_any_trace_round_trips_through_the_cache_entry(tmp_path_factory, events):
    tr = trace_from_events(events, source="x")
    path = tmp_path_factory.getbasetemp() / "roundtrip" / f"{tr.sha256}.npz"
    arrays, meta = tr.to_arrays()
    assert safecache.store(path, "traces", arrays, meta)
    back, warnings = run_quietly(
        lambda: safecache.load(path, "traces", lambda a, m: Trace.from_arrays(a, m, "x"))
    )
    assert warnings == [] and same_trace(back, tr)


# --------------------------------------------------------- what load verifies
def test_the_wrong_kind_version_or_a_rejecting_decoder_discards_the_entry(tmp_path, monkeypatch):
    path = tmp_path / ("ab" * 16 + ".npz")
    arrays = {"x": np.arange(5, dtype=np.int32)}

    def attempt(kind="oracle", decode=lambda a, m: (a["x"].tolist(), m)):
        return run_quietly(lambda: safecache.load(path, kind, decode))

    safecache.store(path, "oracle", arrays, {"n": 5})
    assert attempt() == (([0, 1, 2, 3, 4], {"n": 5}), [])
    value, warnings = attempt(kind="embeddings")
    assert value is None and "expected 'embeddings'" in warnings[0] and not path.exists()
    safecache.store(path, "oracle", arrays, {"n": 5})
    monkeypatch.setattr(safecache, "FORMAT", safecache.FORMAT + 1)
    value, warnings = attempt()
    assert value is None and len(warnings) == 1 and not path.exists()
    monkeypatch.undo()
    safecache.store(path, "oracle", arrays, {"n": 5})
    value, warnings = attempt(decode=lambda a, m: m["missing"])
    assert value is None and "KeyError" in warnings[0] and not path.exists()
    assert attempt() == (None, [])  # an absent entry is a plain miss


def test_only_numeric_arrays_can_be_stored(tmp_path):
    with pytest.raises(ValueError, match="numeric arrays only"):
        safecache.store(tmp_path / ("cd" * 16 + ".npz"), "oracle", {"s": np.array(["a"])}, {})


def test_a_consistent_but_edited_entry_fails_the_checksum(tmp_path):
    """Rewriting one array with a valid zip (as a bit flip that survives the CRC would) is
    caught by the digest."""
    path = tmp_path / ("ef" * 16 + ".npz")
    safecache.store(path, "oracle", {"x": np.arange(4)}, {})
    with np.load(path, allow_pickle=False) as z:
        members = {k: z[k] for k in z.files}
    members["x"] = members["x"] + 1
    with open(path, "wb") as fh:
        np.savez_compressed(fh, **members)
    value, warnings = run_quietly(lambda: safecache.load(path, "oracle", lambda a, m: a))
    assert value is None and "checksum mismatch" in warnings[0]


def test_members_read_as_zipfile_reads_them_stored_or_deflated(tmp_path):
    """The members are inflated by ISA-L, not zipfile (``safecache._member_array``): an entry
    rewritten uncompressed reads the same; a member whose CRC-32 is wrong is refused, as
    zipfile refuses it."""
    path = tmp_path / ("ab" * 16 + ".npz")
    x = {"x": np.arange(100_000) % 7, "y": np.linspace(0, 1, 1000)}
    safecache.store(path, "oracle", x, {"m": 1})
    value = safecache.load(path, "oracle", lambda a, m: (a, m))
    assert value[1] == {"m": 1} and all(np.array_equal(value[0][k], x[k]) for k in x)
    with np.load(path, allow_pickle=False) as z:
        members = {k: z[k] for k in z.files}
    with open(path, "wb") as fh:
        np.savez(fh, **members)  # stored, not deflated
    value = safecache.load(path, "oracle", lambda a, m: a)
    assert all(np.array_equal(value[k], x[k]) for k in x)
    data = bytearray(path.read_bytes())
    central = data.find(b"PK\x01\x02")
    while central != -1 and data[central + 46 : central + 46 + 5] != b"x.npy":
        central = data.find(b"PK\x01\x02", central + 4)
    data[central + 16] ^= 0xFF  # the central directory's CRC-32 of x.npy
    path.write_bytes(bytes(data))
    value, warnings = run_quietly(lambda: safecache.load(path, "oracle", lambda a, m: a))
    assert value is None and "bad CRC-32" in warnings[0]


# ------------------------------------------------------------------- orphans
def test_orphans_are_dead_or_idle_writers_temp_files_and_pickle_era_entries(tmp_path):
    key = "0123456789abcdef" * 2
    dead = subprocess.run([PYTHON, "-c", "import os; print(os.getpid())"], capture_output=True)
    dead_pid = int(dead.stdout)
    now = time.time()
    files = {
        f".{key}.npz.{dead_pid}.abc123.tmp": (now, True),  # writer is gone
        f".{key}.npz.{os.getpid()}.def456.tmp": (now, False),  # writer alive, busy
        f".{key}.npz.{os.getpid()}.ghi789.tmp": (now - 120, True),  # alive but idle 2 min
        f".{key}.pkl.jk01lm.tmp": (now - 120, True),  # pickle era, idle
        f".{key}.pkl.no23pq.tmp": (now, False),  # pickle era, maybe still writing
        "ab" * 32 + ".pkl": (now, True),  # a pickle-era entry
        f"{key}.npz": (now - 999, False),  # an entry, however old
        "notes.tmp": (now - 999, False),  # not ours
        ".notes.npz.1.x.tmp": (now - 999, False),  # not ours (no hex key)
    }
    for name, (mtime, _) in files.items():
        (tmp_path / name).write_bytes(b"x")
        os.utime(tmp_path / name, (mtime, mtime))
    assert safecache.clean_orphans(tmp_path, now=now) == sum(gone for _, gone in files.values())
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        name for name, (_, gone) in files.items() if not gone
    )


KILLED_WRITER = """
import sys, time
import numpy as np
from memlens._util import safecache

def stuck(member, array, **kwargs):  # the first member's array, half written
    member.write(b"half an entry")
    print("writing", flush=True)
    time.sleep(3600)

np.lib.format.write_array = stuck
safecache.store(sys.argv[1], "traces", {"x": np.arange(10)}, {})
"""


def test_a_killed_write_leaves_only_an_orphan_that_the_next_use_removes(tmp_path):
    entry = tmp_path / ("9f" * 32 + ".npz")
    proc = subprocess.Popen(
        [PYTHON, "-c", KILLED_WRITER, str(entry)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline() == "writing\n"
    proc.kill()
    proc.wait()
    proc.stdout.close()
    (orphan,) = tmp_path.iterdir()
    assert orphan.name.startswith(f".{entry.name}.{proc.pid}.") and orphan.suffix == ".tmp"
    value, warnings = run_quietly(lambda: safecache.load(entry, "traces", lambda a, m: a))
    assert value is None and warnings == []  # no torn entry was ever in place
    assert list(tmp_path.iterdir()) == []  # the dead writer's file went at once, not after 60 s


# ------------------------------------------------------------------ size cap
def test_the_size_cap_evicts_least_recently_used_entries_of_every_kind(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLENS_CACHE", str(tmp_path))
    rng = np.random.default_rng(0)
    blob = {"x": rng.integers(0, 256, 20_000, dtype=np.uint8)}  # random: no compression

    def put(kind: str, name: str, when: float | None = None) -> Path:
        path = tmp_path / kind / (name * 32 + ".npz")
        assert safecache.store(path, kind, blob, {})
        if when is not None:
            os.utime(path, (when, when))
        return path

    a, b = put("traces", "a", 1000), put("oracle", "b", 2000)
    c = put("embeddings", "c", 3000)
    size = a.stat().st_size  # d will be the same bytes in the same kind: the same size
    # a is used now, so b (2000) and then c (3000) are the least recently used
    assert safecache.load(a, "traces", lambda arr, m: True)
    monkeypatch.setenv("MEMLENS_CACHE_MAX_BYTES", str(2 * size + c.stat().st_size))
    d = put("traces", "d")
    assert d.stat().st_size == size
    assert (a.exists(), b.exists(), c.exists(), d.exists()) == (True, False, True, True)
    monkeypatch.setenv("MEMLENS_CACHE_MAX_BYTES", str(size // 2))
    e = put("oracle", "e")  # larger than the cap alone: it stays, everything else goes
    assert [p.exists() for p in (a, c, d, e)] == [False, False, False, True]


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("", 2 * 1024**3),
        ("1000", 1000),
        ("512K", 512 * 1024),
        ("2G", 2 * 1024**3),
        ("3mib", 3 << 20),
    ],
)
def test_the_cap_setting(monkeypatch, raw, expected):
    monkeypatch.setenv("MEMLENS_CACHE_MAX_BYTES", raw)
    assert safecache.max_bytes() == expected and safecache.environment_error() is None


@pytest.mark.parametrize("raw", ["abc", "0", "-5", "1.5G", "2X"])
def test_a_bad_cap_is_an_error(monkeypatch, raw):
    monkeypatch.setenv("MEMLENS_CACHE_MAX_BYTES", raw)
    assert "MEMLENS_CACHE_MAX_BYTES must be a positive size" in safecache.environment_error()


# ---------------------------------------------------------------- memlens cache
def cache_cli(root: Path, *args: str, cap: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "MEMLENS_CACHE": str(root), "PYTHONWARNINGS": "ignore"}
    env.pop("MEMLENS_CACHE_MAX_BYTES", None)
    if cap is not None:
        env["MEMLENS_CACHE_MAX_BYTES"] = cap
    return subprocess.run(
        [PYTHON, "-m", "memlens", "cache", *args], env=env, capture_output=True, text=True
    )


def row(stdout: str, kind: str) -> list[str]:
    (line,) = [ln for ln in stdout.splitlines() if ln.startswith(kind + " ")]
    return line.split()


def test_cache_info_and_clear(tmp_path, monkeypatch, trace_file):
    root = tmp_path / "cache"
    monkeypatch.setenv("MEMLENS_CACHE", str(root))
    load_trace_cached(trace_file)
    embed_trace(load_trace(trace_file), EmbeddingsConfig(dim=8))
    entry = entry_path(trace_file)
    orphan = entry.parent / f".{entry.name}.1.stale.tmp"
    orphan.write_bytes(b"half")
    os.utime(orphan, (time.time() - 600,) * 2)

    info = cache_cli(root, "info", cap="10M")
    assert info.returncode == 0, info.stderr
    assert f"cache root: {root}" in info.stdout and "size cap:   10.0 MiB" in info.stdout
    traces_row = row(info.stdout, "traces")
    assert traces_row[1] == "1" and traces_row[-1] == "1"  # one entry, one orphan
    assert row(info.stdout, "oracle")[1:4] == ["0", "0", "B"]
    assert row(info.stdout, "embeddings")[1] == "1"
    assert row(info.stdout, "total")[1] == "2"

    cleared = cache_cli(root, "clear", "traces")
    assert cleared.returncode == 0 and "removed 2 files" in cleared.stdout
    assert not entry.exists() and not orphan.exists()
    assert row(cache_cli(root, "info").stdout, "embeddings")[1] == "1"
    assert cache_cli(root, "clear").returncode == 0
    assert row(cache_cli(root, "info").stdout, "total")[1] == "0"


@pytest.mark.parametrize(
    "args, cap, message",
    [
        (["frobnicate"], None, "unknown cache command 'frobnicate'"),
        (["clear", "pickles"], None, "unknown cache kind 'pickles'"),
        (["clear", "traces", "oracle"], None, "at most one kind"),
        (["info", "now"], None, "cache info takes no arguments"),
        (["info"], "lots", "MEMLENS_CACHE_MAX_BYTES must be a positive size"),
    ],
)
def test_cache_command_errors(tmp_path, args, cap, message):
    proc = cache_cli(tmp_path, *args, cap=cap)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("error: ") and message in proc.stderr
    assert proc.stderr.count("\n") == 1


def test_a_bad_cap_stops_every_command_before_it_starts(tmp_path):
    env = {**os.environ, "MEMLENS_CACHE": str(tmp_path), "MEMLENS_CACHE_MAX_BYTES": "2 gigs"}
    proc = subprocess.run(
        [PYTHON, "-m", "memlens", "simulate", "policy=lru", f"hydra.run.dir={tmp_path / 'run'}"],
        env=env, capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("error: MEMLENS_CACHE_MAX_BYTES must be a positive size")
    assert not (tmp_path / "run").exists()


def test_digest_is_xxh3_over_the_header_and_every_arrays_layout_and_bytes():
    """The digest, recomputed here by hand from its definition (XXH3-128 with MemLens's seed
    over the header's length and bytes, then each array's name, dtype, shape and bytes as
    ``tobytes()`` gives them): strided, empty and 0-d arrays hash as their copies would."""
    arrays = {"a": np.arange(10, dtype=np.int64)[::2], "b": np.zeros((0, 3)), "c": np.array(7)}
    header = b'{"x": 1}'
    h = xxhash.xxh3_128(seed=0x6D656D6C656E73)
    h.update(len(header).to_bytes(8, "little"))
    h.update(header)
    for name, a in arrays.items():
        h.update(f"\0{name}\0{a.dtype.str}\0{a.shape}\0".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    assert safecache._digest(header, arrays) == h.digest()
    arrays["a"] = arrays["a"].copy()
    arrays["a"][0] = 1  # one changed number: another digest
    assert safecache._digest(header, arrays) != h.digest()


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
                    max_leaves=30))  # fmt: skip
def test_a_header_reads_back_as_json_reads_it(meta):
    """Headers are parsed by orjson, and by ``json`` where orjson refuses (NaN, infinity,
    integers beyond 64 bits): the document ``json.loads`` gives, whatever ``json`` wrote."""
    text = json.dumps({"meta": meta}).encode()
    assert json.dumps(safecache._parse_header(text)) == json.dumps(json.loads(text))
