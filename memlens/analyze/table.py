"""Plain-text tables for the terminal (no dependency: the numbers matter, not the borders)."""

from __future__ import annotations

import csv
import io


def fmt(value, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value != value:  # NaN
            return "-"
        if abs(value) >= 100_000:
            return f"{value:,.0f}"
        if abs(value) >= 100:
            return f"{value:,.1f}"
        return f"{value:.{digits}f}"
    return str(value)


def cell(column: str, value) -> str:
    """A value as the metric registry says to print it (plain ``fmt`` for other columns)."""
    from memlens.analyze.registry import declared

    m = declared().get(column)
    return m.format(value) if m is not None else fmt(value)


def interval_cell(column: str, iv, signed: bool = False) -> str:
    """A ``memlens.analyze.stats.Interval`` of a registered metric: ``0.572 [0.550, 0.590]``.

    Rates print with 3 decimals, counts without; a signed difference ends in `` *`` when its
    interval excludes zero; ``0.572 [n<5]`` when there were too few streams for an interval.
    """
    from memlens.analyze.registry import declared

    spec = declared()[column].fmt
    spec = {".4f": ".3f", "d": ",.0f"}.get(spec, spec)
    return iv.cell(spec, signed=signed)


def format_table(rows: list[dict], columns: list[str]) -> str:
    cells = [[cell(c, r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[k]) for row in cells]) for k, c in enumerate(columns)]
    line = "  ".join(c.ljust(w) for c, w in zip(columns, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    for row in cells:
        out.append(
            "  ".join(v.rjust(w) if _numeric(v) else v.ljust(w) for v, w in zip(row, widths))
        )
    return "\n".join(out)


def _numeric(text: str) -> bool:
    """A number, or a number followed by its interval (right-aligned either way)."""
    head = text.split(" ", 1)[0].lstrip("+")
    return head.replace(",", "").replace(".", "", 1).replace("-", "", 1).isdigit()


def to_csv(rows: list[dict], columns: list[str]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({c: ("" if r.get(c) is None else r.get(c)) for c in columns})
    return buf.getvalue()
