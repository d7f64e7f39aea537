"""The house's import graph, read from the source (ast): no import cycle between folders, and the layering rules below.

Every module of compatmatrix/ is parsed; an import anywhere in it counts (module level, inside a function or a class:
a deferred import closes a cycle as surely as one at the top), in every form: ``import compatmatrix.a.b``, ``from .a
import b`` (b a module: that module; else the package ``a``), ``from . import b``, ``importlib.import_module("...")`` /
``__import__("...")`` with a literal string. Importing ``a.b.c`` runs ``a/__init__`` and ``a/b/__init__`` first, so
it counts as importing those packages as well (not the top package ``compatmatrix``, which imports nothing). Imports
under ``if TYPE_CHECKING:`` never run and are left out. The check registry imports its modules by name from CATALOGUE
(``DYNAMIC``): those edges are added from the tuple, so the registry's own circle is seen (and allowed: it stays in
checks/).

The rules are data (``RULES``, ``ONLY_FROM``, ``ALLOWED``), to be adjusted as wings move: a rule names what a folder
(or a module) must not import; ``ONLY_FROM`` who alone may import a folder or module (the commands' own wings); ``ALLOWED``
lists the imports that break a rule today on purpose, each with why. docs/ARCHITECTURE.md ("Floors") states them. Run this file with
``-s`` to see the cycles inside one folder and the graph's size.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable
from pathlib import Path

import pytest

PACKAGE = "compatmatrix"
SOURCE = Path(__file__).resolve().parent.parent / PACKAGE

# A folder is written as it sits under compatmatrix/ ("checks", "environment", "." for compatmatrix/ itself); a module
# by its dotted name. A rule: importer (folder or module) -> what it must not import (folders or modules).
COMMANDS = ("compatmatrix.cli", "compatmatrix.__main__", "compatmatrix.shell_env", "compatmatrix.hosts")
GROUND = ("compatmatrix.findings", "compatmatrix.hostlist", "compatmatrix.names", "compatmatrix.shell", "compatmatrix.record",
          "compatmatrix.errors", "compatmatrix.redact", "compatmatrix.values", "compatmatrix.console", "compatmatrix.cachefiles",
          "compatmatrix.processes", "compatmatrix.scratch", "compatmatrix.options", "compatmatrix.jobspec")
# the pure core beside matrix/: the resolver, its records and words, and what it resolves for
CORE = ("compatmatrix.target", "compatmatrix.devices", "compatmatrix.rules", "compatmatrix.reasons", "compatmatrix.search",
        "compatmatrix.explain", "compatmatrix.sentences", "compatmatrix.resolve", "compatmatrix.translate")
WINGS = ("maintain", "checks", "launchers", "live", "install", "placement", "export", "migrate", "tune", "render", "watch")
ABOVE_GROUND = (*WINGS, "inputs", "environment", "matrix", "compatmatrix.planning", *CORE, *COMMANDS)
# run by the target interpreter (or copied beside a rank): standard library only, nothing of compatmatrix
STANDALONE = ("compatmatrix.environment.env_probe", "compatmatrix.environment.interpreter_probe", "compatmatrix.live.worker",
              "compatmatrix.live.protocol", "compatmatrix.tune.workload", "compatmatrix.watch.site.sitecustomize",
              "compatmatrix.tune.fixture_site.sitecustomize")
RULES: dict[str, tuple[str, ...]] = {
    # the matrix: data, its loading and caching; its services (update, verify, registry, health) are maintain/'s; below
    # the resolver and every machine fact
    "matrix": (*WINGS, "inputs", "environment", "compatmatrix.planning", *CORE, *COMMANDS),
    # the resolver and its records: the matrix and the ground floor only
    **{module: (*WINGS, "inputs", "environment", "compatmatrix.planning", *COMMANDS) for module in CORE},
    "maintain": ("launchers", "live", "placement", "export", "migrate", "tune", "watch", *COMMANDS),
    # machine and interpreter facts: below every verdict and every launcher
    "environment": ("maintain", "checks", "launchers", "live", "placement", "export", "migrate", "tune", "render", "install", "watch",
                    "compatmatrix.planning", *COMMANDS),
    "inputs": ("maintain", "checks", "launchers", "live", "placement", "export", "migrate", "tune", "render", "watch",
               "compatmatrix.planning", *COMMANDS),
    # launchers know no CPU plan, no live report, no verdict (docs/ARCHITECTURE.md, "Floors")
    "launchers": ("checks", "placement", "live", "tune", "export", "migrate", "render", "install", "maintain", "watch", "inputs",
                  "compatmatrix.planning", *COMMANDS),
    "placement": ("live", "checks", "tune", "export", "migrate", "install", "maintain", "render", "watch", *COMMANDS),
    "checks": ("live", "tune", "export", "migrate", "render", "maintain", "watch", *COMMANDS),
    "install": ("launchers", "placement", "live", "tune", "export", "migrate", "maintain", "watch", *COMMANDS),
    "live": ("placement", "install", "tune", "export", "migrate", "render", "maintain", "watch", *COMMANDS),
    "render": ("checks", "launchers", "live", "tune", "install", "migrate", "export", "maintain", "watch", *COMMANDS),
    "export": ("checks", "install", "live", "tune", "migrate", "maintain", "watch", *COMMANDS),
    "tune": ("checks", "install", "export", "migrate", "render", "maintain", "watch", *COMMANDS),
    # the watcher takes the launch as a callable: processes, scratch, console and errors are all it imports
    "watch": tuple(pattern for pattern in ABOVE_GROUND if pattern != "watch"),
    # migrate stands on nearly everything (planning, shell_env, live, install), but on no command
    "migrate": ("compatmatrix.cli", "compatmatrix.__main__", "compatmatrix.hosts", "export", "tune", "maintain", "watch"),
    # the shared records and readers on the ground floor import nothing of compatmatrix above them
    **{module: ABOVE_GROUND for module in GROUND},
    **{module: (PACKAGE,) for module in STANDALONE},
}
# Who may import a folder or module (besides itself): the commands' own wings and services stay the commands'.
ONLY_FROM: dict[str, tuple[str, ...]] = {
    "compatmatrix.cli": ("compatmatrix.__main__",),
    "watch": ("cli",),
    "maintain": ("cli",),
    "tune": ("cli",),
    "migrate": ("cli",),
    "compatmatrix.hosts": ("cli",),
    "compatmatrix.options": ("cli",),
    "compatmatrix.planning": ("cli", "migrate"),
    "compatmatrix.shell_env": ("cli", "migrate"),
}
# (importer module, what it may import against a rule: a folder or a module): an exception seen today, with why. (The
# matrix services moved to maintain/ and took their exceptions with them: matrix/ needs none.)
ALLOWED: dict[tuple[str, str], str] = {
    ("compatmatrix.hostlist", "install"): "install/files.open_regular (a FIFO refused without blocking): a ground-floor helper that "
                                          "still lives in install/",
}
# Modules that import others by a name computed at run time: module -> the tuple literal (at its top level) whose
# entries' second element names a module of the same package (the check registry: ("packages.eol", "packages", True)).
DYNAMIC: dict[str, str] = {"compatmatrix.checks.registry": "CATALOGUE"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SOURCE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(SOURCE.rglob("*.py"))}


def folder(module: str, known: dict[str, Path]) -> str:
    """``checks`` for compatmatrix.checks.packages and for compatmatrix.checks itself; ``.`` for compatmatrix.cli."""
    relative = known[module].parent.relative_to(SOURCE)
    return "." if relative == Path(".") else relative.as_posix()


def _type_checking_only(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _nodes(tree: ast.AST) -> Iterable[ast.AST]:
    """Every node, except what an ``if TYPE_CHECKING:`` body holds (its ``else:`` runs and is kept)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if _type_checking_only(node):
            stack.extend(node.orelse)  # type: ignore[attr-defined]
            continue
        stack.extend(ast.iter_child_nodes(node))


def _imported_names(module: str, is_package: bool, tree: ast.AST, known: dict[str, Path]) -> set[str]:
    names: set[str] = set()
    for node in _nodes(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                names.add(f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else source)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if called in ("import_module", "__import__"):
                names.add(node.args[0].value)
    if module in DYNAMIC:
        names.update(f"{module.rpartition('.')[0]}.{entry}" for entry in _catalogue(tree, DYNAMIC[module]))
    return names


def _catalogue(tree: ast.AST, name: str) -> list[str]:
    for node in ast.iter_child_nodes(tree):
        target = node.target if isinstance(node, ast.AnnAssign) else (node.targets[0] if isinstance(node, ast.Assign) else None)
        if isinstance(target, ast.Name) and target.id == name:
            # a row, or *(row for each record) (checks/registry.CATALOGUE's companion checks): the generator's row names the module
            rows = [row.value.elt if isinstance(row, ast.Starred) else row for row in node.value.elts]  # type: ignore[union-attr, attr-defined]
            return [row.elts[1].value for row in rows]  # type: ignore[union-attr, attr-defined]
    raise AssertionError(f"DYNAMIC names {name}, which the module does not assign at its top level")


def _owner(name: str, known: dict[str, Path]) -> str | None:
    """The module of compatmatrix an imported name runs: itself, else the nearest package or module above it."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


@functools.lru_cache(maxsize=None)
def import_graph() -> tuple[dict[str, Path], dict[str, set[str]]]:
    known = modules()
    graph: dict[str, set[str]] = {module: set() for module in known}
    for module, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for name in _imported_names(module, path.name == "__init__.py", tree, known):
            if name != PACKAGE and not name.startswith(PACKAGE + "."):
                continue
            target = _owner(name, known)
            while target and target != PACKAGE:  # the module and every package __init__ above it
                if target != module:
                    graph[module].add(target)
                target = target.rpartition(".")[0]
    return known, graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components (iterative), each sorted; only those of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
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
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _path(graph: dict[str, set[str]], members: set[str], start: str, goal: str) -> list[str]:
    """A shortest path start -> goal inside ``members`` (breadth first), both ends included."""
    came_from: dict[str, str] = {start: start}
    frontier = [start]
    while frontier and goal not in came_from:
        following = []
        for node in frontier:
            for child in sorted(graph[node] & members):
                if child not in came_from:
                    came_from[child] = node
                    following.append(child)
        frontier = following
    path = [goal]
    while path[-1] != start:
        path.append(came_from[path[-1]])
    return list(reversed(path))


def a_cycle(component: list[str], graph: dict[str, set[str]], where=None) -> list[str]:  # noqa: ANN001
    """One circle through the component, as the failure message shows it: from its first module through the nearest
    module in another folder (``where``: a module's folder) and back; short (breadth first)."""
    members, start = set(component), component[0]
    others = [m for m in component if where is not None and where(m) != where(start)]
    if not others:
        via = next(child for child in sorted(graph[start] & members))
        return [start] + _path(graph, members, via, start) if via != start else [start, start]
    goal = min(others, key=lambda m: len(_path(graph, members, start, m)))
    return _path(graph, members, start, goal) + _path(graph, members, goal, start)[1:]


def _matches(module: str, pattern: str, known: dict[str, Path]) -> bool:
    """A dotted pattern is that module and, should it become a package (cli.py -> cli/), everything in it; any other
    pattern is a folder and its subfolders."""
    if pattern.startswith(PACKAGE):
        return module == pattern or module.startswith(pattern + ".")
    where = folder(module, known)
    return where == pattern or where.startswith(pattern + "/")


def test_the_graph_is_read():
    """The reading itself: every form of import is seen (a test that could not fail would be no net)."""
    known, graph = import_graph()
    assert len(known) > 100
    assert "compatmatrix.checks.registry" in graph["compatmatrix.checks.packages"]  # from .registry import ... (module level)
    assert "compatmatrix.checks.packages" in graph["compatmatrix.checks.registry"]  # DYNAMIC: CATALOGUE
    assert "compatmatrix.launchers" in graph["compatmatrix.launchers.live"]  # from . import LAUNCHERS
    assert "compatmatrix.launchers" in graph["compatmatrix.checks.oneccl_env"]  # deferred, and the package of launchers.environment
    assert "compatmatrix.launchers.environment" in graph["compatmatrix.checks.oneccl_env"]


def test_a_cycle_across_folders_is_found():
    """The finder on a graph made for it: a circle through two folders is one component, and its circle is shown."""
    graph = {"a.x": {"a.y"}, "a.y": {"b.z"}, "b.z": {"a.x"}, "c": {"a.x"}}
    (component,) = strongly_connected(graph)
    assert component == ["a.x", "a.y", "b.z"]
    assert a_cycle(component, graph) == ["a.x", "a.y", "b.z", "a.x"]
    assert a_cycle(component, graph, lambda m: m.split(".")[0]) == ["a.x", "a.y", "b.z", "a.x"]
    graph["a.x"].add("a.w")
    graph["a.w"] = {"a.x"}  # a shorter circle inside a/ joins the component: the message still shows the one through b/
    (component,) = strongly_connected(graph)
    assert a_cycle(component, graph, lambda m: m.split(".")[0]) == ["a.w", "a.x", "a.y", "b.z", "a.x", "a.w"]


def test_no_import_cycle_spans_two_folders():
    known, graph = import_graph()
    components = strongly_connected(graph)
    across = [c for c in components if len({folder(m, known) for m in c}) > 1]
    inside = [c for c in components if c not in across]
    print(f"\n{len(known)} modules, {sum(map(len, graph.values()))} import edges; cycles: {len(across)} across folders "
          f"{[len(c) for c in across]}, {len(inside)} inside one folder {[len(c) for c in inside]}")
    for component in inside:
        print(f"  inside {folder(component[0], known)}/: {' -> '.join(a_cycle(component, graph))}")
    where = functools.partial(folder, known=known)
    message = "\n".join(f"{len(c)} modules in {sorted({folder(m, known) for m in c})}: {' -> '.join(a_cycle(c, graph, where))}\n  all: {', '.join(c)}"
                        for c in across)
    assert not across, f"import cycles across folders:\n{message}"


def test_no_cycle_among_the_top_floor_modules():
    """The only cycles left are inside one folder; at the top floor (compatmatrix/*.py), where the commands stand beside
    the shared records, there is none at all (explain / resolve / sentences was one)."""
    known, graph = import_graph()
    top = [c for c in strongly_connected(graph) if {folder(m, known) for m in c} == {"."}]
    assert not top, "cycles among compatmatrix/*.py:\n" + "\n".join(" -> ".join(a_cycle(c, graph)) for c in top)


@pytest.mark.parametrize("importer", sorted(RULES))
def test_layering(importer):
    known, graph = import_graph()
    forbidden = RULES[importer]
    broken = []
    for module in sorted(known):
        if not _matches(module, importer, known):
            continue
        for target in sorted(graph[module]):
            if any(module == allowed and _matches(target, pattern, known) for allowed, pattern in ALLOWED):
                continue
            rule = next((pattern for pattern in forbidden if _matches(target, pattern, known)), None)
            if rule is not None:
                broken.append(f"{module} imports {target} ({importer} must not import {rule})")
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize("imported", sorted(ONLY_FROM))
def test_imported_only_from(imported):
    known, graph = import_graph()
    allowed = (imported, *ONLY_FROM[imported])
    broken = [f"{module} imports {target} (only {', '.join(ONLY_FROM[imported])} may import {imported})"
              for module in sorted(known) if not any(_matches(module, pattern, known) for pattern in allowed)
              for target in sorted(graph[module]) if _matches(target, imported, known)]
    assert not broken, "\n".join(broken)


def test_every_exception_is_still_needed():
    """An ALLOWED row whose import is gone is deleted, so the list says what the house needs today."""
    known, graph = import_graph()
    stale = [f"{a} -> {b}" for a, b in ALLOWED if a in known and not any(_matches(t, b, known) for t in graph[a])]
    gone = [a for a, _ in ALLOWED if a not in known]
    assert not stale, f"ALLOWED names imports that no longer happen: {stale}"
    # a module that moved out (the matrix services' new wing) takes its rows with it: say so rather than fail
    if gone:
        print(f"ALLOWED rows for modules that are gone (delete them): {sorted(set(gone))}")
