"""Shared fixtures and the hypothesis profile (no deadlines: CI machines vary in speed)."""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from helpers import memlens
from hypothesis import HealthCheck, settings

from memlens._util.kernelcache import ENV as KERNEL_CACHE_ENV
from memlens._util.kernelcache import kernel_cache_dir

settings.register_profile(
    "memlens",
    deadline=None,
    # 25 examples per property in the default run (it must stay under 6 minutes); make test-all
    # runs 100
    max_examples=int(os.environ.get("MEMLENS_HYPOTHESIS_EXAMPLES", "25")),
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
settings.load_profile("memlens")

# Compiled kernels are the exception: numba keys them by source and machine, so sharing them is
# safe, and every test process (xdist workers, the memlens processes tests start) finding the
# kernels one of them compiled is the point.  The folder is fixed before MEMLENS_CACHE moves.
os.environ.setdefault(KERNEL_CACHE_ENV, str(kernel_cache_dir()))
os.environ["NUMBA_CACHE_DIR"] = os.environ[KERNEL_CACHE_ENV]

# Oracle bounds and embeddings are cached on disk; tests (and the memlens processes they start,
# which inherit the environment) must neither read a user's cache nor leave files in it.
_CACHE = tempfile.mkdtemp(prefix="memlens-test-cache-")
os.environ["MEMLENS_CACHE"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)

REPO = Path(__file__).resolve().parents[1]


def pytest_sessionstart(session) -> None:
    """Compile every kernel once for the whole run, before any test: each stage under its own
    file lock (``memlens.kernels.warm``), so the xdist workers share the stages between them
    (one compiles, the other takes the next or waits and then loads it) instead of each
    compiling the kernels its first tests need for itself.  The xdist controller runs no test
    and leaves it to the workers.  ``MEMLENS_TEST_WARM=0`` skips it (the kernels then compile
    when first used)."""
    if os.environ.get("MEMLENS_TEST_WARM", "1") == "0":
        return
    xdist_controller = getattr(session.config.option, "numprocesses", None) and not hasattr(
        session.config, "workerinput"
    )
    if xdist_controller:
        return
    from memlens.cli.cache import warm_all

    # an xdist worker warms serially: the workers are the parallelism, sharing the stages
    warm_all(progress=False, jobs=1 if hasattr(session.config, "workerinput") else None)


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("trace")
    memlens(
        "data",
        "generate",
        "archetype=simple",
        "seed=3",
        "streams=2",
        "events_per_stream=300",
        f"out={d / 't.jsonl.gz'}",
        cwd=d,
    )
    return d / "t.jsonl.gz"


@pytest.fixture
def mlflow_server(tmp_path):
    """An MLflow tracking server on 127.0.0.1 for this test only."""
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--backend-store-uri",
            f"sqlite:///{tmp_path / 'server.db'}",
            "--artifacts-destination",
            str(tmp_path / "server-artifacts"),
            "--workers",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        import urllib.request

        for _ in range(300):
            if proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited: {proc.stderr.read().decode()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=1) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        else:
            raise RuntimeError("mlflow server did not come up")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
