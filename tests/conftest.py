"""Shared fixtures and the hypothesis profile (no deadlines: CI machines vary in speed)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "memlens",
    deadline=None,
    max_examples=int(os.environ.get("MEMLENS_HYPOTHESIS_EXAMPLES", "60")),
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
settings.load_profile("memlens")

# Oracle bounds and embeddings are cached on disk; tests (and the memlens processes they start,
# which inherit the environment) must neither read a user's cache nor leave files in it.
_CACHE = tempfile.mkdtemp(prefix="memlens-test-cache-")
os.environ["MEMLENS_CACHE"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def repo() -> Path:
    return REPO
