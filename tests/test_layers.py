"""The package imports downwards only (issue 14; the map is in docs/design.md).

The import graph is built from the source (every ``import`` and ``from ... import``, at
module level and inside functions), so a function-local import that dodges a cycle at
import time still counts.  Two properties:

* the graph of zyg's modules is acyclic;
* every module belongs to a layer, and imports modules of its own layer or lower ones.
"""
import ast
import os
from typing import Dict, List, Set

import pytest

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "zyg")

# bottom to top; a module is in the first layer whose test accepts it
LAYERS = [
    ("base", lambda m: m in ("zyg.errors", "zyg.caches", "zyg.version", "zyg.dicts", "zyg.numerics")),
    ("front end", lambda m: m == "zyg.ssa" or m.startswith("zyg.ssa.")),
    ("rules", lambda m: (m == "zyg.rules" or m.startswith("zyg.rules.")) and m != "zyg.rules.table"),
    ("transforms", lambda m: m == "zyg.pullbacks" or m.startswith("zyg.pullbacks.")),
    ("back ends", lambda m: m == "zyg.compile" or m == "zyg.backends" or m.startswith("zyg.backends.")),
    ("driver", lambda m: m in ("zyg.driver", "zyg.build", "zyg.safety", "zyg.entry", "zyg.tiered")),
    ("nested transforms", lambda m: m == "zyg.nested" or m.startswith("zyg.nested.")),
    ("api", lambda m: m in ("zyg", "zyg.api", "zyg.check", "zyg.__main__", "zyg.rules.table",
                            "zyg.cuda", "zyg.cuda_kernel", "zyg.cuda_tape", "zyg.sparse") or m == "zyg.tasks" or m.startswith("zyg.tasks.") or
     m == "zyg.interop" or m.startswith("zyg.interop.")),
]


def _modules() -> Dict[str, str]:
    out = {}
    for dp, _, files in os.walk(ROOT):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dp, f)
                rel = os.path.relpath(path, os.path.dirname(ROOT))[:-3].replace(os.sep, ".")
                out[rel[:-len(".__init__")] if rel.endswith(".__init__") else rel] = path
    return out


def _targets(mods: Dict[str, str], cur: str, node) -> List[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in mods]
    if node.level:
        pkg = cur.split(".")
        if not mods[cur].endswith("__init__.py"):
            pkg = pkg[:-1]
        pkg = pkg[:len(pkg) - node.level + 1]
        base = ".".join(pkg + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    out = []
    for a in node.names:
        if f"{base}.{a.name}" in mods:
            out.append(f"{base}.{a.name}")      # from pkg import module
        elif base in mods:
            out.append(base)
    return out


def import_graph() -> Dict[str, Set[str]]:
    mods = _modules()
    graph: Dict[str, Set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), path)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[m].update(t for t in _targets(mods, m, node) if t != m)
    return graph


def _cycle(graph: Dict[str, Set[str]]) -> List[str]:
    """One cycle of the graph (a list of modules), or [] when it is acyclic."""
    state: Dict[str, int] = {}
    path: List[str] = []

    def visit(v):
        state[v] = 1
        path.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == 1:
                return path[path.index(w):] + [w]
            if w not in state:
                got = visit(w)
                if got:
                    return got
        path.pop()
        state[v] = 2
        return []
    for v in sorted(graph):
        if v not in state:
            got = visit(v)
            if got:
                return got
    return []


def _layer(m: str) -> int:
    for k, (_, accepts) in enumerate(LAYERS):
        if accepts(m):
            return k
    raise AssertionError(f"{m} belongs to no layer: add it to LAYERS and to docs/design.md")


def test_the_import_graph_is_acyclic():
    cyc = _cycle(import_graph())
    assert not cyc, "import cycle: " + " -> ".join(cyc)


def test_modules_import_their_own_layer_or_lower_ones():
    bad = []
    for m, targets in sorted(import_graph().items()):
        for t in sorted(targets):
            if _layer(t) > _layer(m):
                bad.append(f"{m} ({LAYERS[_layer(m)][0]}) imports {t} ({LAYERS[_layer(t)][0]})")
    assert not bad, "\n".join(bad)


def test_the_checker_sees_cycles_and_upward_imports():
    """The checks can fail: a cycle and a function-level import are found."""
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) == []
    mods = {"zyg.ssa.lower": "x/zyg/ssa/lower.py", "zyg.api": "x/zyg/api.py"}
    node = ast.parse("def f():\n    from ..api import grad\n").body[0].body[0]
    assert _targets(mods, "zyg.ssa.lower", node) == ["zyg.api"]
    assert _layer("zyg.api") > _layer("zyg.ssa.lower")


@pytest.mark.parametrize("layer", [name for name, _ in LAYERS])
def test_every_layer_is_documented(layer):
    with open(os.path.join(os.path.dirname(ROOT), "docs", "design.md"), encoding="utf-8") as fh:
        assert layer in fh.read().lower()


def _module_loads(tree) -> List[int]:
    """Lines of calls ``x.load(code, ns, names, stem)`` (a back end's module load: four or
    more arguments) outside a method named ``load`` (a back end's own override)."""
    out: List[int] = []

    def visit(node, in_load: bool):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            in_load = in_load or node.name == "load"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr == "load" and len(node.args) + len(node.keywords) >= 4 and not in_load:
            out.append(node.lineno)
        for child in ast.iter_child_nodes(node):
            visit(child, in_load)
    visit(tree, False)
    return out


def test_generated_modules_reach_a_back_end_only_through_the_build_step():
    """One build step (zyg/build.py, issue 25): every mode hands its generated module to
    the back end through ``build.load``, so a back end plugs in once."""
    bad = []
    for m, path in sorted(_modules().items()):
        if m == "zyg.build":
            continue
        with open(path, encoding="utf-8") as fh:
            lines = _module_loads(ast.parse(fh.read(), path))
        bad += [f"{path}:{ln}" for ln in lines]
    assert not bad, "Backend.load called outside zyg/build.py: " + ", ".join(bad)
    # the check sees a call, and lets a back end's override call its base
    assert _module_loads(ast.parse("backend.load(code, ns, names, stem)\n")) == [1]
    assert _module_loads(ast.parse("def load(self, a, b, c, d):\n    Base.load(self, a, b, c, d)\n")) == []
