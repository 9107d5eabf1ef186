"""Derived needs measured against people, and how much the converters' old defaults moved verdicts.

    python experiments/derivation.py      # writes experiments/results/derivation.md (~2 min)

1. LoCoMo as logs.  LoCoMo's questions come with the turns a person marked as their evidence.
   Drop that evidence, treat each conversation as a log and each question as a step, derive the
   needs with every method of ``memlens.datasets.needs_derivation`` (default settings), and
   score them against the human evidence, per need, micro-averaged over every question:
   precision = derived needs that are evidence / derived needs; recall = evidence turns a
   derived need names / evidence turns.  A group of alternatives counts as one derived need,
   correct when any member is evidence, and recalls every member that is evidence (only
   ``args`` makes groups, and LoCoMo has no tool calls, so it derives nothing here).  Then
   every registered policy replays the human trace and each derived trace (questions with no
   derived need dropped) at budgets 1024 and 2048, and the rankings by hit rate are compared
   (``memlens.analyze.stability``: Kendall's tau-b with ``scipy.stats.kendalltau``, and the pairs that
   flip).  Both placements: ``end`` (the benchmark's protocol; a fair test of derivation) and
   ``after_evidence`` (each question placed after its latest evidence session, so the log
   itself leaks where the evidence is: read its precision with that in mind).
2. The old converter defaults.  Each policy's hit rate on tau-bench airline with
   ``source=first``, ``last`` and ``alternatives`` (the new default), and on LoCoMo with
   speaker B typed ``llm_thought`` (the old default) and ``user_input`` (the new one).
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
from pathlib import Path

from memlens.datasets.convert_locomo import convert_locomo
from memlens.datasets.convert_taubench import convert_taubench
from memlens.datasets.needs_derivation import METHODS, Deriver, Earlier, NeedsSettings, Step

from memlens._util.atomic import write_text
from memlens.analyze.stability import agreement
from memlens.config.compose import run_settings
from memlens.config.store import DATA_DIR, registered_policies
from memlens.runs.pipeline import load_trace, run
from memlens.trace.io import write_trace

RESULTS = Path(__file__).resolve().parent / "results"
LOCOMO = DATA_DIR / "locomo" / "locomo10.json"
TAUBENCH = DATA_DIR / "taubench" / "gpt-4o-airline.json"
BUDGETS = (1024, 2048)
TAU_BUDGETS = (2048, 4096)


# ------------------------------------------------------------------------ derivation
def derive(events: list[dict], settings: NeedsSettings) -> dict[str, list]:
    """Every request's derived needs (by request id), from the writes before it in its stream."""
    writes = [e for e in events if e["event"] == "write"]
    requests = [e for e in events if e["event"] == "request"]
    deriver = Deriver(settings, [w["text"] for w in writes], [r["text"] for r in requests])
    row_of = {w["id"]: i for i, w in enumerate(writes)}
    earlier: dict[str, list[Earlier]] = {}
    out, k = {}, 0
    for e in events:
        if e["event"] == "write":
            earlier.setdefault(e["stream"], []).append(Earlier(e["id"], e["text"]))
        elif e["event"] == "request":
            before = earlier.get(e["stream"], [])
            step = Step(e["text"], [], row=k)
            out[e["id"]] = deriver.derive(step, before, [row_of[b.id] for b in before]).needs
            k += 1
    return out


def score(events: list[dict], derived: dict[str, list]) -> dict:
    """Micro-averaged precision and recall of ``derived`` against each request's needs."""
    tp = n_derived = recalled = n_human = covered = 0
    for e in (e for e in events if e["event"] == "request"):
        human = set(e["needs"])
        got = derived[e["id"]]
        members = set()
        for need in got:
            group = {need} if isinstance(need, str) else set(need)
            tp += bool(group & human)
            members |= group
        n_derived += len(got)
        recalled += len(human & members)
        n_human += len(human)
        covered += bool(got)
    return {"precision": tp / n_derived if n_derived else None, "recall": recalled / n_human,
            "derived": n_derived, "human": n_human, "questions_with_needs": covered,
            "questions": sum(e["event"] == "request" for e in events)}  # fmt: skip


def with_needs(events: list[dict], derived: dict[str, list]) -> list[dict]:
    """The events with every request's needs replaced (requests left with none dropped)."""
    out = []
    for e in events:
        if e["event"] == "request":
            if not derived[e["id"]]:
                continue
            e = {**e, "needs": derived[e["id"]], "meta": {**e["meta"], "evidence": "derived"}}
        out.append(e)
    return out


# ----------------------------------------------------------------------------- replay
def hit_rates(path: Path, budgets) -> dict[int, dict[str, float]]:
    """{budget: {policy: hit rate}} of every registered policy (oracle bounds off)."""
    base = ["oracle.enabled=false", "mlflow.enabled=false", f"trace={path}"]
    out: dict[int, dict[str, float]] = {b: {} for b in budgets}
    for name in registered_policies():
        settings = run_settings([*base, f"policy={name}"])
        trace = load_trace(settings)
        for b in budgets:
            out[b][name] = run(dataclasses.replace(settings, budget=b), trace)[1].overall[
                "hit_rate"
            ]
    return out


def written(tmp: Path, name: str, events: list[dict], header: dict) -> Path:
    path = tmp / f"{name}.jsonl.gz"
    write_trace(path, events, header=header)
    return path


def fmt(x, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


# ----------------------------------------------------------------------------- tables
def locomo_section(tmp: Path, placement: str) -> list[str]:
    """Precision/recall of every method and the ranking agreement at each budget."""
    events, header = convert_locomo(LOCOMO, placement=placement)
    human = hit_rates(written(tmp, f"human-{placement}", events, header), BUDGETS)
    lines = [f"### LoCoMo, placement `{placement}`", "",
             "| method | precision | recall | derived needs | questions with a need | "
             + " | ".join(f"Kendall tau @{b} | flips @{b}" for b in BUDGETS) + " |",
             "|---|---:|---:|---:|---:|" + "---:|---:|" * len(BUDGETS)]  # fmt: skip
    notes, table = [], {"human evidence": human}
    for method in METHODS:
        settings = NeedsSettings(method=method)
        derived = derive(events, settings)
        s = score(events, derived)
        cells = [fmt(s["precision"]), fmt(s["recall"]), f"{s['derived']:,}",
                 f"{s['questions_with_needs']:,} of {s['questions']:,}"]  # fmt: skip
        if not s["derived"]:
            cells += ["n/a (nothing derived)", "-"] * len(BUDGETS)
        else:
            head = {**header, "needs": settings.describe(), "evidence": "derived"}
            path = written(tmp, f"{method}-{placement}", with_needs(events, derived), head)
            table[method] = rates = hit_rates(path, BUDGETS)
            for b in BUDGETS:
                a = agreement(method, human[b], rates[b])
                cells += [fmt(a.tau, "+.3f"), str(len(a.flips))]
                if a.flips:
                    pairs = ", ".join(f"{p} > {q} becomes {q} > {p}" for p, q in a.flips)
                    notes.append(f"* `{method}` @{b}: {pairs}")
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
        print(lines[-1], file=sys.stderr)
    lines += ["", "Flipped pairs (against the ranking under the human evidence):", "", *notes, ""]
    return [*lines, *rates_table(f"Hit rates, placement `{placement}`", table, BUDGETS)]


def rates_table(title: str, variants: dict[str, dict[int, dict[str, float]]], budgets) -> list[str]:
    """Each policy's hit rate under each variant (columns), one row per policy and budget."""
    names = list(variants)
    lines = [f"#### {title}", "", "| policy | budget | " + " | ".join(names) + " |",
             "|---|---:|" + "---:|" * len(names)]  # fmt: skip
    for p in registered_policies():
        for b in budgets:
            lines.append(f"| {p} | {b} | " + " | ".join(f"{variants[n][b][p]:.3f}" for n in names)
                         + " |")  # fmt: skip
    return [*lines, ""]


SENSITIVITY = (
    {"method": "overlap", "overlap_top_k": 1}, {"method": "overlap", "overlap_top_k": 5},
    {"method": "overlap", "overlap_min_terms": 2},
    {"method": "embedding", "embedding_threshold": 0.2},
    {"method": "embedding", "embedding_threshold": 0.5},
    {"method": "embedding", "embedding_top_k": 1}, {"method": "embedding", "embedding_dim": 256},
)  # fmt: skip


def sensitivity() -> list[str]:
    """Precision and recall (placement ``end``) as one setting moves off its default."""
    events, _ = convert_locomo(LOCOMO, placement="end")
    lines = ["### Settings off their defaults (LoCoMo, placement `end`)", "",
             "| settings | precision | recall | derived needs |", "|---|---:|---:|---:|"]  # fmt: skip
    for kw in SENSITIVITY:
        s = score(events, derive(events, NeedsSettings(**kw)))
        shown = " ".join(f"{k}={v}" for k, v in kw.items())
        lines.append(f"| {shown} | {fmt(s['precision'])} | {fmt(s['recall'])} | {s['derived']:,} |")
    return [*lines, ""]


def choices_table(
    title: str, variants: dict[str, dict[int, dict[str, float]]], budgets
) -> list[str]:
    """Each policy's hit rate under each variant, per budget, and the spread between them."""
    names = list(variants)
    lines = [f"### {title}", "", "| policy | budget | " + " | ".join(names) + " | spread |",
             "|---|---:|" + "---:|" * (len(names) + 1)]  # fmt: skip
    for p in registered_policies():
        for b in budgets:
            vals = [variants[n][b][p] for n in names]
            lines.append(f"| {p} | {b} | " + " | ".join(f"{v:.3f}" for v in vals)
                         + f" | {max(vals) - min(vals):.3f} |")  # fmt: skip
    return [*lines, "", *ranking_notes(variants, budgets), ""]


def ranking_notes(variants: dict[str, dict[int, dict[str, float]]], budgets) -> list[str]:
    """Each variant's ranking against the last (the new default): Kendall tau and flips."""
    *others, default = list(variants)
    out = [
        f"Rankings against `{default}` (Kendall tau; pairs whose order under `{default}` flips):",
        "",
    ]
    for name in others:
        for b in budgets:
            a = agreement(name, variants[default][b], variants[name][b])
            pairs = "; ".join(f"{p} > {q} becomes {q} > {p}" for p, q in a.flips) or "none"
            out.append(f"* `{name}` @{b}: tau {fmt(a.tau, '+.3f')}, {len(a.flips)} flips: {pairs}")
    return out


def old_choices(tmp: Path) -> list[str]:
    tau = {}
    for source in ("first", "last", "alternatives"):
        events, header = convert_taubench(TAUBENCH, source=source)
        tau[f"source={source}"] = hit_rates(
            written(tmp, f"tau-{source}", events, header), TAU_BUDGETS
        )
    out = choices_table("tau-bench airline: which earlier message is a value's source", tau,
                        TAU_BUDGETS)  # fmt: skip
    for placement in ("end", "after_evidence"):
        loco = {}
        for ty in ("llm_thought", "user_input"):
            events, header = convert_locomo(LOCOMO, placement=placement, speaker_b_type=ty)
            path = written(tmp, f"loco-{placement}-{ty}", events, header)
            loco[f"speaker B {ty}"] = hit_rates(path, BUDGETS)
        out += choices_table(f"LoCoMo, placement `{placement}`: speaker B's item type", loco,
                             BUDGETS)  # fmt: skip
    return out


def main() -> int:
    lines = ["# Derived needs against human evidence, and the converters' old defaults", "",
             "Generated by `python experiments/derivation.py` (see its docstring for the "
             "protocol). Default settings of every method: "
             f"`{NeedsSettings().__dict__}`.", "",
             "## Each derivation method against LoCoMo's human evidence", ""]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for placement in ("end", "after_evidence"):
            lines += locomo_section(Path(tmp), placement)
        lines += sensitivity()
        lines += ["## How much the old converter defaults move each policy (hit rate)", ""]
        lines += old_choices(Path(tmp))
    write_text(RESULTS / "derivation.md", "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
