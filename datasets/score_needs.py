"""``memlens data score-needs``: derived needs against reference needs, per need, micro-averaged.

The counting is ``experiments/derivation.py``'s, generalised to references with alternatives:
every need is a group (a plain id is a group of one).  A derived group is *correct* when one of
its members is in a reference group; a reference group is *recalled* when one of its members is
a member of some derived group.  Over every request of the reference (a request the derived
trace dropped derived nothing):

    precision = correct derived groups / derived groups
    recall    = recalled reference groups / reference groups
    F1        = 2 P R / (P + R)

micro-averaged (every need weighs the same), overall and per request type: ``meta.category``
(LoCoMo), ``meta.question_type`` (LongMemEval), the first of ``meta.tools`` (tool-using logs),
else ``-``.
"""

from __future__ import annotations

from dataclasses import dataclass, field


def groups(needs: list) -> list[frozenset[str]]:
    return [frozenset([n]) if isinstance(n, str) else frozenset(n) for n in needs]


def request_type(ev: dict) -> str:
    meta = ev.get("meta") if isinstance(ev.get("meta"), dict) else {}
    for key in ("category", "question_type"):
        if meta.get(key) is not None:
            return f"{key} {meta[key]}"
    tools = meta.get("tools")
    return f"tool {tools[0]}" if isinstance(tools, list) and tools else "-"


@dataclass
class Tally:
    """Counts behind one precision/recall/F1 line."""

    correct: int = 0
    derived: int = 0
    recalled: int = 0
    reference: int = 0
    requests: int = 0

    def add(self, derived: list, reference: list) -> None:
        d, r = groups(derived), groups(reference)
        members = frozenset().union(*d) if d else frozenset()
        ref_members = frozenset().union(*r) if r else frozenset()
        self.correct += sum(bool(g & ref_members) for g in d)
        self.derived += len(d)
        self.recalled += sum(bool(g & members) for g in r)
        self.reference += len(r)
        self.requests += 1

    def scores(self) -> dict:
        p = self.correct / self.derived if self.derived else None
        r = self.recalled / self.reference if self.reference else None
        f1 = 2 * p * r / (p + r) if p and r else (0.0 if p is not None and r is not None else None)
        return {"precision": p, "recall": r, "f1": f1, "derived_needs": self.derived,
                "reference_needs": self.reference, "requests": self.requests}  # fmt: skip


@dataclass
class NeedScores:
    overall: Tally = field(default_factory=Tally)
    by_type: dict[str, Tally] = field(default_factory=dict)
    missing: int = 0  # reference requests the derived trace does not have

    def as_dict(self) -> dict:
        return {**self.overall.scores(), "requests_without_derived_needs": self.missing,
                "by_type": {k: v.scores() for k, v in sorted(self.by_type.items())}}  # fmt: skip


def score_events(derived: list[dict], reference: list[dict]) -> NeedScores:
    """Scores of ``derived``'s requests against ``reference``'s, matched by request id."""
    got = {e["id"]: e.get("needs") or [] for e in derived if e.get("event") == "request"}
    out = NeedScores()
    for e in reference:
        if e.get("event") != "request":
            continue
        mine = got.get(e["id"])
        out.missing += mine is None or not mine
        out.overall.add(mine or [], e["needs"])
        out.by_type.setdefault(request_type(e), Tally()).add(mine or [], e["needs"])
    return out


def _f(x) -> str:
    return "    -" if x is None else f"{x:.3f}"


def format_scores(s: dict, derived: str, reference: str) -> str:
    """The table ``score-needs`` prints."""
    lines = [f"needs of {derived} against {reference} (per need, micro-averaged)",
             f"{'requests':<24} {'precision':>9} {'recall':>7} {'F1':>6} {'derived':>8} "
             f"{'reference':>9} {'requests':>8}"]  # fmt: skip
    rows = [("all", s), *s["by_type"].items()]
    for name, r in rows:
        lines.append(f"{name:<24} {_f(r['precision']):>9} {_f(r['recall']):>7} {_f(r['f1']):>6} "
                     f"{r['derived_needs']:>8,} {r['reference_needs']:>9,} {r['requests']:>8,}")  # fmt: skip
    lines.append(f"{s['requests_without_derived_needs']:,} reference requests have no derived need")
    return "\n".join(lines)
