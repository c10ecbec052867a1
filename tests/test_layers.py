"""Layering you can see: core (config, errors, engine) -> runs -> measure/report/lmkit -> labs ->
orchestrate -> cli. No module imports a higher layer (function-level imports included),
no lab imports another lab, and the module import graph has no cycles: not between layers,
not inside one layer, and not through imports under ``if TYPE_CHECKING:`` either (a circle
of annotations is still a circle of concepts, e.g. contract -> spec -> registry -> contract)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "stagewise"
LAYERS = [
    ("core", ("stagewise.config", "stagewise.overrides", "stagewise.errors", "stagewise.yamlio", "stagewise.lazy", "stagewise.progress",
              "stagewise.engine")),
    ("runs", ("stagewise.runs",)),
    ("measure/report", ("stagewise.measure", "stagewise.report", "stagewise.lmkit")),
    ("labs", ("stagewise.labs",)),
    ("orchestrate", ("stagewise.orchestrate",)),
    (
        "cli",
        ("stagewise.cli", "stagewise.cli_claims", "stagewise.cli_lab", "stagewise.cli_lm", "stagewise.cli_show", "stagewise.cli_stages",
         "stagewise.cli_sweep", "stagewise.cli_text", "stagewise.testing"),
    ),
]


def module_name(path: Path, root: Path = SRC.parent) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int | None:
    for index, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return index
    return None


def _is_type_checking(test: ast.expr) -> bool:
    """``TYPE_CHECKING`` or ``typing.TYPE_CHECKING``."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_nodes(tree: ast.AST, type_checking: bool = False):
    """Every node except those under ``if TYPE_CHECKING:`` (annotations only, never imported);
    with ``type_checking`` those too."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if not type_checking and isinstance(node, ast.If) and _is_type_checking(node.test):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))


def imports_of(path: Path, type_checking: bool = False, root: Path = SRC.parent, top: str = "stagewise") -> set[str]:
    """Absolute modules under ``top`` imported anywhere in the file (also inside functions;
    with ``type_checking`` also under ``if TYPE_CHECKING:``)."""
    module = module_name(path, root)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out = set()
    for node in _runtime_nodes(ast.parse(path.read_text()), type_checking):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith(top)}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith(top):
                out.add(target)
                for alias in node.names:  # `from . import x` may name a submodule
                    candidate = f"{target}.{alias.name}"
                    if (root / Path(*candidate.split("."))).with_suffix(".py").exists() or \
                            (root / Path(*candidate.split(".")) / "__init__.py").exists():
                        out.add(candidate)
    return out


def import_graph(modules: dict[str, Path], type_checking: bool = False, root: Path = SRC.parent,
                 top: str = "stagewise") -> dict[str, set[str]]:
    """module -> the modules of ``modules`` it imports."""
    return {m: {i for i in imports_of(p, type_checking, root, top) if i in modules and i != m} for m, p in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle ``[a, b, ..., a]`` of ``graph``, or None. Package __init__ files only
    re-export their own submodules, so edges into a package __init__ from its own submodules
    are left out."""
    graph = {m: {d for d in deps if not m.startswith(d + ".")} for m, deps in graph.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if state.get(dep) is None:
                found = visit(dep)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


MODULES = {module_name(p): p for p in SRC.rglob("*.py")}
GRAPH = import_graph(MODULES)
FULL_GRAPH = import_graph(MODULES, type_checking=True)  # with the imports under `if TYPE_CHECKING:`


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


def test_lmkit_imports_no_lab():
    """The model-weights toolkit is usable without a run: no module of stagewise.lmkit imports
    a lab (also not under ``if TYPE_CHECKING:``), and the lab's old toolkit modules are gone."""
    lmkit = sorted(m for m in MODULES if m == "stagewise.lmkit" or m.startswith("stagewise.lmkit."))
    assert "stagewise.lmkit.models" in lmkit and "stagewise.lmkit.surgery" in lmkit
    for module in lmkit:
        labs = sorted(d for d in imports_of(MODULES[module], type_checking=True) if d.startswith("stagewise.labs"))
        assert not labs, f"{module} imports a lab: {labs}"
    moved = ("adapters", "surgery", "spectra", "export", "scoring", "hub", "models", "blimp", "readers")
    assert not [m for m in moved if f"stagewise.labs.lm.{m}" in MODULES]


def test_import_graph_has_no_cycles():
    """Also imports under ``if TYPE_CHECKING:``, and circles inside one layer (labs -> labs)."""
    graph = {m: deps for m, deps in FULL_GRAPH.items() if m != "stagewise"}
    cycle = find_cycle(graph)
    assert cycle is None, f"import cycle: {' -> '.join(cycle or [])}"


def test_the_cycle_check_sees_a_circle_in_one_layer_and_under_type_checking(tmp_path):
    """A synthetic package: a -> b at runtime, b -> c, c -> a only for annotations. The
    runtime graph has no circle; the full graph has a -> b -> c -> a."""
    pkg = tmp_path / "fake"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .a import A\n")
    (pkg / "a.py").write_text("from .b import B\n\nA = B\n")
    (pkg / "b.py").write_text("def make():\n    from fake.c import C\n    return C\n\nB = 1\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from .a import A\n\nC = 2\n")
    modules = {module_name(p, tmp_path): p for p in pkg.rglob("*.py")}
    assert find_cycle(import_graph(modules, root=tmp_path, top="fake")) is None
    assert find_cycle(import_graph(modules, type_checking=True, root=tmp_path, top="fake")) == \
        ["fake.a", "fake.b", "fake.c", "fake.a"]
    # and today's labs: the old circle contract -> spec -> registry -> contract is gone
    assert "stagewise.labs.contract" not in FULL_GRAPH["stagewise.labs.spec"]
    assert "stagewise.labs.registry" not in FULL_GRAPH["stagewise.labs.spec"]


def test_the_checker_sees_a_violation(tmp_path):
    """The check is real: an upward import in a file is found."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from stagewise.cli import main\n")
    assert "stagewise.cli" in _absolute_imports(bad)
    assert (layer_of("stagewise.cli") or 0) > (layer_of("stagewise.engine.bad") or 0)


def _absolute_imports(path: Path) -> set[str]:
    return {n.module for n in _runtime_nodes(ast.parse(path.read_text()))
            if isinstance(n, ast.ImportFrom) and not n.level and (n.module or "").startswith("stagewise")}


LM_LAB_MODULES = 22
"""The lm lab's module budget (issue 25): the lab (config, tasks, categories, controls, prepare,
batching, records, train, summary, claim specs, figures, resources, lab) and its run analyses;
the model-weights toolkit is :mod:`stagewise.lmkit`. Issue 29 added one concept, ``track``
(the lab's records of a model it did not train: probes, saved models, trajectories). Issue 38
added ``claims`` (one file judging every lm claim) within the budget: typeclaims became
``phases`` (the measurements alone) and spectralclaim's measurement went into ``rankcurve``. Issue 44
added one concept in two files, the pretraining study's acquisition analysis (``acquisition``: the
per-paradigm acquisition steps and the study's claims over runs) and its figures (``acquisition_figures``:
the lab's own run figures stay in ``figures``)."""


def test_the_lm_lab_keeps_to_its_module_budget():
    modules = sorted(p.stem for p in (SRC / "labs" / "lm").glob("*.py") if p.name != "__init__.py")
    assert len(modules) <= LM_LAB_MODULES, f"labs/lm has {len(modules)} modules (budget {LM_LAB_MODULES}): {modules}"


GENERIC_LABS_MODULES = ("stagewise.labs", "stagewise.labs.contract", "stagewise.labs.registry", "stagewise.labs.resolve",
                        "stagewise.labs.spec")
"""The lab layer's own modules (the contract and the registry): everything else under stagewise.labs is a lab."""


def lab_names() -> set[str]:
    """The folders under labs/ that are labs."""
    return {p.parent.name for p in (SRC / "labs").glob("*/lab.py")}


def _string_constants(path: Path) -> set[str]:
    """Every string constant of a module's code (docstrings left out: they may name examples)."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docstrings}


def test_orchestrate_names_no_lab():
    """Issue 39: the generic layer works on the lab contract only. No module of
    stagewise.orchestrate imports a lab's module (also not under ``if TYPE_CHECKING:``), and
    none holds a lab's name as a string in its code (a default lab, a hard-coded ``LAB = "lm"``)."""
    labs = lab_names()
    assert {"lm", "ntp", "disentangled"} <= labs
    orchestrate = sorted(m for m in MODULES if m.startswith("stagewise.orchestrate"))
    for module in orchestrate:
        imported = imports_of(MODULES[module], type_checking=True)
        named = sorted(d for d in imported if d.startswith("stagewise.labs.") and d not in GENERIC_LABS_MODULES)
        assert not named, f"{module} imports a lab: {named}"
        constants = sorted(labs & _string_constants(MODULES[module]))
        assert not constants, f"{module} names a lab in its code: {constants}"


def test_the_lab_naming_check_sees_a_violation(tmp_path):
    """The check is real: a hard-coded lab name and a lab import are found."""
    bad = tmp_path / "bad.py"
    bad.write_text('"""Docstrings may say lm."""\nLAB = "lm"\n\ndef f():\n    from stagewise.labs.lm.track import probe\n')
    assert "lm" in _string_constants(bad) and "Docstrings may say lm." not in _string_constants(bad)
    assert "stagewise.labs.lm.track" in _absolute_imports(bad)
