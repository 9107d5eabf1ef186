"""A small hand-made run pair for the analytics page: tests, the docs screenshot, a demo.

Why hand-made: every number on the page can then be checked by hand.  One stream, budget 2
tokens, items of 1 token, no demand fetch::

    e0 write a     e1 write b     e2 request r0 needs b (hit)
    e3 write c     LRU evicts a (b was used at e2): room for the write of c; b and c are kept
    e4 request r1 needs a: a miss, a is in the short-term cache

With LRU, hit_rate = 1/2.  Pinning ``a`` right after its write makes the eviction at e3 take
``b`` instead, and r1 hits: what-if hit_rate 2/2, a delta of +0.5.  The rule scorer declines
``c`` (worth less than what it would evict), so the policy diff of lru vs rule first diverges
at e3 (admit vs decline) and r1 is the request rule hits and LRU misses.  The items' texts
are script and image-tag payloads: the page must show them as text.  ``c`` is derived from
``a`` (``meta.derived_from``): the memory graph draws that edge.
"""

from __future__ import annotations

from pathlib import Path

XSS_IMG = '<img src=x onerror="window.__memlens_pwned = 1">'
XSS_SCRIPT = "<script>window.__memlens_pwned = 2</script>"


def sample_events() -> list[dict]:
    from memlens.testing import rq, w

    return [
        {"event": "header", "version": 1, "generator": "memlens.ui.sample"},
        w("a", 1, "user_input", stream="agent", t=0.0, text=XSS_IMG),
        w("b", 1, "user_input", stream="agent", t=1.0, text=XSS_SCRIPT),
        rq("r0", "b", stream="agent", t=2.0, text="what did b say?"),
        w(
            "c",
            1,
            "llm_thought",
            stream="agent",
            t=3.0,
            text="a passing thought",
            meta={"derived_from": ["a"]},
        ),
        rq("r1", "a", stream="agent", t=4.0, text="what did a say?"),
    ]


def tradeoff_events() -> list[dict]:
    """:func:`sample_events` and one more request, ``r2`` at e5 needing ``b``.

    Pinning ``a`` now trades one request for another: the eviction at e3 takes ``b``, so
    ``r1`` gains (a hit) and ``r2`` loses (``b`` is in the short-term cache).  Under LRU
    hit_rate is 2/3 with the pin and without it: a delta of exactly 0 that hides two changed
    requests, which the what-if must list."""
    from memlens.testing import rq

    return [*sample_events(), rq("r2", "b", stream="agent", t=5.0, text="and b again?")]


def write_run_folder(folder: Path, trace_path: Path, overrides: list[str]) -> Path:
    """Replay ``trace_path`` with ``overrides`` (simulate's settings) into ``folder``."""
    from omegaconf import OmegaConf

    from memlens.config.compose import compose_config
    from memlens.config.schema import resolve
    from memlens.runs.pipeline import run
    from memlens.runs.writers import write_run

    cfg = compose_config("simulate", [f"trace={trace_path}", "mlflow.enabled=false",
                                      "progress=false", *overrides])  # fmt: skip
    settings = resolve(cfg)
    done, report = run(settings, record_values=settings.events.enabled)
    folder.mkdir(parents=True, exist_ok=True)
    write_run(folder, done, report, OmegaConf.to_yaml(cfg, resolve=True))
    return folder


def make_sample_runs(root: Path, events: list[dict] | None = None) -> dict[str, Path]:
    """``root/trace.jsonl`` (``events``, by default :func:`sample_events`) and two runs of it,
    ``root/lru`` and ``root/rule`` (budget 2)."""
    from memlens.trace.io import write_trace

    root.mkdir(parents=True, exist_ok=True)
    trace_path = root / "trace.jsonl"
    write_trace(trace_path, sample_events() if events is None else events)
    return {name: write_run_folder(root / name, trace_path, [f"policy={name}", "budget=2"])
            for name in ("lru", "rule")}  # fmt: skip


def multi_stream_events(streams: list[str], with_r2: bool = False) -> list[dict]:
    """The sample once per stream (item and request ids prefixed ``<stream>/``; times
    interleaved, so global event indices run across streams): each stream's hand-made counts
    are the single stream's."""
    base = tradeoff_events() if with_r2 else sample_events()
    out: list[dict] = [dict(base[0])]
    for ev in base[1:]:
        for s in streams:
            e = {**ev, "stream": s, "id": f"{s}/{ev['id']}"}
            if "needs" in e:
                e["needs"] = [f"{s}/{n}" for n in ev["needs"]]
            if "meta" in e:
                e["meta"] = {"derived_from": [f"{s}/{p}" for p in ev["meta"]["derived_from"]]}
            out.append(e)
    return out
