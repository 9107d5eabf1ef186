"""A single run's mode and config are the ones validation composed (memlens.config.app
known_mode): Hydra composes nothing more (three compositions without it), and the run writes
the same files (.hydra/hydra.yaml, config.yaml, overrides.yaml, metrics.json)."""

from __future__ import annotations

import pytest
from hydra._internal.hydra import Hydra

from memlens.cli.main import main

COMPOSE = Hydra.compose_config


def _run(tmp_path, small_trace, monkeypatch, *, shortcut: bool, extra=()):
    from memlens.config import app

    calls = []

    def counted(self, *args, **kwargs):
        calls.append(kwargs.get("run_mode"))
        return COMPOSE(self, *args, **kwargs)

    monkeypatch.setattr(Hydra, "compose_config", counted)
    if not shortcut:
        monkeypatch.setattr(app, "known_mode", lambda argv, modes: _nothing())
    out = tmp_path / ("fast" if shortcut else "plain")
    main(["simulate", f"trace={small_trace}", "policy=lru", "budget=64", "mlflow.enabled=false",
          "progress=false", "events.enabled=false", *extra, f"hydra.run.dir={out}"])  # fmt: skip
    hydra = (out / ".hydra" / "hydra.yaml").read_text().replace(str(out), "OUT")
    files = {n: (out / ".hydra" / n).read_text().replace(str(out), "OUT")
             for n in ("config.yaml", "overrides.yaml")}  # fmt: skip
    return calls, hydra, files, (out / "metrics.json").exists()


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def test_one_composition_fewer_and_the_same_run(tmp_path, small_trace, monkeypatch):
    fast = _run(tmp_path, small_trace, monkeypatch, shortcut=True)
    plain = _run(tmp_path, small_trace, monkeypatch, shortcut=False)
    assert len(fast[0]) == 1  # validation's, which the run uses
    assert len(plain[0]) == 3  # validation's, get_mode's and the run's
    assert fast[1:] == plain[1:]
    assert fast[3]


@pytest.mark.parametrize("extra", [["hydra.job.chdir=false"], ["hydra.verbose=true"]])
def test_other_hydra_overrides_keep_hydras_own_mode(tmp_path, small_trace, monkeypatch, extra):
    """An override of another hydra.* setting could change the mode: Hydra reads it itself."""
    fast = _run(tmp_path, small_trace, monkeypatch, shortcut=True, extra=extra)
    plain = _run(tmp_path, small_trace, monkeypatch, shortcut=False, extra=extra)
    assert len(plain[0]) == len(fast[0])
