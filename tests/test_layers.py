"""The package's import graph: no circle, and nothing imports upward through the layers drawn in docs/architecture.md.

Read from the source (every ``import`` statement, those inside functions included: a lazy import that breaks a circle
at run time is still a circle in the design). ``python tests/test_layers.py`` prints the graph's circles and upward
imports instead of asserting.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "autotune"

# Highest first; a module may import its own layer and those below it. A name stands for a module or a folder (a
# module is ranked by the first layer, from the top, that names it or a folder above it).
LAYERS: list[list[str]] = [
    ["autotune.__main__"],
    ["autotune.cli"],  # one module per command group
    ["autotune.testing"],  # fakes for tests and benchmarks: nothing in the package imports them
    # evidence about a finished study: the report, the dashboard's view, validate (reference vs candidate)
    ["autotune.evidence.report", "autotune.evidence.dashboard", "autotune.evidence.validate",
     "autotune.evidence.regression", "autotune.evidence.trials_csv",
     "autotune.evidence.mix_table", "autotune.evidence.mix_report"],
    ["autotune.search"],  # a study, its workers, one trial, its load sweep, the prior, learned rules, the storage
    # what one trial leaves: its typed record, its note, its launch script and the way to re-run it
    ["autotune.records", "autotune.evidence"],
    ["autotune.space.files", "autotune.space.init"],  # reading and writing space files
    ["autotune.sim"],  # the simulated engine, behind the serving seam
    ["autotune.serving"],  # the serving seam, engine processes, GPU slots
    ["autotune.bench"],  # the load generator
    ["autotune.space"],  # the search space's schema, secrets' masking
    ["autotune.engines"],  # adapters, one file each, and the model facts their rules read
    ["autotune.config", "autotune.engine_registry", "autotune.errors", "autotune.text", "autotune.settings",
     "autotune.yamlload"],
]  # fmt: skip
# The face of the package hands the public API on (lazily) and ``__version__``; importing it is not a layer's edge.
FACE = "autotune"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The autotune modules that ``path`` imports (a ``from X import name`` of a submodule counts as that module)."""
    found: set[str] = set()
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            submodules = {f"{base}.{alias.name}" for alias in node.names} & modules
            found.update(submodules)
            if len(submodules) < len(node.names):  # some name is defined in ``base`` itself
                found.add(base)
    return {name for name in found if name in modules}


def graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(paths)
    return {name: imports_of(path, modules) - {name} for name, path in paths.items()}


def layer_of(module: str) -> int | None:
    for rank, layer in enumerate(LAYERS):
        if any(module == prefix or module.startswith(prefix + ".") for prefix in layer):
            return rank
    return None


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def upward(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Imports from a lower layer to a higher one (the face neither counts as a source nor as a target)."""
    bad = []
    for source, targets in sorted(edges.items()):
        for target in sorted(targets):
            if FACE in (source, target):
                continue
            rank_from, rank_to = layer_of(source), layer_of(target)
            if rank_from is not None and rank_to is not None and rank_to < rank_from:
                bad.append((source, target))
    return bad


def test_every_module_has_a_layer() -> None:
    assert [name for name in graph() if name != FACE and layer_of(name) is None] == []


def test_no_import_circle() -> None:
    assert circles(graph()) == []


def test_nothing_imports_upward() -> None:
    assert upward(graph()) == []


def test_the_checker_sees_a_circle_and_an_upward_import() -> None:
    edges = {"autotune.cli.x": {"autotune.bench.y"}, "autotune.bench.y": {"autotune.cli.x"}}
    assert circles(edges) == [["autotune.bench.y", "autotune.cli.x"]]
    assert upward(edges) == [("autotune.bench.y", "autotune.cli.x")]


if __name__ == "__main__":
    edges = graph()
    print(f"modules: {len(edges)}, imports: {sum(map(len, edges.values()))}")
    for circle in circles(edges):
        print("circle:", " <-> ".join(circle))
    for source, target in upward(edges):
        print(f"upward: {source} -> {target}")
    print(f"circles: {len(circles(edges))}, upward imports: {len(upward(edges))}")
