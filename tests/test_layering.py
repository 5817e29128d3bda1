"""The package's floors: every import, at module top or inside a function, goes down or across.

A module may import modules of its own floor or lower ones, never a higher one. The floors, from
the ground up (a module belongs to the longest prefix listed; ARCHITECTURE.md draws them):

0. plumbing: errors, config, JSON/YAML readers, the compiled-core loader;
1. data: request and job specs, the cost models, record column names, atomic file writes, the
   task descriptors;
2. the KV cache, queues and the metrics computed from records;
3. the engine (``core.engine``, ``core.async_loop``);
4. policies (schedulers) and workload generators;
5. ``simulation`` (one trace through one engine);
6. clusters and routers;
7. scenarios, environments, the vLLM backends, calibration, counterfactuals and the lookahead
   agent built on them, benchmarks;
8. the leaderboard;
9. the command line and the package's front door.

A module that simulates to set up a paper's method sits on the simulation floor itself
(``policies.infermax.warm_start``). ``KNOWN_DEBT`` lists upward imports that exist, each with
the issue that removes it (none today: issue 25 removed the last). The test fails on any other
upward import, and on a debt entry that no longer exists (so the list only shrinks).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "llmsched_gym"

FLOORS = {
    "errors": 0, "config": 0, "_json": 0, "_yaml": 0, "_gc": 0, "_markdown": 0, "_native": 0,
    "build_native": 0,
    "core.request": 1, "core.job": 1, "cost": 1, "metrics.columns": 1, "metrics._atomic": 1,
    "tasks": 1, "metrics._outputset": 1,
    "kv": 2, "core.queues": 2, "metrics": 2,
    "core": 3,
    "policies": 4, "workloads": 4,
    "simulation": 5, "policies.infermax.warm_start": 5,
    "cluster": 6,
    "scenarios": 7, "envs": 7, "backends": 7, "calibration": 7, "counterfactual": 7, "bench": 7,
    "lookahead": 7,
    "leaderboard": 8,
    "cli": 9, "__main__": 9, "_gym_hook": 9, "": 9,
}  # fmt: skip
"""Module (dotted, without ``llmsched_gym.``; "" is the package's ``__init__``) -> floor."""

KNOWN_DEBT: set[tuple[str, str]] = set()


KNOWN_CIRCLES: tuple[set[str], ...] = ()
"""Modules that import each other (through imports inside functions), each to be broken; a
circle must lie within one of these. None today: issue 25 broke the last two (the workload-kind
registry left ``scenarios.spec``; a submission folder is resolved in ``leaderboard.policy``)."""


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(name: str) -> bool:
    """Whether the dotted ``name`` (without ``llmsched_gym.``) is a module or package."""
    path = PACKAGE.joinpath(*name.split("."))
    return path.is_dir() or path.with_name(f"{path.name}.py").is_file()


def floor(module: str) -> int:
    """The floor of a module: its longest prefix in ``FLOORS``."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        key = ".".join(parts[:n])
        if key in FLOORS:
            return FLOORS[key]
    if module in FLOORS:
        return FLOORS[module]
    raise AssertionError(f"module llmsched_gym.{module} has no floor: add it to FLOORS")


def _typing_only(tree: ast.AST) -> set[int]:
    """ids of the nodes under ``if TYPE_CHECKING:`` (imports for annotations, never run)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and (
            (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
            or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")
        ):
            out.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return out


def imports(typing: bool = True) -> list[tuple[str, str, int]]:
    """(importer, imported, line) for every import of a package module, anywhere in the code.

    ``typing=False`` leaves out imports under ``if TYPE_CHECKING:``, which never run.
    """
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        importer = _module(path)
        tree = ast.parse(path.read_text(), str(path))
        skip = set() if typing else _typing_only(tree)
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module == "llmsched_gym":  # submodules, or names of the front door
                    targets = [a.name if _is_module(a.name) else "" for a in node.names]
                elif node.module.startswith("llmsched_gym."):
                    base = node.module.removeprefix("llmsched_gym.")
                    targets = [  # ``from llmsched_gym.pkg import submodule`` imports it
                        f"{base}.{a.name}" if _is_module(f"{base}.{a.name}") else base
                        for a in node.names
                    ]
            elif isinstance(node, ast.Import):
                targets = [
                    a.name.removeprefix("llmsched_gym.")
                    for a in node.names
                    if a.name.startswith("llmsched_gym.")
                ]
            out += [(importer, t, node.lineno) for t in targets]
    return out


def test_every_module_has_a_floor() -> None:
    for path in PACKAGE.rglob("*.py"):
        floor(_module(path))


def test_no_import_runs_upward() -> None:
    upward = {
        (a, b): line for a, b, line in imports() if floor(b) > floor(a) and (a, b) not in KNOWN_DEBT
    }
    assert not upward, "upward imports (importer -> imported: line): " + ", ".join(
        f"{a} -> {b}: {line}" for (a, b), line in sorted(upward.items())
    )


def test_known_debt_still_exists() -> None:
    found = {(a, b) for a, b, _ in imports()}
    gone = sorted(KNOWN_DEBT - found)
    assert not gone, f"fixed, so drop them from KNOWN_DEBT: {gone}"
    assert all(floor(b) > floor(a) for a, b in KNOWN_DEBT)


def test_no_citation_of_files_users_do_not_have() -> None:
    """Docstrings, comments and docs cite papers and the authors' repositories at a commit,
    never the notes or folders of the machine the project was built on."""
    root = PACKAGE.parent
    folders = ("llmsched_gym", "leaderboards", "baselines", "scripts", "calibration", "envs")
    files = [root / "README.md", root / "ARCHITECTURE.md"]
    for folder in folders:
        files += [p for p in (root / folder).rglob("*") if p.suffix in (".py", ".md", ".yaml")]
    bad = []
    for path in files:
        text = path.read_text(errors="replace")
        for marker in ("NOTES §", "NOTES.md", "/work/shared", "shared/papers"):
            if marker in text:
                bad.append(f"{path.relative_to(root)}: {marker}")
    assert not bad, bad


def circles() -> list[set[str]]:
    """Sets of two or more modules that reach each other by imports that run (Tarjan's SCCs).

    Imports for annotations only (``if TYPE_CHECKING:``) are left out: the engine's rooms name
    ``Engine`` in their annotations, and that never runs.
    """
    edges: dict[str, set[str]] = {}
    for a, b, _ in imports(typing=False):
        if a != b:
            edges.setdefault(a, set()).add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = {stack.pop()}
            while v not in comp:
                comp.add(stack.pop())
            if len(comp) > 1:
                out.append(comp)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_new_import_circle() -> None:
    new = [sorted(c) for c in circles() if not any(c <= known for known in KNOWN_CIRCLES)]
    assert not new, f"modules that import each other (break the circle): {new}"


def test_known_circles_still_exist() -> None:
    """A circle that was broken leaves ``KNOWN_CIRCLES`` (so the list only shrinks)."""
    found = circles()
    gone = [sorted(k) for k in KNOWN_CIRCLES if not any(c <= k for c in found)]
    assert not gone, f"broken, so drop them from KNOWN_CIRCLES: {gone}"


MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 100
SHORT_FUNCTION_PACKAGES = ("core", "policies", "envs")


def test_long_modules_say_why() -> None:
    """A module over 800 lines states at its top why it is one module (a ``Size:`` paragraph)."""
    unexplained = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        if text.count("\n") > MAX_MODULE_LINES:
            doc = ast.get_docstring(ast.parse(text)) or ""
            if not any(line.startswith("Size:") for line in doc.splitlines()):
                unexplained.append(f"{path.relative_to(PACKAGE)} ({text.count(chr(10))} lines)")
    assert not unexplained, f"split these, or say why at the top ('Size: ...'): {unexplained}"


def test_engine_policies_and_envs_have_no_function_over_100_lines() -> None:
    long = []
    for name in SHORT_FUNCTION_PACKAGES:
        for path in sorted((PACKAGE / name).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    n = node.end_lineno - node.lineno + 1
                    if n > MAX_FUNCTION_LINES:
                        long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} ({n})")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def _map_floors() -> dict[str, int]:
    """ARCHITECTURE.md's floor table: each room it names (a backticked module or folder) -> its
    floor."""
    import re

    text = (PACKAGE.parent / "ARCHITECTURE.md").read_text()
    out: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"^\| (\d+) \| (.*?) \|", line)
        if m:
            for room in re.findall(r"`([^`]+)`", m.group(2)):
                out[room.rstrip("/").replace("/", ".")] = int(m.group(1))
    return out


def test_the_map_lists_every_room_on_its_floor() -> None:
    """Every room of ``FLOORS`` is in ARCHITECTURE.md's table, on the floor the test enforces
    (``""``, the package's front door, is ``__init__`` there), so the map cannot drift."""
    drawn = _map_floors()
    wrong = []
    for room, level in FLOORS.items():
        name = room or "__init__"
        if drawn.get(name) != level:
            wrong.append(f"{name}: map {drawn.get(name, 'missing')}, FLOORS {level}")
    assert not wrong, "ARCHITECTURE.md's floor table: " + "; ".join(wrong)
