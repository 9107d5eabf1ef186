"""`memlens simulate -m hydra/launcher=ray_cluster` against a Ray head on 127.0.0.1.

The head is started by the test (``ray start --head --block``, a small object store, its own
temp folder) and stopped at the end by ending that one process, which takes its Ray processes
with it.  Jobs carry only their settings (the trace as a path); each worker reads the trace
from the parsed-trace cache.  The numbers must equal those of the default (joblib) launcher.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("hydra_plugins.hydra_ray_launcher")
RAY = Path(sys.executable).parent / "ray"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ray_head():
    """A Ray head on 127.0.0.1 (2 CPUs, 80 MB object store); its address."""
    port = free_port()
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths are limited
    proc = subprocess.Popen(
        [str(RAY), "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1",
         "--num-cpus=2", "--object-store-memory=80000000", "--include-dashboard=false",
         "--disable-usage-stats", f"--temp-dir={temp}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        address = f"127.0.0.1:{port}"
        for _ in range(240):  # the GCS answers on the port once the head is up
            if proc.poll() is not None:
                raise RuntimeError(f"ray start exited: {proc.stderr.read()[-2000:]}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.5)
        else:
            raise RuntimeError("the Ray head did not come up")
        time.sleep(2)  # the raylet registers just after the GCS opens its port
        yield address
    finally:
        proc.terminate()  # --block: ray start stops every process it started, then exits
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(temp, ignore_errors=True)


def memlens(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-m", "memlens", *args], cwd=cwd, env=env,
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def results(sweep: Path) -> dict:
    out = {}
    for path in sweep.glob("*/metrics.json"):
        doc = json.loads(path.read_text())
        out[(doc["policy"], doc["budget"])] = {k: doc["overall"][k] for k in
                                               ("hit_rate", "evictions", "total_cost_usd")}  # fmt: skip
    return out


@pytest.mark.slow  # a Ray head and a sweep on it: about a minute
def test_a_sweep_on_a_local_ray_head_equals_the_joblib_sweep(tmp_path, ray_head):
    args = ["policy=lru,window", "budget=256,1024", "mlflow.enabled=false"]
    memlens("simulate", "-m", "hydra/launcher=ray_cluster",
            f"hydra.launcher.ray.init.address={ray_head}", *args,
            f"hydra.sweep.dir={tmp_path / 'ray'}", cwd=tmp_path)  # fmt: skip
    memlens("simulate", "-m", *args, f"hydra.sweep.dir={tmp_path / 'joblib'}", cwd=tmp_path)
    on_ray = results(tmp_path / "ray")
    assert len(on_ray) == 4
    assert on_ray == results(tmp_path / "joblib")


@pytest.mark.slow  # a Ray head and two sweeps: about a minute
def test_compare_on_ray_equals_compare_on_this_machine(tmp_path, ray_head):
    args = ["policies=[lru,window]", "budgets=[128,512]", "mlflow.enabled=false", "resume=false"]
    memlens("compare", "backend=ray", f"ray_address={ray_head}", *args,
            f"hydra.run.dir={tmp_path / 'ray'}", cwd=tmp_path)  # fmt: skip
    memlens("compare", "n_jobs=1", *args, f"hydra.run.dir={tmp_path / 'local'}", cwd=tmp_path)
    timing = {"events_per_s", "wall_s", "compile_s", "oracle_solve_s", "oracle_cached"}

    def rows(run: str) -> list[dict]:
        data = json.loads((tmp_path / run / "compare.json").read_text())
        return [{k: v for k, v in r.items() if k not in timing} for r in data]

    assert len(rows("ray")) == 4 and rows("ray") == rows("local")
    assert json.loads((tmp_path / "ray" / "sweep.json").read_text())["workers"] == 2
