"""README's walkthrough, word for word, against a real `gpuq serve`.

The ```bash blocks under "## Walkthrough" are run as written by bash in a folder laid out
as a checkout after `make run`: `.venv` (this interpreter's environment) and `.gpuq`
(the data folder the server writes the admin token to). The only change is the port:
`127.0.0.1:8000` becomes a free port. The server runs at normal speed (the walkthrough's
sleeps are real), so this test takes about 35 s. What the README's comments promise is
then checked in the output, in order.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.conftest import truncate_all
from tests.e2e.test_serve import _wait_for
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]


def walkthrough_script() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Walkthrough\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    assert blocks, "README has no ```bash blocks under ## Walkthrough"
    return "\n".join(blocks)


@pytest.fixture
def checkout(engine, database_url, tmp_path):
    """A folder like a checkout after `make run`, with `gpuq serve` running from it."""
    (tmp_path / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    port = free_port()
    env = {**os.environ, "DATABASE_URL": database_url, "GPUQ_PORT": str(port)}
    for name in ("GPUQ_ADMIN_TOKEN", "GPUQ_DATA_DIR", "GPUQ_CONFIG", "GPUQ_SIM_SPEED"):
        env.pop(name, None)
    truncate_all(engine)
    proc = subprocess.Popen(
        [str(tmp_path / ".venv" / "bin" / "gpuq"), "serve"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )

    def up() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            if proc.poll() is not None:
                raise AssertionError(f"gpuq serve exited: {proc.stdout.read()}") from None
            return False

    try:
        _wait_for(up)
        yield tmp_path, port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        truncate_all(engine)


def test_readme_walkthrough_word_for_word(checkout) -> None:
    if shutil.which("curl") is None:
        pytest.skip("the README walkthrough uses curl, which is not installed")
    folder, port = checkout
    script = walkthrough_script().replace("127.0.0.1:8000", f"127.0.0.1:{port}")
    env = {**os.environ, "COLUMNS": "250"}  # rich tables on one line per row
    env.pop("GPUQ_URL", None)
    env.pop("GPUQ_TOKEN", None)
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", script],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = done.stdout
    assert done.returncode == 0, f"walkthrough failed ({done.returncode}):\n{out}\n{done.stderr}"
    promised = [
        '"status":"running"',
        '"node":"a100-1"',
        '"status":"succeeded"',
        '"type":"succeeded"',
        "prep (team research, pool mixed, P2): pending",
        "quota is 60 CU",
        '"quota_units":100.0',
        "v100-0, v100-1",
        '"borrower":"mixed","lender":"training","gpu_type":"v100-16g","units":32.0',
        '"borrower":"mixed","lender":"inference","gpu_type":"v100-16g","units":16.0',
        "train (team nlp, pool training, P1): pending",
        "est. start",
        '"estimated_start":"20',
        '"preemption_count":1',
        '"overall"',
    ]
    at = 0
    for text in promised:
        found = out.find(text, at)
        assert found >= 0, f"expected {text!r} after position {at} in:\n{out}"
        at = found
