"""A run imports only what it uses (issue 34): no MLflow, DuckDB, Starlette, LightGBM,
scikit-learn or scipy's solvers on a ``simulate`` that has no tracking, no event log and no
oracle.  Each check is a fresh process (what a user's run imports), reading ``sys.modules``
after the command finished.

numba itself imports the ``scipy`` package and ``scipy.linalg`` (its version check and BLAS
bindings), so those two are allowed; the solvers (``scipy.optimize``, ``scipy.sparse``),
``scipy.special`` and ``scipy.stats`` are not.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from memlens.config.store import DATA_DIR

HEAVY = ("mlflow", "duckdb", "starlette", "lightgbm", "sklearn", "scipy.optimize",
         "scipy.sparse", "scipy.special", "scipy.stats", "optuna", "uvicorn")  # fmt: skip


def _imported_after(args: list[str], tmp_path) -> set[str]:
    code = textwrap.dedent(f"""
        import json, sys
        from memlens.cli.main import main
        try:
            main({args!r})
        except SystemExit as exc:
            assert not exc.code, exc.code
        print("MODULES=" + json.dumps(sorted(sys.modules)))
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("MODULES=")][-1]
    return set(json.loads(line.removeprefix("MODULES=")))


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


@pytest.mark.slow  # kept out of the default run (6-minute budget); make test-all runs it
def test_a_plain_simulate_imports_none_of_the_heavy_packages(tmp_path):
    trace = DATA_DIR / "default" / "agent-small.jsonl.gz"
    modules = _imported_after(["simulate", f"trace={trace}", "policy=lru", "budget=1024",
                               "mlflow.enabled=false", "oracle.enabled=false",
                               "events.enabled=false", f"hydra.run.dir={tmp_path / 'run'}"],
                              tmp_path)  # fmt: skip
    assert "memlens.runs.pipeline" in modules  # the run really ran in that process
    assert _heavy(modules) == []


@pytest.mark.parametrize("policy", ["learned", "generative_agents"])
def test_replaying_the_text_policies_imports_no_scikit_learn(policy, tmp_path):
    """Generative Agents' TF-IDF and the learned scorer's hashed bags are built without
    scikit-learn (``memlens.trace.words``): a sweep worker replaying them never imports it
    (a second or more of every worker's start on this machine)."""
    code = textwrap.dedent(f"""
        import json, sys
        from memlens.config.schema import build_policy
        from memlens.simulator import simulate
        from memlens.trace.cache import load_trace_cached
        trace = load_trace_cached({str(DATA_DIR / "default" / "agent-small.jsonl.gz")!r},
                                  enabled=False)
        simulate(trace, build_policy({{"_target_": "memlens.policies.{_CLASSES[policy]}"}}),
                 budget=512)
        print("MODULES=" + json.dumps(sorted(sys.modules)))
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("MODULES=")][-1]
    modules = set(json.loads(line.removeprefix("MODULES=")))
    assert "memlens.kernels.learned" in modules or policy != "learned"
    assert not [m for m in modules if m == "sklearn" or m.startswith("sklearn.")]


_CLASSES = {"learned": "learned.LearnedScorer",
            "generative_agents": "generative_agents.GenerativeAgents"}  # fmt: skip
