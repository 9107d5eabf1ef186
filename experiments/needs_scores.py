"""Every derivation method scored against people on LoCoMo, calibrated without LoCoMo's answers.

    python experiments/needs_scores.py    # writes experiments/results/needs_scores.{md,json} (~3 min)

1. LoCoMo, placement ``end``, the step being the answer turn (question and answer; and, for
   comparison, the question alone): each method of ``memlens.datasets.needs_derivation`` at its
   default settings, scored per need against the human evidence by
   ``memlens.datasets.score_needs`` (micro-averaged; groups of alternatives counted as
   ``experiments/derivation.py`` counts them), with the plain baseline of the issue (BM25 top 1,
   no stemming, no dates) beside them.
2. Calibration without LoCoMo's test conversations: each method's threshold set on five
   conversations for a target precision fixed beforehand (0.6: a derived need right more often
   than not, with a margin), scored on the other five, and the other way round; the two halves'
   counts pooled.  Nothing is chosen by looking at the scored half.
3. The precision-recall curve of each method: its threshold grid (strict to loose) over all ten
   conversations.
4. tau-bench airline (``args``): the share of tool-call argument values traced to an earlier
   message, counted whole as before this change and with commands and prose split into values.
"""

from __future__ import annotations

import json
import sys

from common import RESULTS, stamp
from memlens.datasets.calibrate_needs import GRIDS, calibrate, curve
from memlens.datasets.convert_locomo import convert_locomo
from memlens.datasets.convert_taubench import convert_taubench, trajectories
from memlens.datasets.needs_derivation import Earlier, NeedsSettings, argument_values, holders
from memlens.datasets.rederive import derive_events
from memlens.datasets.score_needs import Tally, score_events

from memlens._util.atomic import write_text
from memlens.config.store import DATA_DIR

LOCOMO = DATA_DIR / "locomo" / "locomo10.json"
TAUBENCH = DATA_DIR / "taubench" / "gpt-4o-airline.json"
TARGET = 0.6
METHODS = ("overlap", "embedding", "bm25", "union")
PLAIN = {"method": "bm25", "bm25_top_k": 1, "bm25_stem": False, "item_dates": False}


def fmt(x) -> str:
    return "-" if x is None else f"{x:.3f}"


def row(name: str, s: dict) -> str:
    return (f"| {name} | {fmt(s['precision'])} | {fmt(s['recall'])} | {fmt(s['f1'])} | "
            f"{s['derived_needs']:,} |")  # fmt: skip


def scored(events: list[dict], settings: NeedsSettings) -> dict:
    derived, _ = derive_events(events, settings, keep_empty=True)
    return score_events(derived, events).as_dict()


def defaults_table(events: list[dict]) -> tuple[list[str], dict]:
    """Every method at its defaults, from the question alone and from question and answer."""
    lines = ["| method (step text) | precision | recall | F1 | derived needs |",
             "|---|---:|---:|---:|---:|"]  # fmt: skip
    out = {}
    for answer in (False, True):
        step = "question and answer" if answer else "question alone"
        for name, kw in [("plain BM25 top 1", PLAIN), *((m, {"method": m}) for m in METHODS)]:
            s = scored(events, NeedsSettings(**{**kw, "answer": answer}))
            out[f"{name} ({step})"] = s
            lines.append(row(f"{name} ({step})", s))
            print(lines[-1], file=sys.stderr)
    return lines, out


def halves(events: list[dict]) -> tuple[list[dict], list[dict]]:
    streams = list(dict.fromkeys(e["stream"] for e in events))
    first = set(streams[: len(streams) // 2])
    return ([e for e in events if e["stream"] in first],
            [e for e in events if e["stream"] not in first])  # fmt: skip


def calibrated_table(events: list[dict]) -> tuple[list[str], dict]:
    """Each method calibrated on one half for ``TARGET`` precision, scored on the other."""
    a, b = halves(events)
    lines = [f"| method | threshold set on half 1 / half 2 (target precision {TARGET}) | "
             "precision | recall | F1 | derived needs |", "|---|---|---:|---:|---:|---:|"]  # fmt: skip
    out = {}
    for method in GRIDS:
        key, _ = GRIDS[method]
        pooled, chosen = Tally(), []
        for cal, test, name in ((a, b, "half 1"), (b, a, "half 2")):
            s, _ = calibrate(cal, NeedsSettings(method=method), TARGET, name)
            chosen.append(f"{key}={getattr(s, key)}")
            derived, _ = derive_events(test, s, keep_empty=True)
            got = {e["id"]: e["needs"] for e in derived if e["event"] == "request"}
            for e in test:
                if e["event"] == "request":
                    pooled.add(got.get(e["id"], []), e["needs"])
        s = pooled.scores()
        out[method] = {**s, "thresholds": chosen}
        lines.append(f"| {method} | {' / '.join(chosen)} | {fmt(s['precision'])} | "
                     f"{fmt(s['recall'])} | {fmt(s['f1'])} | {s['derived_needs']:,} |")  # fmt: skip
        print(lines[-1], file=sys.stderr)
    return lines, out


def curves_table(events: list[dict]) -> tuple[list[str], dict]:
    lines, out = [], {}
    for method in GRIDS:
        key, _ = GRIDS[method]
        points = curve(events, NeedsSettings(method=method))
        out[method] = [{key: v, **s} for v, s in points]
        lines += [f"#### {method} ({key}, strict to loose)", "",
                  f"| {key} | precision | recall | F1 | derived needs |",
                  "|---:|---:|---:|---:|---:|"]  # fmt: skip
        lines += [row(str(v), s) for v, s in points] + [""]
    return lines, out


def by_type_table(s: dict) -> list[str]:
    lines = [
        "| request type | precision | recall | F1 | derived needs |",
        "|---|---:|---:|---:|---:|",
    ]
    return lines + [row(k, v) for k, v in s["by_type"].items()]


def tau_share() -> dict:
    """Argument values traced: whole values (the old counting) and with commands split."""
    whole = found = 0
    for conv in trajectories(TAUBENCH):
        earlier = []
        for msg in conv.messages:
            for _, _, args in msg.calls:
                for _, value in argument_values(args):
                    whole += 1
                    found += bool(holders(value, earlier)[0])
            earlier.append(Earlier("x", msg.text, msg.role == "system"))
            earlier += [Earlier("c", f"{n}({t})") for n, t, _ in msg.calls]
    _, header = convert_taubench(TAUBENCH, commands=True)
    r = header["report"]
    return {"before_values": whole, "before_traced": found,
            "after_values": r["argument_values"], "after_untraced": r["values_unmatched"],
            "after_traced": r["argument_values"] - r["values_unmatched"],
            "untraced_by_tool": header["untraced_by_tool"]}  # fmt: skip


def main() -> int:
    events, _ = convert_locomo(LOCOMO, placement="end")
    lines = ["# Derived needs against people (LoCoMo) and argument values traced (tau-bench)", "",
             f"{stamp()}; protocol in the script's docstring.", "",
             "## LoCoMo, placement `end`: every method at its defaults", ""]  # fmt: skip
    t1, defaults = defaults_table(events)
    lines += [*t1, "", f"## Calibrated on one half of the conversations (target precision "
              f"{TARGET}), scored on the other", ""]  # fmt: skip
    t2, cal = calibrated_table(events)
    best = defaults["bm25 (question and answer)"]
    lines += [*t2, "", "## bm25 (question and answer, defaults) by LoCoMo category", "",
              *by_type_table(best), "", "## Precision-recall curves (all ten conversations)", ""]  # fmt: skip
    t3, curves = curves_table(events)
    tau = tau_share()
    lines += [*t3, "## tau-bench airline: argument values traced", "",
              "| counting | values | traced | share |", "|---|---:|---:|---:|",
              f"| whole values (before) | {tau['before_values']:,} | {tau['before_traced']:,} | "
              f"{tau['before_traced'] / tau['before_values']:.3f} |",
              f"| commands and prose split (after) | {tau['after_values']:,} | "
              f"{tau['after_traced']:,} | {tau['after_traced'] / tau['after_values']:.3f} |", "",
              f"Untraced values by tool (after): {tau['untraced_by_tool']}", ""]  # fmt: skip
    write_text(RESULTS / "needs_scores.md", "\n".join(lines))
    payload = {"defaults": defaults, "calibrated": cal, "curves": curves, "taubench": tau}
    write_text(RESULTS / "needs_scores.json", json.dumps(payload, indent=1, default=str))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
