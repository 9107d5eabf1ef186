"""The install claims only the ``memlens`` namespace and ships everything it needs."""

from __future__ import annotations

import tomllib


def test_every_python_package_is_listed_in_pyproject(repo):
    conf = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(conf["packages"])
    mapping = conf["package-dir"]
    roots = {name: repo / path for name, path in mapping.items()}
    found = set()
    for name, root in roots.items():
        for init in root.rglob("__init__.py"):
            rel = init.parent.relative_to(root)
            found.add(".".join([name, *rel.parts]) if rel.parts else name)
    assert found == listed, f"missing: {found - listed}, stale: {listed - found}"
    assert all(name == "memlens" or name.startswith("memlens.") for name in listed)
