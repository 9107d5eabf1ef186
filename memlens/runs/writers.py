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

from memlens._util.atomic import atomic_path, write_json, write_text
from memlens._util.folders import remove_created_parents
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


def write_parquet(path: Path, columns: dict, rows_per_group: int = ROW_GROUP) -> None:
    """Columns (numpy arrays, lists, or the list-like views of ``memlens.trace.packed``) as one
    Parquet file, converted and written a row group at a time: a run of tens of millions of
    moves never holds its whole table as Arrow (or Python) objects."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = len(next(iter(columns.values()))) if columns else 0
    with atomic_path(path) as tmp, contextlib.ExitStack() as stack:
        writer = None
        for lo in range(0, max(n, 1), rows_per_group):
            hi = min(n, lo + rows_per_group)
            batch = pa.table({k: arrow_rows(v, lo, hi) for k, v in columns.items()})
            if writer is None:
                writer = stack.enter_context(pq.ParquetWriter(tmp, batch.schema))
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
def event_log_started(out_dir: Path, run: Replay) -> Iterator[Future | None]:
    """Start writing the event log (``events.parquet``) on a second thread now, right after
    the replay, so that it overlaps the analyzers as well as the other writers: the log is a
    warm ``simulate``'s longest step (about 2 s for 870,000 events, of a 0.1 s replay; issue
    34), and Arrow's encoding releases the GIL.  Yields its future (None without a log) for
    :func:`write_run`; the block's end waits for the thread."""
    if not run.settings.events.enabled:
        yield None
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    run.tiers  # noqa: B018 (computed once, here, before two threads read it)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="memlens-writer") as pool:
        yield pool.submit(_write_event_log, out_dir, run)


def write_run(out_dir: Path, run: Replay, report: Report, resolved_yaml: str,
              log: Future | None = None) -> list[Path]:  # fmt: skip
    """Every record of one run, in ``out_dir`` (a :func:`run_folder`); returns the paths.

    The event log (the largest file, about a second per million rows) is written on a second
    thread, each file whole and atomic, ``metrics.json`` last: ``log`` is that thread's future
    when :func:`event_log_started` started it already, else it is started here."""
    if log is None and run.settings.events.enabled:
        with event_log_started(out_dir, run) as started:
            return write_run(out_dir, run, report, resolved_yaml, started)
    out_dir.mkdir(parents=True, exist_ok=True)
    s, doc = run.settings, report.to_dict()
    if s.output.moves:
        run.tiers  # noqa: B018
    paths = [out_dir / "per_request.parquet"]
    write_parquet(paths[0], per_request_table(run.trace, run.result, run.retrieval,
                                              s.price_per_mtok, s.costs))  # fmt: skip
    if s.output.moves:
        paths.append(out_dir / "moves.parquet")
        write_parquet(paths[-1], moves_table(run))
    paths.append(out_dir / "resolved_config.yaml")
    write_text(paths[-1], resolved_yaml)
    if log is not None:  # the event log and the static HTML report built from it
        from memlens.present.static_report import write_static_report

        events, columns = log.result()
        paths += [events, write_static_report(out_dir / "report.html", columns, doc)]
    paths.append(out_dir / "metrics.json")
    write_json(paths[-1], doc, flat_lists=True)  # last: its presence means "complete"
    return paths


def _write_event_log(out_dir: Path, run: Replay):
    """``events.parquet`` and the log's columns (``report.html`` is drawn from them)."""
    from memlens.analyze.eventlog import build_event_log, write_event_log
    from memlens.analyze.logviews import EventLog

    cols = build_event_log(run)
    return write_event_log(out_dir / "events.parquet", run, cols), EventLog(cols, run.trace)


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
