"""notebooks/figure1_from_mlflow.ipynb runs top to bottom (nbclient) on a sweep in MLflow."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
from helpers import memlens  # noqa: E402

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "figure1_from_mlflow.ipynb"


@pytest.mark.slow  # a sweep and a Jupyter kernel: about a minute
def test_the_notebook_redraws_figure_1_from_mlflow_runs(tmp_path, monkeypatch):
    trace = tmp_path / "t.jsonl.gz"
    memlens("data", "generate", "seed=3", "streams=6", "events_per_stream=150", f"out={trace}",
            cwd=tmp_path)  # fmt: skip
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    memlens("compare", f"trace={trace}", "policies=[lru,window]", "budgets=[64,256,1024]",
            f"mlflow.tracking_uri={uri}", "mlflow.experiment=nb", f"hydra.run.dir={tmp_path / 'c'}",
            cwd=tmp_path)  # fmt: skip
    monkeypatch.setenv("MEMLENS_MLFLOW_URI", uri)
    monkeypatch.setenv("MEMLENS_EXPERIMENT", "nb")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()  # fmt: skip
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs)
    text = "".join(o.get("text", "") for o in outputs)
    assert "6 jobs" in text and "t.jsonl.gz" in text
    table = text.split("t.jsonl.gz\n", 1)[1].splitlines()
    assert table[0].split() == ["policy", "64", "256", "1024"]
    assert [line.split()[0] for line in table[1:3]] == ["lru", "window"]
