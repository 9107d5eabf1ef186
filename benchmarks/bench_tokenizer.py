"""How far the offline ``approx`` tokenizer is from a real BPE (cl100k) on the bundled sources.

The reference is ``bpe_openai:cl100k_base`` (``pip install bpe-openai``; offline).  The texts are
every write and request text of the bundled LoCoMo and tau-bench traces (converted in memory).
Note the approximation's coefficients were fitted on these same texts, so this is an in-sample
figure; the synthetic generators do not tokenise text at all.

    .venv/bin/python benchmarks/bench_tokenizer.py --out benchmarks/results/tokenizer.md
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from memlens.datasets.convert_locomo import convert_locomo
from memlens.datasets.convert_taubench import convert_taubench

from memlens.config.store import DATA_DIR
from memlens.trace.tokenizer import approx_tokens, get_tokenizer


def texts() -> dict[str, list[str]]:
    lo, _ = convert_locomo(DATA_DIR / "locomo" / "locomo10.json")
    tb, _ = convert_taubench(DATA_DIR / "taubench" / "gpt-4o-airline.json")
    return {
        "locomo": [e["text"] for e in lo if e.get("text")],
        "taubench": [e["text"] for e in tb if e.get("text")],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference", default="bpe_openai:cl100k_base")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    ref = get_tokenizer(args.reference)
    rows = []
    for name, items in texts().items():
        t0 = time.perf_counter()
        approx = np.array([approx_tokens(s) for s in items])
        t_approx = time.perf_counter() - t0
        t0 = time.perf_counter()
        real = np.array([ref.count(s) for s in items])
        t_real = time.perf_counter() - t0
        rel = (approx - real) / np.maximum(real, 1)
        rows.append(
            f"| {name} | {len(items):,} | {real.sum():,} | {approx.sum():,} | "
            f"{approx.sum() / real.sum() - 1:+.1%} | {np.median(np.abs(rel)):.1%} | "
            f"{np.percentile(np.abs(rel), 90):.1%} | {np.abs(approx - real).mean():.2f} | "
            f"{len(items) / t_approx:,.0f} | {len(items) / t_real:,.0f} |"
        )
    table = "\n".join(
        [
            f"| texts | n | {args.reference} | approx | total error | median abs rel. error "
            "| p90 abs rel. error | mean abs error (tokens) | approx texts/s | reference texts/s |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            *rows,
        ]
    )
    print(table)
    if args.out:
        from memlens._util.atomic import write_text

        write_text(
            args.out,
            "# Offline token approximation vs a real BPE\n\n"
            "Command: `python benchmarks/bench_tokenizer.py --out benchmarks/results/tokenizer.md`"
            "  \nIn-sample: the approximation's rounded coefficients were fitted on these texts.\n\n"
            f"{table}\n",
        )


if __name__ == "__main__":
    main()
