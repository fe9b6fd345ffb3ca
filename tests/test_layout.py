"""The package's shape: the stages a request flows through, each importing only earlier ones; no function or class
too long to read at once; no import cycle. Read from the source with `ast`, so nothing here imports the package."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "launcher"

# The stages in the order a request flows through them. A module may import its own stage and earlier ones only.
STAGES = ("common", "model", "vllm", "plan", "check", "report", "run", "cli")
NOT_CODE = {"__pycache__", "data", "bundled_profiles", "templates", "py.typed", "__init__.py", "__main__.py"}

MAX_FUNCTION_LINES = 80
MAX_CLASS_LINES = 250
# "path:qualified name" -> why it stays longer. A stale entry (now within the limit) fails too, so the list only
# shrinks.
LONG: dict[str, str] = {}


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(PACKAGE.rglob("*.py")):
        parts = p.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = p
    return out


MODULES = _modules()


def _imports(path: Path, *, for_types: bool = True) -> set[str]:
    """The launcher modules a file imports, lazily inside functions too (`from launcher.x import name` counts as
    launcher.x.name when that is a module, else launcher.x). `for_types=False` leaves out `if TYPE_CHECKING:`
    blocks, which are never run."""
    found: set[str] = set()
    tree = ast.parse(path.read_text())
    skipped = set()
    if not for_types:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
                skipped |= {id(n) for b in node.body for n in ast.walk(b)}
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("launcher"):
            mod = node.module or ""
            found |= {f"{mod}.{a.name}" if f"{mod}.{a.name}" in MODULES else mod for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("launcher")}
        elif isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{path}: a relative import; name the module in full")
    return found


def _stage(module: str) -> int:
    """-1 for the package itself (its __version__), else the stage's place in STAGES."""
    parts = module.split(".")
    return -1 if len(parts) == 1 else STAGES.index(parts[1])


def test_the_top_level_is_the_stages() -> None:
    """`ls launcher/` says what the tool does: one package per stage and nothing else but data."""
    entries = {p.name for p in PACKAGE.iterdir()} - NOT_CODE
    assert entries == set(STAGES)
    for stage in STAGES:
        init = PACKAGE / stage / "__init__.py"
        assert ast.get_docstring(ast.parse(init.read_text())), f"{init} says in a docstring what the stage holds"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m != "launcher" and m != "launcher.__main__"))
def test_a_module_imports_only_its_stage_and_earlier_ones(module: str) -> None:
    own = _stage(module)
    later = sorted(m for m in _imports(MODULES[module]) if _stage(m) > own)
    assert not later, f"{module} ({STAGES[own]}) imports a later stage: {later}"


def test_no_import_cycle() -> None:
    """Between modules, counting the imports made inside functions as well (not those only a type checker reads)."""
    graph = {m: _imports(p, for_types=False) & set(MODULES) for m, p in MODULES.items()}
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*path[path.index(n) :], n]))
            if n not in state:
                visit(n, [*path, n])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])


def _sizes() -> dict[str, tuple[str, int]]:
    """'path:qualified name' -> (kind, lines) of every function and class in the package."""
    out: dict[str, tuple[str, int]] = {}

    def walk(node: ast.AST, prefix: str, rel: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                kind = "class" if isinstance(child, ast.ClassDef) else "function"
                out[f"{rel}:{name}"] = (kind, (child.end_lineno or child.lineno) - child.lineno + 1)
                walk(child, f"{name}.", rel)
            else:
                walk(child, prefix, rel)

    for p in MODULES.values():
        walk(ast.parse(p.read_text()), "", str(p.relative_to(PACKAGE.parent)))
    return out


def test_functions_and_classes_are_short_enough_to_read_at_once() -> None:
    sizes = _sizes()
    limit = {"function": MAX_FUNCTION_LINES, "class": MAX_CLASS_LINES}
    over = {k: v for k, v in sizes.items() if v[1] > limit[v[0]] and k not in LONG}
    assert not over, "over the limit (shorten it, or name it in LONG with a reason): " + ", ".join(
        f"{k} ({kind}, {n} lines)" for k, (kind, n) in sorted(over.items())
    )
    stale = sorted(k for k in LONG if k not in sizes or sizes[k][1] <= limit[sizes[k][0]])
    assert not stale, f"within the limit now (take them out of LONG): {stale}"


def test_the_measure_sees_what_it_measures() -> None:
    """The walk finds methods and nested functions, and counts a def's own lines."""
    sizes = _sizes()
    assert sizes["launcher/run/watchdog.py:Watchdog.observe"] == ("function", 15)
    assert sizes["launcher/run/watchdog.py:Watchdog"][0] == "class"
    assert len(sizes) > 1000
