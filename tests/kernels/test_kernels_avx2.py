"""The vector kernels give the same results when compiled without AVX-512.

``memlens.kernels.simd`` builds LLVM vectors of 8 doubles and 16 terms; on a processor without
AVX-512 LLVM splits them into AVX2 (or SSE) operations.  This runs the intrinsics' tests and
the differential tests of the three scan kernels in a fresh process compiled for Haswell
(AVX2, no AVX-512), with a numba cache of its own.  Slow: it compiles the scan replay again
(about 80 s)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Haswell's features, AVX-512 off (numba otherwise takes the host's)
HASWELL = ("+64bit,+avx,+avx2,+bmi,+bmi2,+cmov,+cx16,+f16c,+fma,+fxsr,+lzcnt,+mmx,+movbe,"
           "+popcnt,+sse,+sse2,+sse3,+sse4.1,+sse4.2,+ssse3,+xsave,-avx512f,-avx512bw,"
           "-avx512vl,-avx512dq,-avx512cd")  # fmt: skip
TESTS = [
    "tests/kernels/test_kernels_simd.py",
    "tests/kernels/test_kernels_generative_agents.py",
    "tests/kernels/test_kernels_memorybank.py",
    "tests/kernels/test_kernels_memoryos_heat.py",
]


@pytest.mark.slow
def test_scan_kernels_match_the_reference_compiled_for_avx2(tmp_path):
    env = {**os.environ, "NUMBA_CPU_NAME": "haswell", "NUMBA_CPU_FEATURES": HASWELL,
           "NUMBA_CACHE_DIR": str(tmp_path / "numba")}  # fmt: skip
    probe = ("import numba, numpy as np\n"
             "from memlens.kernels.simd import argmin3\n"
             "f = numba.njit(lambda x, r: argmin3(x[0], x[1], x[2], r, 0, 40, 1.0, 1.0, 1.0, 1.0))\n"
             "f(np.ones((3, 40)), np.arange(40))\n"
             "print('zmm' in f.inspect_asm(f.signatures[0]))\n")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", probe], env=env, cwd=ROOT, capture_output=True,
                         text=True, check=True)  # fmt: skip
    assert out.stdout.strip() == "False"  # really compiled without AVX-512
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS],
                         env=env, cwd=ROOT, capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert " passed" in run.stdout and "failed" not in run.stdout
