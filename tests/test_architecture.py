"""The house rules, checked: no import cycle anywhere in MemLens, and every import points down.

The graph is read from the source with ``ast`` (nothing is imported): every ``import`` and
``from ... import`` statement counts, at module level and inside functions alike, so a lazy
import cannot hide a cycle.  ``from package import name`` is an edge to ``package.name`` when
that is a module, else to ``package`` (its ``__init__``).

Run it as a script to print the graph's figures (the closing note quotes them)::

    python tests/test_architecture.py            # this checkout
    python tests/test_architecture.py --repo DIR # another checkout (e.g. an older commit)
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: Source folders and the package each one installs as (pyproject's package-dir).
SOURCES = {"memlens": "memlens", "policies": "memlens.policies", "datasets": "memlens.datasets",
           "conf": "memlens.conf"}  # fmt: skip

#: Layers, bottom first: a module may import its own layer and the ones below, never above.
#: (CONTRIBUTING.md explains each; a module's layer is that of its longest listed prefix.)
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("util", ("memlens._util", "memlens.conf")),
    ("trace", ("memlens.trace",)),
    (
        "engine",
        (
            "memlens.policy",
            "memlens.simulator",
            "memlens.kernels",
            "memlens.retrieval",
            "memlens.oracle",
            "memlens.scorer",
        ),
    ),  # fmt: skip
    ("plugins", ("memlens.policies", "memlens.datasets", "memlens.testing", "memlens.checker")),
    ("analyze", ("memlens.analyze",)),
    ("config", ("memlens.config",)),
    ("present", ("memlens.present",)),
    ("runs", ("memlens.runs",)),
    ("learn", ("memlens.learn",)),
    ("live", ("memlens.live",)),
    ("ui", ("memlens.ui",)),
    ("cli", ("memlens.cli", "memlens.__main__", "memlens")),
]


def modules(repo: Path) -> dict[str, Path]:
    """Every module of the tree: dotted name -> file."""
    out = {}
    for folder, package in SOURCES.items():
        root = repo / folder
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if folder == "memlens" and parts and parts[0] in ("policies", "datasets", "conf"):
                continue  # an installed copy, not the source
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([package, *parts])] = path
    return out


def imports(repo: Path) -> dict[str, dict[str, int]]:
    """module -> {imported module: line of the first such import}, MemLens modules only."""
    mods = modules(repo)

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {}
    for name, path in mods.items():
        is_package = path.name == "__init__.py"
        out: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = name.split(".") if is_package else name.split(".")[:-1]
                    here = here[: len(here) - node.level + 1]
                    base = ".".join(here + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                           for a in node.names]  # fmt: skip
            for target in targets:
                hit = resolve(target) if target.startswith("memlens") else None
                if hit and hit != name:
                    out.setdefault(hit, node.lineno)
        graph[name] = out
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                part = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    part.append(top)
                    if top == node:
                        break
                if len(part) > 1:
                    found.append(sorted(part))
    return found


def layer_of(module: str) -> int:
    best, rank = -1, None
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, rank = len(p), i
    if rank is None:
        raise LookupError(module)
    return rank


def upward(graph: dict[str, dict[str, int]]) -> list[str]:
    """Every import from a lower layer into a higher one, as a readable line."""
    bad = []
    for src in sorted(graph):
        for dst, line in sorted(graph[src].items()):
            a, b = layer_of(src), layer_of(dst)
            if b > a:
                bad.append(f"{src} (line {line}) imports {dst}: layer {LAYERS[a][0]!r} may not "
                           f"import layer {LAYERS[b][0]!r}")  # fmt: skip
    return bad


def longest_chain(graph: dict[str, dict[str, int]]) -> list[str]:
    """The longest path of imports (the graph must be acyclic)."""
    best: dict[str, list[str]] = {}

    def chain(node: str) -> list[str]:
        if node not in best:
            tails = [chain(n) for n in graph[node]]
            best[node] = [node, *max(tails, key=len, default=[])]
        return best[node]

    sys.setrecursionlimit(10_000)
    return max((chain(n) for n in sorted(graph)), key=len)


# ------------------------------------------------------------------------------------ tests
GRAPH = imports(REPO)


def test_the_graph_sees_lazy_imports():
    # memlens.simulator imports its kernels inside simulate() only: that edge must be there
    assert "memlens.kernels" in GRAPH["memlens.simulator"]


def test_no_import_cycle():
    found = cycles(GRAPH)
    detail = ["; ".join(f"{a} -> {b} (line {GRAPH[a][b]})" for a in part for b in part
                        if b in GRAPH[a]) for part in found]  # fmt: skip
    assert not found, "import cycles: " + " | ".join(detail)


def test_imports_point_down_the_layers():
    bad = upward(GRAPH)
    assert not bad, "\n".join(bad)


def test_every_module_has_a_layer():
    unplaced = []
    for m in GRAPH:
        try:
            layer_of(m)
        except LookupError:
            unplaced.append(m)
    assert not unplaced, f"add these to LAYERS in tests/test_architecture.py: {unplaced}"


def test_the_checks_catch_a_cycle_and_an_upward_import():
    graph = {"memlens.trace.a": {"memlens.trace.b": 3}, "memlens.trace.b": {"memlens.trace.a": 7},
             "memlens._util.x": {"memlens.cli.main": 9}, "memlens.cli.main": {}}  # fmt: skip
    assert cycles(graph) == [["memlens.trace.a", "memlens.trace.b"]]
    assert upward(graph) == ["memlens._util.x (line 9) imports memlens.cli.main: layer 'util' "
                             "may not import layer 'cli'"]  # fmt: skip


def test_public_paths_import():
    import memlens.policies.lru

    import memlens
    import memlens.checker
    import memlens.testing
    from memlens.trace import Trace

    assert memlens.Policy is memlens.policy.Policy
    assert memlens.simulate is memlens.simulator.simulate
    assert Trace.__module__ == "memlens.trace.model"
    assert callable(memlens.load_trace) and callable(memlens.check_policy)
    assert callable(memlens.run)


def report(repo: Path) -> str:
    graph = imports(repo)
    top = sorted(p.name for p in (repo / "memlens").glob("*.py"))
    found = cycles(graph)
    lines = [f"modules: {len(graph)} (memlens/ top level: {len(top)} files)",
             f"import cycles: {len(found)}"]  # fmt: skip
    lines += [f"  {' <-> '.join(part)}" for part in found]
    if not found:
        chain = longest_chain(graph)
        lines.append(f"longest dependency chain: {len(chain)} modules: {' -> '.join(chain)}")
    try:
        bad = upward(graph)
    except LookupError as exc:
        bad = [f"(no layer for {exc}: an older layout)"]
    lines.append(f"upward imports: {len(bad)}")
    lines += [f"  {b}" for b in bad]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=REPO)
    print(report(parser.parse_args().repo.resolve()))
