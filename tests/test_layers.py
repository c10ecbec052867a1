"""Layering you can see: core (config, errors, engine) -> runs -> measure/report -> labs ->
orchestrate -> cli. No module imports a higher layer (function-level imports included),
no lab imports another lab, and the module import graph has no cycles."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "stagewise"
LAYERS = [
    ("core", ("stagewise.config", "stagewise.overrides", "stagewise.errors", "stagewise.yamlio", "stagewise.engine")),
    ("runs", ("stagewise.runs",)),
    ("measure/report", ("stagewise.measure", "stagewise.report")),
    ("labs", ("stagewise.labs",)),
    ("orchestrate", ("stagewise.orchestrate",)),
    ("cli", ("stagewise.cli", "stagewise.cli_lm", "stagewise.cli_sweep", "stagewise.testing")),
]


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int | None:
    for index, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return index
    return None


def _runtime_nodes(tree: ast.AST):
    """Every node except those under ``if TYPE_CHECKING:`` (annotations only, never imported)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))


def imports_of(path: Path) -> set[str]:
    """Absolute stagewise modules imported anywhere in the file (also inside functions)."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out = set()
    for node in _runtime_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("stagewise")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("stagewise"):
                out.add(target)
                for alias in node.names:  # `from . import x` may name a submodule
                    candidate = f"{target}.{alias.name}"
                    if (SRC.parent / Path(*candidate.split("."))).with_suffix(".py").exists() or \
                            (SRC.parent / Path(*candidate.split(".")) / "__init__.py").exists():
                        out.add(candidate)
    return out


MODULES = {module_name(p): p for p in SRC.rglob("*.py")}
GRAPH = {m: {i for i in imports_of(p) if i in MODULES and i != m} for m, p in MODULES.items()}


def test_every_module_has_a_layer():
    missing = [m for m in MODULES if m != "stagewise" and layer_of(m) is None]
    assert not missing, f"modules outside the layer map: {missing}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m != "stagewise"))
def test_no_upward_imports(module):
    own = layer_of(module)
    upward = sorted(i for i in GRAPH[module] if (layer_of(i) or 0) > own)
    assert not upward, f"{module} ({LAYERS[own][0]}) imports a higher layer: {upward}"


def test_no_lab_imports_another_lab():
    labs = {m.split(".")[2] for m in MODULES if m.startswith("stagewise.labs.") and m.count(".") >= 3}
    for module, deps in GRAPH.items():
        if module.count(".") >= 3 and module.split(".")[2] in labs and module.startswith("stagewise.labs."):
            own = module.split(".")[2]
            others = sorted(d for d in deps if d.startswith("stagewise.labs.") and d.count(".") >= 3
                            and d.split(".")[2] in labs and d.split(".")[2] != own)
            assert not others, f"{module} imports another lab: {others}"


def test_import_graph_has_no_cycles():
    """Package __init__ files only re-export their own submodules, so edges into a package
    __init__ from its own submodules are left out."""
    graph = {m: {d for d in deps if not m.startswith(d + ".")} for m, deps in GRAPH.items() if m != "stagewise"}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in graph.get(node, ()):
            if state.get(dep) == 1:
                cycle = stack[stack.index(dep):] + [dep]
                raise AssertionError(f"import cycle: {' -> '.join(cycle)}")
            if state.get(dep) is None:
                visit(dep)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_the_checker_sees_a_violation(tmp_path):
    """The check is real: an upward import in a file is found."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from stagewise.cli import main\n")
    assert "stagewise.cli" in _absolute_imports(bad)
    assert (layer_of("stagewise.cli") or 0) > (layer_of("stagewise.engine.bad") or 0)


def _absolute_imports(path: Path) -> set[str]:
    return {n.module for n in _runtime_nodes(ast.parse(path.read_text()))
            if isinstance(n, ast.ImportFrom) and not n.level and (n.module or "").startswith("stagewise")}
