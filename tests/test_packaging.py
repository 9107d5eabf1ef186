"""The install claims only the ``memlens`` namespace and ships everything it needs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest


def _setuptools_conf(repo: Path) -> dict:
    return tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]


def _folders_to_ship(repo: Path) -> tuple[set[str], set[str]]:
    """(packages with an ``__init__.py``, folders holding only data) under the mapped roots."""
    code, data = set(), set()
    for name, path in _setuptools_conf(repo)["package-dir"].items():
        root = repo / path
        for folder in [root, *root.rglob("*")]:
            if not folder.is_dir() or "__pycache__" in folder.parts:
                continue
            files = [f for f in folder.iterdir() if f.is_file()]
            if not files:
                continue  # a folder of folders only (conf/hydra): nothing of its own to ship
            rel = folder.relative_to(root).parts
            dotted = ".".join([name, *rel])
            (code if (folder / "__init__.py").exists() else data).add(dotted)
    return code, data


def test_every_folder_is_listed_in_pyproject(repo):
    listed = set(_setuptools_conf(repo)["packages"])
    code, data = _folders_to_ship(repo)
    assert code | data == listed, (
        f"missing: {(code | data) - listed}, stale: {listed - code - data}"
    )
    assert all(name == "memlens" or name.startswith("memlens.") for name in listed)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The wheel built from this checkout, offline, and the build's output."""
    repo = Path(__file__).resolve().parents[1]
    out = tmp_path_factory.mktemp("wheel")
    build = tmp_path_factory.mktemp("build")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(repo), "--no-deps", "--no-build-isolation",
         "--no-cache-dir", "-v", "-w", str(out)],
        capture_output=True, text=True, cwd=build, env={**os.environ, "PIP_NO_INPUT": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (path,) = out.glob("memlens-*.whl")
    return path, proc.stdout + proc.stderr


def test_the_wheel_builds_without_setuptools_warnings(wheel):
    _, log = wheel
    lines = [ln for ln in log.splitlines() if "Warning" in ln or "!!" in ln]
    assert lines == [], "\n".join(lines[:20])


def test_the_wheel_ships_configs_data_and_the_page(wheel):
    path, _ = wheel
    names = set(zipfile.ZipFile(path).namelist())
    for needed in [
        "memlens/conf/compare.yaml",
        "memlens/conf/policy/lru.yaml",
        "memlens/datasets/default/agent-small.jsonl.gz",
        "memlens/datasets/locomo/LICENSE.txt",
        "memlens/models/default_learned.txt",
        "memlens/schema/trace-v1.schema.json",
        "memlens/ui/static/index.html",
        "memlens/policies/lru.py",
    ]:
        assert needed in names, needed
    assert not [n for n in names if n.split("/")[0] not in {"memlens"} and ".dist-info" not in n]


@pytest.mark.slow
def test_the_installed_wheel_runs_compare_outside_the_checkout(wheel, tmp_path):
    """A fresh venv holding only the wheel (its dependencies borrowed from this venv by a plain
    path entry, so the checkout's editable install stays invisible) runs ``memlens compare``."""
    path, _ = wheel
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    site = Path(sysconfig.get_paths(vars={"base": str(env_dir)})["purelib"])
    deps = Path(sysconfig.get_paths()["purelib"])
    (site / "borrowed_dependencies.pth").write_text(f"{deps}\n")
    subprocess.run([py, "-m", "pip", "install", "--no-deps", "-q", str(path)], check=True)
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = subprocess.run([py, "-c", "import memlens; print(memlens.__file__)"], cwd=work,
                           env=env, capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert str(site) in where
    proc = subprocess.run(
        [env_dir / "bin" / "memlens", "compare", "policies=[window,lru]", "budgets=[1024]",
         "oracle.enabled=false", "mlflow.enabled=false", f"hydra.run.dir={work / 'run'}"],
        cwd=work, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads((work / "run" / "compare.json").read_text())
    assert {r["policy"] for r in rows} == {"window", "lru"}
