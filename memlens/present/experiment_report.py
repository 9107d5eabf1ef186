"""``memlens report EXPERIMENT``: one Markdown and HTML report of an MLflow experiment.

    memlens report memlens                                  # ./mlflow.db, into reports/memlens/
    memlens report memlens-figures --tracking-uri http://127.0.0.1:5000 --out site/

Every sweep (a parent run: ``compare``, ``recommend``, an experiment command) becomes one
section: its sweep id, commit, status counts and one row per job (child run) with the trace,
policy, budget, the summary metrics and the job's status (a FAILED job shows its error).  Runs
without children (``simulate``) are listed in a last table.  Everything is read from the
tracking store, so the report works for any team's server, not only for local runs.

(``memlens.analyze.report`` is something else: the per-run Report a replay produces.)
"""

from __future__ import annotations

import argparse
import html
import sys
from collections import defaultdict
from pathlib import Path

METRICS = ["hit_rate", "request_success", "total_cost_usd", "regret"]
PARENT = "mlflow.parentRunId"


def fetch(uri: str, experiment: str) -> tuple[object, list]:
    """The experiment and every run in it (all pages), oldest first."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        names = sorted(e.name for e in client.search_experiments())
        raise LookupError(f"no MLflow experiment named {experiment!r} in {uri} "
                          f"(experiments: {', '.join(names) or 'none'})")  # fmt: skip
    runs, token = [], None
    while True:
        page = client.search_runs([exp.experiment_id], max_results=1000, page_token=token,
                                  order_by=["attributes.start_time ASC"])  # fmt: skip
        runs += list(page)
        token = page.token
        if not token:
            return exp, runs


def job_row(run) -> list[str]:
    p, m = run.data.params, run.data.metrics
    trace = Path(p.get("trace", "-")).name
    cells = [trace, p.get("policy", "-"), p.get("budget", "-")]
    cells += [f"{m[k]:.4f}" if k in m else "-" for k in METRICS]
    status = run.info.status
    if status == "FAILED" and "memlens.error" in run.data.tags:
        status += ": " + run.data.tags["memlens.error"][:120]
    return [*cells, status]


def sort_key(cells: list[str]):
    budget = int(cells[2]) if cells[2].isdigit() else 0
    return (cells[0], cells[1], budget)


def sections(runs: list) -> list[tuple[str, list[str], list[str], list[list[str]]]]:
    """(heading, facts, header, rows) of every sweep, then of the runs without children."""
    children = defaultdict(list)
    for r in runs:
        if PARENT in r.data.tags:
            children[r.data.tags[PARENT]].append(r)
    header = ["trace", "policy", "budget", *METRICS, "status"]
    out, singles = [], []
    for r in runs:
        if PARENT in r.data.tags:
            continue
        kids = children.get(r.info.run_id, [])
        if not kids:
            singles.append(r)
            continue
        counts = defaultdict(int)
        for k in kids:
            counts[k.info.status] += 1
        p, t = r.data.params, r.data.tags
        facts = [f"run `{r.info.run_id}` ({r.info.status})",
                 f"sweep id {p.get('sweep_id', t.get('memlens.sweep_id', '-'))}",
                 f"commit {t.get('memlens.git_commit', p.get('git_commit', '-'))}",
                 f"jobs: {len(kids)} recorded ("
                 + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + ")"
                 + (f", {p['jobs_skipped']} skipped as finished earlier"
                    if p.get("jobs_skipped", "0") != "0" else "")]  # fmt: skip
        rows = sorted((job_row(k) for k in kids), key=sort_key)
        out.append((f"{r.info.run_name or r.info.run_id}", facts, header, rows))
    if singles:
        rows = sorted((job_row(r) for r in singles), key=sort_key)
        out.append(("runs without a sweep", [f"{len(singles)} run(s)"], header, rows))
    return out


def markdown(title: str, intro: list[str], secs) -> str:
    lines = [f"# {title}", "", *intro, ""]
    for heading, facts, header, rows in secs:
        lines += [f"## {heading}", "", "; ".join(facts), "",
                  "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]  # fmt: skip
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
        lines.append("")
    return "\n".join(lines)


def to_html(title: str, intro: list[str], secs) -> str:
    e = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(title)}</title>",
             "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}"
             "td:nth-child(n+3){text-align:right}</style></head><body>",
             f"<h1>{e(title)}</h1>", *[f"<p>{e(line)}</p>" for line in intro]]  # fmt: skip
    for heading, facts, header, rows in secs:
        parts += [f"<h2>{e(heading)}</h2>", f"<p>{e('; '.join(facts))}</p>", "<table><tr>",
                  *[f"<th>{e(h)}</th>" for h in header], "</tr>"]  # fmt: skip
        parts += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in rows]
        parts.append("</table>")
    return "\n".join([*parts, "</body></html>", ""])


def build(experiment: str, uri: str, out: Path) -> list[Path]:
    """Write report.md and report.html of ``experiment`` into ``out``; their paths."""
    from memlens._util.atomic import write_text
    from memlens.analyze.report import git_commit

    exp, runs = fetch(uri, experiment)
    secs = sections(runs)
    title = f"MLflow experiment {experiment}"
    intro = [f"Tracking store: {uri}; experiment id {exp.experiment_id}; {len(runs)} run(s), "
             f"{len(secs)} section(s).", f"Report made by memlens at commit "
             f"{(git_commit() or 'unknown')[:12]}."]  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "report.md", out / "report.html"]
    write_text(paths[0], markdown(title, intro, secs))
    write_text(paths[1], to_html(title, intro, secs))
    return paths


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="memlens report", description=__doc__.splitlines()[0])
    ap.add_argument("experiment", help="the MLflow experiment's name")
    ap.add_argument("--tracking-uri", default="sqlite:///mlflow.db")
    ap.add_argument("--out", type=Path, default=None, help="folder (default reports/EXPERIMENT)")
    args = ap.parse_args(argv)
    from memlens.config.schema import check_tracking_uri

    try:
        check_tracking_uri(args.tracking_uri)
        if args.tracking_uri.startswith("sqlite:///"):
            db = Path(args.tracking_uri.removeprefix("sqlite:///"))
            if not db.is_file():
                raise LookupError(f"--tracking-uri {args.tracking_uri}: no such database {db}")
        paths = build(args.experiment, args.tracking_uri,
                      args.out or Path("reports") / args.experiment)  # fmt: skip
    except (LookupError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(str(p) for p in paths))
    return 0
