"""Step 6 of the pipeline: a run's records on disk, one whole run per folder.

``metrics.json`` (the report), ``per_request.parquet``, ``moves.parquet`` (every tier move) and
``resolved_config.yaml`` (``compare.csv``/``compare.json``/``recommend.json`` for compare and
recommend).  MLflow logging is ``memlens.runs.tracking``.

A run folder that is used again (``hydra.run.dir=out`` twice) must never mix two runs: when the
second run failed halfway, the first run's metrics.json used to sit beside the second run's
Parquet files.  So :func:`run_folder` writes every file of a run into a fresh hidden sibling
folder and swaps it in whole at the end (one atomic exchange of the two directories on Linux,
two renames elsewhere).  The folder holds exactly one run's files, or the previous complete
run's, also when the run fails or is killed halfway; a kill -9 leaves only a hidden staging
folder, which the next run into the same folder removes once its process is gone.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import glob
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from memlens._util.atomic import atomic_path, dumps_flat_lists, write_text
from memlens._util.folders import remove_created_parents
from memlens._util.parquet import writer_options
from memlens._util.processes import Process
from memlens.analyze.metrics import per_request_table
from memlens.analyze.report import Report
from memlens.retrieval.tiers import TIER_NAMES
from memlens.runs.interrupts import signals_held
from memlens.runs.pipeline import Replay
from memlens.trace.packed import TakenStrings, arrow_rows

#: Files whose presence says "this run is complete": removed first, put in place last.
MARKERS = ("metrics.json", "compare.json", "recommend.json")
#: Every file a command writes into its run folder.
RESULT_FILES = frozenset(
    {*MARKERS, "per_request.parquet", "moves.parquet", "resolved_config.yaml", "compare.csv"}
    | {"events.parquet", "report.html"}  # memlens.analyze.eventlog, memlens.present.static_report
)


#: Rows per Parquet row group: the unit in which columns become Arrow objects (and the Parquet
#: writer's dictionaries and pages) at a time, so what one group costs bounds the writer's memory.
ROW_GROUP = 1 << 18


def write_parquet(path: Path, columns: dict, rows_per_group: int = ROW_GROUP,
                  dictionary: tuple[str, ...] | None = None, ascending: tuple[str, ...] = ()):  # fmt: skip
    """Columns (numpy arrays, lists, or the list-like views of ``memlens.trace.packed``) as one
    Parquet file, converted and written a row group at a time: a run of tens of millions of
    moves never holds its whole table as Arrow (or Python) objects.  The encodings
    (``memlens._util.parquet``) change how the file is stored, never what it holds.

    A ``dictionary`` column of names taken by code (a :class:`TakenStrings`: a stream, a tier)
    goes to the writer as its codes and names (``TakenStrings.coded``), and the file keeps no
    Arrow schema, so it reads back as the strings it holds: 0.19 s -> 0.14 s for the 1.9M rows
    of a 5,800-stream run's ``moves.parquet`` (issue 34)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = len(next(iter(columns.values()))) if columns else 0
    coded = {k for k in dictionary or () if isinstance(columns.get(k), TakenStrings)}
    with atomic_path(path) as tmp, contextlib.ExitStack() as stack:
        writer = None
        for lo in range(0, max(n, 1), rows_per_group):
            hi = min(n, lo + rows_per_group)
            batch = pa.table({k: v.coded(lo, hi) if k in coded else arrow_rows(v, lo, hi)
                              for k, v in columns.items()})  # fmt: skip
            if writer is None:
                options = writer_options(batch.schema, dictionary, ascending)
                writer = stack.enter_context(pq.ParquetWriter(
                    tmp, batch.schema, store_schema=not coded, **options))  # fmt: skip
            writer.write_table(batch)


def moves_table(run: Replay) -> dict:
    tiers = run.tiers
    names = [TIER_NAMES[k] for k in (-1, 0, 1, 2)]
    return {
        "event": tiers.event,
        "item_id": TakenStrings(run.trace.item_id, tiers.item),
        "from": TakenStrings(names, tiers.src + 1),
        "to": TakenStrings(names, tiers.dst + 1),
    }


@contextlib.contextmanager
def tables_started(out_dir: Path, run: Replay) -> Iterator[dict[str, Future]]:
    """Start writing the run's tables now, right after the replay, each on a thread of its own,
    so that they overlap each other, the analyzers and ``metrics.json``'s encoding: the event
    log (``events.parquet``, a warm ``simulate``'s longest step: about 2 s for 870,000 events,
    of a 0.1 s replay; issue 34), ``per_request.parquet`` and ``moves.parquet`` (with the tier
    log it is made from: the kernel releases the GIL, and so does Arrow's encoding).  Yields
    their futures, by file name, for :func:`write_run`; the block's end waits for them."""
    out_dir.mkdir(parents=True, exist_ok=True)
    s = run.settings
    tables = {"per_request.parquet": _write_per_request}
    if s.output.moves:
        tables["moves.parquet"] = _write_moves
    if s.events.enabled:
        tables["events.parquet"] = _write_event_log
    with ThreadPoolExecutor(max_workers=len(tables), thread_name_prefix="memlens-writer") as pool:
        yield {name: pool.submit(write, out_dir / name, run) for name, write in tables.items()}


def write_run(out_dir: Path, run: Replay, report: Report, resolved_yaml: str,
              started: dict[str, Future] | None = None) -> list[Path]:  # fmt: skip
    """Every record of one run, in ``out_dir`` (a :func:`run_folder`); returns the paths.

    The tables are written on threads (:func:`tables_started`; ``started``: their futures when
    it started them already, else they are started here), each file whole and atomic;
    ``metrics.json`` is encoded meanwhile and written last, after every other file."""
    if started is None:
        with tables_started(out_dir, run) as started:
            return write_run(out_dir, run, report, resolved_yaml, started)
    doc = report.to_dict()
    metrics = dumps_flat_lists(doc) + "\n"
    write_text(out_dir / "resolved_config.yaml", resolved_yaml)
    paths = [started[name].result() for name in ("per_request.parquet", "moves.parquet")
             if name in started]  # fmt: skip
    paths.append(out_dir / "resolved_config.yaml")
    if "events.parquet" in started:  # the event log and the static HTML report built from it
        from memlens.present.static_report import write_static_report

        events, columns = started["events.parquet"].result()
        paths += [events, write_static_report(out_dir / "report.html", columns, doc)]
    paths.append(out_dir / "metrics.json")
    write_text(paths[-1], metrics)  # last: its presence means "complete"
    return paths


def _write_per_request(path: Path, run: Replay) -> Path:
    s = run.settings
    columns = per_request_table(run.trace, run.result, run.retrieval, s.price_per_mtok, s.costs)
    write_parquet(path, columns, dictionary=("stream",), ascending=("event",))
    return path


def _write_moves(path: Path, run: Replay) -> Path:
    write_parquet(path, moves_table(run), dictionary=("from", "to"), ascending=("event",))
    return path


def _write_event_log(path: Path, run: Replay):
    """``events.parquet`` and the log's columns (``report.html`` is drawn from them)."""
    from memlens.analyze.eventlog import build_event_log, write_event_log
    from memlens.analyze.logviews import EventLog

    cols = build_event_log(run)
    return write_event_log(path, run, cols), EventLog(cols, run.trace)


def _prefix(target: Path, kind: str) -> str:
    return f".{target.name}.{kind}."


def _owner(debris: Path, prefix: str) -> Process | None:
    """The process named in a staging folder's name (``<prefix><pid>@<host>.<random>``)."""
    pid, _, host = debris.name[len(prefix) :].rsplit(".", 1)[0].partition("@")
    return Process(host, int(pid)) if pid.isdigit() else None


def drop_debris(target: Path) -> None:
    """Remove what killed runs into ``target`` left beside it (only if their process is gone)."""
    for kind in ("staging", "old"):
        prefix = _prefix(target, kind)
        for debris in target.parent.glob(glob.escape(prefix) + "*"):
            owner = _owner(debris, prefix)
            if owner is None or not owner.is_dead():
                continue
            if kind == "old" and not target.exists():  # killed between two renames: put back
                os.rename(debris, target)
            else:
                shutil.rmtree(debris, ignore_errors=True)


def _new_sibling(target: Path, kind: str) -> Path:
    me = Process.current()
    prefix = f"{_prefix(target, kind)}{me.pid}@{me.host}."
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=target.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(folder, 0o777 & ~umask)  # mkdtemp makes 0700; a run folder is an ordinary folder
    return folder


def _exchange(a: Path, b: Path) -> bool:
    """Swap two directories atomically (Linux renameat2); False where that is not supported."""
    rename2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if rename2 is None:
        return False
    at_fdcwd, rename_exchange = -100, 2
    if rename2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EPERM):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _swap_in(stage: Path, target: Path) -> None:
    """Put ``stage`` at ``target``; the old ``target`` (if any) is deleted."""
    for _ in range(10):  # another run may swap its own folder in between: try again
        try:
            if not target.exists():
                os.rename(stage, target)  # fails if a concurrent run just put a folder there
            elif _exchange(stage, target):
                shutil.rmtree(stage, ignore_errors=True)  # now the old folder
            else:
                aside = _new_sibling(target, "old")
                os.rename(target, aside)
                os.rename(stage, target)
                shutil.rmtree(aside, ignore_errors=True)
            return
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENOTEMPTY, errno.EEXIST):
                raise
    raise OSError(f"could not put the run folder in place at {target}: it keeps changing")


def _replace_files(stage: Path, target: Path) -> None:
    """A folder with files of its own (``hydra.run.dir=.``): remove the old results, markers
    first, then move the new ones in, markers last.  Never a mixture, if briefly no result."""
    for name in sorted(RESULT_FILES, key=lambda n: n not in MARKERS):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(target / name)
    for name in sorted(os.listdir(stage), key=lambda n: n in MARKERS):
        os.replace(stage / name, target / name)
    shutil.rmtree(stage, ignore_errors=True)


def _whole(target: Path, carry: Iterable[str]) -> bool:
    """Can ``target`` be replaced as a whole?  Only if it holds nothing but a run's files."""
    if not target.is_dir():
        return not target.exists()
    if Path.cwd().resolve().is_relative_to(target.resolve()):
        return False  # never move the working directory away
    ours = RESULT_FILES | set(carry)
    return all(n in ours or (n.startswith(".") and n.endswith(".tmp")) for n in os.listdir(target))


def _copy_in(target: Path, stage: Path, names: list[str]) -> None:
    """This run's Hydra files, copied (not moved: a run started at the same second into the
    same folder may be writing them right now)."""
    for name in names:
        with contextlib.suppress(OSError, shutil.Error):  # a concurrent run rewrote it
            if (target / name).is_dir():
                shutil.copytree(target / name, stage / name)
            else:
                shutil.copy2(target / name, stage / name)


def _drop(target: Path, names: list[str]) -> None:
    for name in names:
        path = target / name
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


@contextlib.contextmanager
def run_folder(target: str | os.PathLike, carry: Iterable[str] = ()) -> Iterator[Path]:
    """Yield a fresh folder for a run's files; swap it in at ``target`` when the block ends.

    ``carry``: entries of ``target`` that already belong to this run (Hydra's ``.hydra`` and
    log, written before the command starts); they go into the new folder (a log is moved at
    the end, so that it keeps every line).  If the block raises (or is interrupted), the new
    folder is deleted and ``target`` keeps the previous complete run and nothing of this one
    (a ``target`` left empty is removed).
    """
    target = Path(target).absolute()
    target.parent.mkdir(parents=True, exist_ok=True)
    drop_debris(target)
    carry = [n for n in carry if (target / n).exists()]
    whole = _whole(target, carry)
    stage = _new_sibling(target, "staging")
    try:
        _copy_in(target, stage, carry if whole else [])
        yield stage
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        if whole:
            _drop(target, carry)
            with contextlib.suppress(OSError):
                target.rmdir()  # only if empty: nothing of an earlier run to keep
            remove_created_parents(target)  # outputs/<date> made for this run alone
        raise
    with signals_held():
        for name in carry if whole else ():
            if (stage / name).is_file():
                with contextlib.suppress(FileNotFoundError):
                    os.replace(target / name, stage / name)
        (_swap_in if whole else _replace_files)(stage, target)
