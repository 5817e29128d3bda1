"""Every attribute a compiled class sets is declared in its ``.pxd``.

The compiled core (``python -m llmsched_gym.build_native``) turns the classes named in ``.pxd``
files into extension types with a fixed attribute layout. An attribute set in the ``.py`` source
but missing from the ``.pxd`` raises ``AttributeError`` in the compiled build only, which today
makes the import guard fall back to pure Python for the whole core: slower, with a warning that
is easy to miss. This test reads both files and names the missing declarations.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "llmsched_gym"
PXD_FILES = sorted(PACKAGE.rglob("*.pxd"))
_CLASS = re.compile(r"^cdef class (\w+)")
_ATTR = re.compile(r"^\s+cdef\s+(?:public\s+|readonly\s+)?(.+)$")


def _declared(pxd: Path) -> dict[str, set[str]]:
    """Class name -> attribute names declared in ``pxd``."""
    out: dict[str, set[str]] = {}
    current = None
    for line in pxd.read_text().splitlines():
        m = _CLASS.match(line)
        if m:
            current = out.setdefault(m.group(1), set())
            continue
        if current is None or not line.startswith((" ", "\t")):
            current = None if not line.strip() == "" else current
            continue
        m = _ATTR.match(line)
        if not m:
            continue  # cpdef / def declarations of methods
        decl = m.group(1).split("#", 1)[0].strip()
        # "object a, b" / "long a, b" / "KVCacheManager _kv" / "object __weakref__"
        _type, _, names = decl.partition(" ")
        current.update(n.strip() for n in names.split(",") if n.strip())
    return out


def _assigned(source: Path, cls: str) -> dict[str, int]:
    """Attributes ``self.X`` assigned in any method of ``cls`` -> first line."""
    tree = ast.parse(source.read_text())
    node = next((n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls), None)
    assert node is not None, f"{source}: no class {cls} (the .pxd names it)"
    out: dict[str, int] = {}

    def targets(t: ast.AST) -> list[ast.AST]:
        if isinstance(t, (ast.Tuple, ast.List)):
            return [x for e in t.elts for x in targets(e)]
        return [t]

    for fn in node.body:
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or not fn.args.args:
            continue
        this = fn.args.args[0].arg
        for stmt in ast.walk(fn):
            if isinstance(stmt, ast.Assign):
                tgts = [x for t in stmt.targets for x in targets(t)]
            elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
                tgts = targets(stmt.target)
            else:
                continue
            for t in tgts:
                if (
                    isinstance(t, ast.Attribute)
                    and isinstance(t.value, ast.Name)
                    and t.value.id == this
                ):
                    out.setdefault(t.attr, stmt.lineno)
    return out


def test_there_are_compiled_classes():
    assert sum(len(_declared(p)) for p in PXD_FILES) >= 6


@pytest.mark.parametrize("pxd", PXD_FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_every_assigned_attribute_is_declared(pxd):
    source = pxd.with_suffix(".py")
    for cls, declared in _declared(pxd).items():
        missing = {
            name: line for name, line in _assigned(source, cls).items() if name not in declared
        }
        assert not missing, (
            f"{source.name}: class {cls} sets {sorted(missing)} (lines "
            f"{sorted(missing.values())}) but {pxd.name} does not declare them; add them to "
            f"the 'cdef class {cls}' block, or the compiled core falls back to pure Python"
        )


def test_a_missing_declaration_is_found(tmp_path):
    (tmp_path / "m.pxd").write_text(
        "cdef class A:\n    cdef public object x, y\n    cpdef f(self)\n"
    )
    (tmp_path / "m.py").write_text(
        "class A:\n    def __init__(self):\n        self.x, self.y = 1, 2\n"
        "    def f(self):\n        self.z += 1\n"
    )
    declared = _declared(tmp_path / "m.pxd")
    assert declared == {"A": {"x", "y"}}
    assigned = _assigned(tmp_path / "m.py", "A")
    assert set(assigned) - declared["A"] == {"z"}
