"""One replay's results: typed sections assembled into one :class:`Report`.

Every analyzer of the pipeline (metrics, oracle, tiers, retrieval, ...) returns a
:class:`Section`: its own block of metrics.json plus the registered metrics it adds to
``overall`` and ``timing``.  :func:`assemble` checks each contributed key against the metric
registry and builds the report; ``Report.to_dict`` is the metrics.json layout, versioned by
``SCHEMA_VERSION``.  Provenance (package version, git commit, the trace's hash) is part of
every report, so a number can always be traced to the code and the data that produced it.
"""

from __future__ import annotations

import functools
import subprocess
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from memlens.analyze.registry import check_keys, declared

#: Version of the metrics.json layout (2: typed pipeline, provenance, policy_config;
#: 3: ``intervals`` and the per-stream ``stream_parts`` they come from).
SCHEMA_VERSION = 3


@dataclass
class Section:
    """What one analyzer found."""

    name: str  # its block in metrics.json ("" for none)
    data: dict = field(default_factory=dict)
    overall: dict = field(default_factory=dict)  # registered metrics for the whole run
    streams: dict = field(default_factory=dict)  # stream name -> registered metrics
    timing: dict = field(default_factory=dict)  # registered timing figures
    warnings: list[str] = field(default_factory=list)
    # metric -> (num, den) per stream, in the trace's stream order (``Metric.parts``)
    stream_parts: dict = field(default_factory=dict)


@dataclass
class Report:
    trace: dict  # path, sha256, events, streams
    policy: str
    policy_config: dict
    budget: int
    demand_fetch: bool
    seed: int
    outside_oracle_class: bool
    overall: dict
    streams: dict
    timing: dict
    sections: dict[str, dict]
    warnings: list[str]
    schema_version: int = SCHEMA_VERSION
    memlens_version: str = ""
    git_commit: str | None = None
    # metric -> (num array, den array | None) per stream, streams in ``stream_names`` order
    stream_parts: dict = field(default_factory=dict)
    stream_names: list[str] = field(default_factory=list)
    # metric -> memlens.analyze.stats.Interval (filled by the commands, from stream_parts and stats:)
    intervals: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """The metrics.json document."""
        return {
            "schema_version": self.schema_version,
            "memlens_version": self.memlens_version,
            "git_commit": self.git_commit,
            "trace": self.trace,
            "policy": self.policy,
            "policy_config": self.policy_config,
            "budget": self.budget,
            "demand_fetch": self.demand_fetch,
            "seed": self.seed,
            "overall": self.overall,
            "streams": self.streams,
            "timing": self.timing,
            "intervals": {k: iv.to_dict() for k, iv in self.intervals.items()},
            "stream_parts": self.parts_dict(),
            **self.sections,
            "outside_oracle_class": self.outside_oracle_class,
            "warnings": self.warnings,
        }

    def parts_dict(self, arrays: bool = False) -> dict:
        """The raw per-stream parts as JSON: every metric's num and den (null: a total);
        with ``arrays``, the arrays themselves, for a writer that encodes them as those lists
        (``memlens._util.atomic.dumps_flat_lists``)."""
        as_list = (lambda a: a) if arrays else (lambda a: a.tolist())
        parts = {
            k: {"num": as_list(num), "den": None if den is None else as_list(den)}
            for k, (num, den) in self.stream_parts.items()
        }
        return {"streams": list(self.stream_names), "metrics": parts}

    def row(self) -> dict:
        """One row of a comparison table: the run's identity and every overall metric."""
        return {
            "trace": Path(self.trace["path"]).name,
            "policy": self.policy,
            "budget": self.budget,
            **self.overall,
            **self.timing,
        }


def _check_stream_keys(sec: Section) -> None:
    """Every per-stream key declared (the union checked once; the first stream holding an
    unknown key is named): a check per stream was 0.7 s of a 5,800-stream compare."""
    keys = set().union(*sec.streams.values()) if sec.streams else set()
    if keys <= declared().keys():
        return
    for name, values in sec.streams.items():
        check_keys(values, f"section {sec.name or '-'}, stream {name}")


def assemble(identity: dict, sections: list[Section],
             stream_names: list[str] | None = None) -> Report:  # fmt: skip
    """Merge the analyzers' sections into one report (each metric key declared once).

    ``stream_names``: the streams the parts are in the order of (the trace's); None: those
    the sections' rows name, in their order (a report without rows per stream must say)."""
    overall: dict = {}
    streams: dict = {}
    timing: dict = {}
    blocks: dict[str, dict] = {}
    warnings: list[str] = []
    parts: dict = {}
    for sec in sections:
        check_keys(sec.stream_parts, f"section {sec.name or '-'}, stream parts")
        parts.update(sec.stream_parts)
        for target, part in ((overall, sec.overall), (timing, sec.timing)):
            check_keys(part, f"section {sec.name or '-'}")
            target.update(part)
        _check_stream_keys(sec)
        for name, values in sec.streams.items():
            streams.setdefault(name, {}).update(values)
        if sec.name:
            blocks[sec.name] = sec.data
        warnings.extend(sec.warnings)
    return Report(
        **identity,
        overall=overall,
        streams=streams,
        timing=timing,
        sections=blocks,
        warnings=warnings,
        stream_parts=parts,
        stream_names=list(streams) if stream_names is None else list(stream_names),
        memlens_version=package_version(),
        git_commit=git_commit(),
    )


@functools.cache
def package_version() -> str:
    try:
        return metadata.version("memlens")
    except metadata.PackageNotFoundError:
        return "unknown"


@functools.cache
def git_commit() -> str | None:
    """The commit of the checkout MemLens runs from (``+dirty`` if it has local changes)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}+dirty" if dirty else head
