"""Benchmark code of this checkout run against an older tree whose package was named ``gpuq``.

The package is ``app`` (docs/architecture.md); for a while it was ``gpuq``. The comparison
benchmarks (``same_decisions.py --code``, ``throughput_kube.py --baseline-tree``) run *this*
file's code on another tree's package, so a tree of that time is imported under its own name
and each ``app.X`` this code asks for is that tree's ``gpuq.X`` module (one module object, not
a second copy).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType


class _GpuqAsApp(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name: str, path: object = None, target: object = None) -> ModuleSpec | None:
        if name == "app" or name.startswith("app."):
            return importlib.util.spec_from_loader(name, self)
        return None

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        return importlib.import_module("gpuq" + spec.name[len("app"):])

    def exec_module(self, module: ModuleType) -> None:
        """Nothing: the module was executed under its own name."""


def alias_old_package(tree: Path) -> str:
    """Make ``app.*`` the package of ``tree`` (first on ``sys.path``) when it has only ``gpuq``;
    the name the tree uses. Decided by the tree's files, not by ``find_spec``: an editable
    install of this checkout would answer for ``app`` and compare new code with itself."""
    if (tree / "app" / "__init__.py").exists():
        return "app"
    if not (tree / "gpuq" / "__init__.py").exists():
        raise ImportError(f"{tree} has neither app/ nor gpuq/")
    sys.meta_path.insert(0, _GpuqAsApp())  # before any finder that knows this checkout's app
    return "gpuq"
