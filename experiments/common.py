"""What every experiment command shares: its sweep, its outputs and their provenance stamp.

Each experiment writes into ``experiments/results/``: figures as PNG and PDF (matplotlib, no
display needed), tables as Markdown and LaTeX, each stamped with the command that made it and
the git commit it ran on, so a figure in a paper can be traced back to its code.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"


def commit() -> str:
    """The git commit the numbers came from (``+dirty`` when the tree had edits)."""
    import subprocess

    from memlens.analyze.report import git_commit

    head = git_commit() or "unknown"
    try:
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, capture_output=True, text=True, timeout=30).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        dirty = ""
    return f"{head[:12]}{'+dirty' if dirty else ''}"


def command() -> str:
    return "python " + " ".join([Path(sys.argv[0]).as_posix().split("/memlens/", 1)[-1],
                                 *sys.argv[1:]])  # fmt: skip


def stamp() -> str:
    return f"made by `{command()}` at commit {commit()}"


def compare_settings(overrides: Sequence[str]):
    """``memlens compare <overrides>`` as typed settings (the experiment's sweep)."""
    from memlens.config.compose import compose_config
    from memlens.config.schema import register_configs, resolve

    register_configs()
    store = []  # the repository's store wherever the command is started from (the notebook's)
    if not any(o.startswith("mlflow.tracking_uri=") for o in overrides):
        store = [f"mlflow.tracking_uri=sqlite:///{ROOT / 'mlflow.db'}",
                 f"mlflow.artifact_location={ROOT / 'mlartifacts'}"]  # fmt: skip
    return resolve(compose_config("compare", [*store, *overrides]))


def run_sweep(settings):
    """Every job of ``settings`` through ``memlens.runs.sweep`` (every core, resumable, tracked in
    MLflow as one parent run and a child per job, like ``memlens compare``)."""
    from memlens.cli.replay import compare_jobs
    from memlens.runs.pipeline import load_trace
    from memlens.runs.sweep import execute, new_sweep_id, parent_tags, plan
    from memlens.runs.tracking import log_run, mlflow_run

    paths = settings.traces or [settings.trace]
    traces = {p: load_trace(settings, p) for p in paths}
    jobs = plan(settings, list(compare_jobs(settings)), {p: t.sha256 for p, t in traces.items()})
    name, sweep_id = f"experiment:{Path(sys.argv[0]).stem}", new_sweep_id()
    with mlflow_run(settings.mlflow, run_name=name, tags=parent_tags(name, sweep_id)) as parent:
        sweep = execute(settings, jobs, parent, settings.resume,
                        {p: t.n_events for p, t in traces.items()}, sweep_id)  # fmt: skip
        summary = sweep.summary()
        log_run(parent, {"sweep_id": sweep_id, "jobs": summary["jobs"], "command": command(),
                         "jobs_skipped": summary["skipped"], "jobs_failed": len(summary["failed"])},
                {})  # fmt: skip
    print(sweep.line(), file=sys.stderr)
    if sweep.failed:
        raise SystemExit(f"{len(sweep.failed)} job(s) failed: {sweep.summary()['failed']}")
    return sweep


def save_figure(fig, name: str, out: Path = RESULTS) -> list[Path]:
    """``name``.png and ``name``.pdf, the stamp in the bottom margin."""
    fig.text(0.995, 0.002, stamp(), ha="right", va="bottom", fontsize=6, color="0.4")
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.png", out / f"{name}.pdf"]
    fig.savefig(paths[0], dpi=150, bbox_inches="tight")
    fig.savefig(paths[1], bbox_inches="tight", metadata={"CreationDate": None})
    return paths


def latex_escape(text: str) -> str:
    for a, b in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("_", r"\_"),
                 ("#", r"\#"), ("$", r"\$"), ("[", "{[}"), ("]", "{]}")):  # fmt: skip
        text = text.replace(a, b)
    return text


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def latex_table(header: list[str], rows: list[list[str]], caption: str) -> str:
    cols = "l" * 2 + "r" * (len(header) - 2)
    body = [" & ".join(latex_escape(c) for c in r) + r" \\" for r in rows]
    return "\n".join([r"\begin{table}[t]", r"\centering", r"\small",
                      rf"\begin{{tabular}}{{{cols}}}", r"\toprule",
                      " & ".join(latex_escape(h) for h in header) + r" \\", r"\midrule", *body,
                      r"\bottomrule", r"\end{tabular}",
                      rf"\caption{{{latex_escape(caption)} ({latex_escape(stamp())})}}",
                      r"\end{table}", ""])  # fmt: skip


def write_tables(name: str, title: str, sections: list[tuple[str, list[str], list[list[str]]]],
                 out: Path = RESULTS) -> list[Path]:  # fmt: skip
    """``name``.md (every section under its heading) and ``name``.tex (one table each)."""
    md = [f"# {title}\n", f"_{stamp()}_\n"]
    tex = [f"% {title}: {stamp()}", "% needs \\usepackage{booktabs}", ""]
    for heading, header, rows in sections:
        md += [f"## {heading}\n", markdown_table(header, rows)]
        tex.append(latex_table(header, rows, f"{title}: {heading}"))
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.md", out / f"{name}.tex"]
    paths[0].write_text("\n".join(md))
    paths[1].write_text("\n".join(tex))
    return paths
