"""The layer contract of docs/architecture.md, checked by the build, not by reviewers.

``lint-imports`` reads the contracts in ``pyproject.toml`` ([tool.importlinter]).
A second check catches what a layer contract cannot see: an import placed
inside a function body so that a cycle does not fail at import time.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app"


def test_layer_contracts_hold() -> None:
    lint = Path(sys.executable).parent / "lint-imports"
    assert lint.exists(), "import-linter is a dev dependency: pip install -e '.[dev]'"
    done = subprocess.run(
        [str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(modules: dict[str, Path]) -> tuple[dict[str, set[str]], list[tuple[str, str, int]]]:
    """Module-level import graph among app modules, and the function-level imports."""
    top: dict[str, set[str]] = defaultdict(set)
    nested: list[tuple[str, str, int]] = []

    def targets(node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            names = []
        return [n for n in names if n in modules]

    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))

        def visit(node: ast.AST, in_function: bool, mod: str = name) -> None:
            for child in ast.iter_child_nodes(node):
                inside = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
                if isinstance(child, ast.Import | ast.ImportFrom):
                    for target in targets(child):
                        if inside:
                            nested.append((mod, target, child.lineno))
                        else:
                            top[mod].add(target)
                visit(child, inside, mod)

        visit(tree, False)
    return top, nested


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, todo = {start}, [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            # importing a.b.c runs a and a.b first
            chain = [".".join(nxt.split(".")[: i + 1]) for i in range(nxt.count(".") + 1)]
            for m in chain:
                if m == goal:
                    return True
                if m not in seen:
                    seen.add(m)
                    todo.append(m)
    return False


def test_no_function_level_import_hides_a_cycle() -> None:
    modules = {_module_name(p): p for p in APP.rglob("*.py")}
    top, nested = _imports(modules)
    hidden = [
        f"{mod}:{line} imports {target} inside a function, and {target} imports {mod}"
        for mod, target, line in nested
        if _reaches(top, target, mod)
    ]
    assert not hidden, "\n".join(hidden)


def test_cycle_check_sees_a_hidden_cycle() -> None:
    """The check above can fail: a function-level import that closes a loop."""
    graph = {"app.a": {"app.b"}, "app.b": {"app.c"}}
    assert _reaches(graph, "app.a", "app.c")
    assert not _reaches(graph, "app.c", "app.a")
