"""Every derivation method scored against people on LoCoMo, calibrated without LoCoMo's answers.

    python experiments/needs_scores.py    # writes experiments/results/needs_scores.{md,json} (26 min on 2 busy cores)

1. LoCoMo, placement ``end``, the step being the answer turn (question and answer; and, for
   comparison, the question alone): each method of ``memlens.datasets.needs_derivation`` at its
   default settings, scored per need against the human evidence by
   ``memlens.datasets.score_needs`` (micro-averaged; groups of alternatives counted as
   ``experiments/derivation.py`` counts them), with the plain baseline of the issue (BM25 top 1,
   no stemming, no dates) beside them.
2. Calibration without LoCoMo's test conversations: each method's threshold set on five
   conversations for a target precision fixed beforehand (0.6: a derived need right more often
   than not, with a margin), scored on the other five, and the other way round; the two halves'
   counts pooled.  Nothing is chosen by looking at the scored half.  ``fusion``'s five knobs
   are set together the same way (``calibrate_needs.search``).
2b. Per held-out half, each calibrated method against the plain baseline (BM25 top 1, question
   and answer) on the same questions: the paired F1 difference and its 95% interval, by a
   seeded bootstrap (2,000 resamples, ``memlens.analyze.stats.resample_counts``) over the
   half's questions and, coarser, over its five conversations.
3. The precision-recall curve of each method: its threshold grid (strict to loose) over all ten
   conversations.
4. tau-bench airline (``args``): the share of tool-call argument values traced to an earlier
   message, counted whole as before this change and with commands and prose split into values.
5. A second labelled source of another shape: the bundled tau-bench trace, whose needs are the
   messages that introduced each tool-call argument value (``args``), taken as the reference
   for the methods that read only the step's text (the call, no recorded answer): plain BM25
   top 1, ``bm25`` and ``fusion`` at their defaults (set on LoCoMo, nothing tuned here), the
   paired F1 difference to plain BM25 with its interval over the 200 trajectories.
6. What each rule of ``fusion`` brings: each switched off in turn from the defaults, F1 on
   LoCoMo (all ten conversations: the defaults were calibrated there, so this is in-sample)
   and on the tau-bench source of 5 (nothing calibrated there).
"""

from __future__ import annotations

import json
import sys

import numpy as np
from common import RESULTS, stamp
from memlens.datasets.calibrate_needs import FUSION_KNOBS, GRIDS, calibrate, curve
from memlens.datasets.convert_locomo import convert_locomo
from memlens.datasets.convert_taubench import convert_taubench, trajectories
from memlens.datasets.needs_derivation import Earlier, NeedsSettings, argument_values, holders
from memlens.datasets.rederive import derive_events, read_events
from memlens.datasets.score_needs import Tally, score_events

from memlens._util.atomic import write_text
from memlens.analyze.stats import resample_counts
from memlens.config.store import DATA_DIR

LOCOMO = DATA_DIR / "locomo" / "locomo10.json"
TAUBENCH = DATA_DIR / "taubench" / "gpt-4o-airline.json"
TARGET = 0.6
METHODS = ("overlap", "embedding", "bm25", "fusion", "union")
TAU_TRACE = DATA_DIR / "taubench" / "airline.jsonl.gz"
BOOT = 2000
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
    out, per_half = {}, {}
    for method in GRIDS:
        pooled, chosen = Tally(), []
        for cal, test, name in ((a, b, "half 1"), (b, a, "half 2")):
            s, _ = calibrate(cal, NeedsSettings(method=method), TARGET, name)
            chosen.append(knobs_of(s))
            tallies = per_request(test, s)
            per_half[(method, name)] = tallies
            for t in tallies.values():
                for k in ("correct", "derived", "recalled", "reference"):
                    setattr(pooled, k, getattr(pooled, k) + getattr(t, k))
        s = pooled.scores()
        out[method] = {**s, "thresholds": chosen}
        lines.append(f"| {method} | {' / '.join(chosen)} | {fmt(s['precision'])} | "
                     f"{fmt(s['recall'])} | {fmt(s['f1'])} | {s['derived_needs']:,} |")  # fmt: skip
        print(lines[-1], file=sys.stderr)
    return lines, out, per_half


def knobs_of(s: NeedsSettings) -> str:
    """The calibrated knobs of ``s`` (one for most methods, five for ``fusion``)."""
    keys = FUSION_KNOBS if s.method == "fusion" else [GRIDS[s.method][0]]
    return ", ".join(f"{k}={getattr(s, k)}" for k in keys)


def per_request(events: list[dict], settings: NeedsSettings) -> dict[str, Tally]:
    """Each request's counts (correct, derived, recalled, reference) under ``settings``."""
    derived, _ = derive_events(events, settings, keep_empty=True)
    got = {e["id"]: e["needs"] for e in derived if e["event"] == "request"}
    out = {}
    for e in events:
        if e["event"] == "request":
            out[e["id"]] = Tally()
            out[e["id"]].add(got.get(e["id"], []), e["needs"])
    return out


def f1_of(counts: np.ndarray) -> np.ndarray:
    """Micro F1 of summed ``(correct, derived, recalled, reference)`` counts, row-wise."""
    with np.errstate(divide="ignore", invalid="ignore"):
        p, r = counts[..., 0] / counts[..., 1], counts[..., 2] / counts[..., 3]
        return np.nan_to_num(2 * p * r / (p + r))


def paired_f1(a: dict[str, Tally], b: dict[str, Tally], unit) -> dict:
    """F1 of ``a`` minus F1 of ``b`` on the same requests, with a 95% percentile interval from
    2,000 paired resamples of the units ``unit(request id)`` (questions or conversations)."""
    units = sorted({unit(i) for i in a})
    pos = {u: k for k, u in enumerate(units)}
    ca, cb = np.zeros((len(units), 4)), np.zeros((len(units), 4))
    for i in a:
        for c, t in ((ca, a[i]), (cb, b[i])):
            c[pos[unit(i)]] += (t.correct, t.derived, t.recalled, t.reference)
    counts = resample_counts(len(units), BOOT, 0)
    reps = f1_of(np.einsum("bu,uk->bk", counts, ca)) - f1_of(np.einsum("bu,uk->bk", counts, cb))
    low, high = np.quantile(reps, [0.025, 0.975])
    est = float(f1_of(ca.sum(0)) - f1_of(cb.sum(0)))
    return {"difference": est, "low": float(low), "high": float(high), "units": len(units)}


def halves_table(events: list[dict], per_half: dict) -> tuple[list[str], dict]:
    """Per held-out half: each calibrated method's F1 beside plain BM25 top 1, paired."""
    a, b = halves(events)
    lines = ["| held-out half | method | F1 | plain BM25 top 1 F1 | difference [95% interval, "
             "over questions] | [over conversations] |", "|---|---|---:|---:|---|---|"]  # fmt: skip
    out = {}
    for name, test in (("half 1", b), ("half 2", a)):
        plain = per_request(test, NeedsSettings(**PLAIN))
        base = f1_of(np.array([[sum(getattr(t, k) for t in plain.values()) for k in
                                ("correct", "derived", "recalled", "reference")]]))[0]  # fmt: skip
        for method in ("bm25", "fusion"):
            mine = per_half[(method, name)]
            q = paired_f1(mine, plain, lambda i: i)
            c = paired_f1(mine, plain, lambda i: i.split("/")[0])
            out[f"{method} {name}"] = {"plain_f1": float(base), "questions": q,
                                       "conversations": c}  # fmt: skip
            lines.append(f"| calibrated on {name}, scored on the other | {method} | "
                         f"{base + q['difference']:.3f} | {base:.3f} | {q['difference']:+.3f} "
                         f"[{q['low']:+.3f}, {q['high']:+.3f}] | [{c['low']:+.3f}, "
                         f"{c['high']:+.3f}] |")  # fmt: skip
            print(lines[-1], file=sys.stderr)
    return lines, out


def second_source() -> tuple[list[str], dict]:
    """tau-bench: text-only methods against the ``args`` needs (values traced to messages)."""
    _, events = read_events(TAU_TRACE)
    runs = {"plain BM25 top 1": NeedsSettings(**PLAIN), "bm25": NeedsSettings(method="bm25"),
            "fusion": NeedsSettings(method="fusion")}  # fmt: skip
    tallies = {name: per_request(events, s) for name, s in runs.items()}
    lines = ["| method (defaults) | precision | recall | F1 | derived needs | F1 difference to "
             "plain [95% interval, over trajectories] |", "|---|---:|---:|---:|---:|---|"]  # fmt: skip
    out = {}
    for name, t in tallies.items():
        pooled = Tally()
        for x in t.values():
            for k in ("correct", "derived", "recalled", "reference"):
                setattr(pooled, k, getattr(pooled, k) + getattr(x, k))
        s = pooled.scores()
        d = paired_f1(t, tallies["plain BM25 top 1"], lambda i: i.split("/")[0])
        out[name] = {**s, "vs_plain": d}
        diff = "-" if name.startswith("plain") else (
            f"{d['difference']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]")  # fmt: skip
        lines.append(f"{row(name, s)} {diff} |")
        print(lines[-1], file=sys.stderr)
    return lines, out


ABLATIONS = {
    "fusion (defaults)": {},
    "answer not weighted (fusion_answer_weight=1)": {"fusion_answer_weight": 1.0},
    "no embedding (fusion_embedding_weight=0)": {"fusion_embedding_weight": 0.0},
    "listed values not traced apart (fusion_part_ratio=1)": {"fusion_part_ratio": 1.0},
    "top item only (fusion_ratio=1, fusion_top_k=1)": {"fusion_ratio": 1.0, "fusion_top_k": 1},
    "echoes kept (fusion_echo_window=0)": {"fusion_echo_window": 0},
    "BM25 at the library's k1=1.5, b=0.75": {"fusion_bm25_k1": 1.5, "fusion_bm25_b": 0.75},
}


def ablation_table(locomo: list[dict]) -> tuple[list[str], dict]:
    """F1 of ``fusion`` with each rule switched off, on LoCoMo and on the tau-bench source."""
    _, tau = read_events(TAU_TRACE)
    lines = ["| fusion, one rule off | LoCoMo F1 (in-sample) | tau-bench F1 |",
             "|---|---:|---:|"]  # fmt: skip
    out = {}
    for name, kw in ABLATIONS.items():
        s = NeedsSettings(method="fusion", **kw)
        f = [scored(ev, s)["f1"] for ev in (locomo, tau)]
        out[name] = {"locomo_f1": f[0], "taubench_f1": f[1]}
        lines.append(f"| {name} | {fmt(f[0])} | {fmt(f[1])} |")
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
    t2, cal, per_half = calibrated_table(events)
    t2h, paired = halves_table(events, per_half)
    best = defaults["bm25 (question and answer)"]
    lines += [*t2, "", "## Each held-out half against plain BM25 top 1 (paired, same questions)",
              "", *t2h, "", "## bm25 (question and answer, defaults) by LoCoMo category", "",
              *by_type_table(best), "", "## fusion (question and answer, defaults) by LoCoMo "
              "category", "", *by_type_table(defaults["fusion (question and answer)"]), "", "## Precision-recall curves (all ten conversations)", ""]  # fmt: skip
    t3, curves = curves_table(events)
    tau = tau_share()
    lines += [*t3, "## tau-bench airline: argument values traced", "",
              "| counting | values | traced | share |", "|---|---:|---:|---:|",
              f"| whole values (before) | {tau['before_values']:,} | {tau['before_traced']:,} | "
              f"{tau['before_traced'] / tau['before_values']:.3f} |",
              f"| commands and prose split (after) | {tau['after_values']:,} | "
              f"{tau['after_traced']:,} | {tau['after_traced'] / tau['after_values']:.3f} |", "",
              f"Untraced values by tool (after): {tau['untraced_by_tool']}", ""]  # fmt: skip
    t5, second = second_source()
    t6, ablation = ablation_table(events)
    lines += ["## A second source: tau-bench airline, text-only methods against the `args` needs",
              "", *t5, "", "## What each rule of fusion brings", "", *t6, ""]  # fmt: skip
    write_text(RESULTS / "needs_scores.md", "\n".join(lines))
    payload = {"defaults": defaults, "calibrated": cal, "curves": curves, "taubench": tau,
               "held_out_vs_plain": paired, "second_source": second,
               "ablation": ablation}  # fmt: skip
    write_text(RESULTS / "needs_scores.json", json.dumps(payload, indent=1, default=str))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
