"""The evaluation's traces: every scenario under eval/ reads a file that ``make traces``
provides (eval/traces/sources.csv), the fetch keeps only files with the pinned SHA-256,
and a missing trace tells the user to run ``make traces``."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
import yaml

from app.simulate import trace_fetch
from app.simulate.command import ScenarioInputError, load_scenario
from app.simulate.trace_fetch import TRACES_DIR, fetch, read_sources

REPO = Path(__file__).resolve().parents[2]


def _scenario_paths() -> list[tuple[Path, Path]]:
    out = []
    for f in sorted((REPO / "eval").rglob("*.yaml")):
        tr = (yaml.safe_load(f.read_text()) or {}).get("trace") or {}
        for key in ("path", "nodes", "pods"):
            if tr.get(key):
                out.append((f, (f.parent / tr[key]).resolve()))
    return out


def test_every_scenario_reads_a_manifest_trace_inside_the_repository():
    wanted = {(TRACES_DIR / s.path).resolve() for s in read_sources()}
    pairs = _scenario_paths()
    assert len(pairs) >= 12
    for scen, p in pairs:
        assert p in wanted, f"{scen.relative_to(REPO)} reads {p}, not a file of make traces"


def test_no_repository_file_points_outside_it():
    """No scenario, doc, help text or comment names the product documents or a folder
    beside the checkout (a clone has neither)."""
    bad = re.compile(r"\.\./shared|/work/shared|\bAPI\.md|\bDESIGN\.md|MISSION\.md|the article")
    hits = []
    for sub in ("gpuq", "eval", "docs", "k8s", "bench", "tests", "README.md", "Makefile",
                "pyproject.toml", "Dockerfile", "docker-compose.yml"):
        root = REPO / sub
        files = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]
        for p in files:
            if p.suffix not in {".py", ".md", ".yaml", ".yml", ".toml", ".html", ""} \
                    or p == Path(__file__) or "vendor" in p.parts:
                continue
            for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
                if bad.search(line):
                    hits.append(f"{p.relative_to(REPO)}:{n}: {line.strip()[:100]}")
    assert not hits, "\n".join(hits)


def _manifest(tmp: Path, files: dict[str, bytes]) -> Path:
    dest = tmp / "traces"
    dest.mkdir()
    rows = ["path,url,sha256,bytes"] + [
        f"{k},https://example.invalid/{k},{hashlib.sha256(v).hexdigest()},{len(v)}"
        for k, v in files.items()]
    (dest / "sources.csv").write_text("\n".join(rows) + "\n")
    return dest


def test_fetch_copies_verified_files_and_refuses_other_bytes(tmp_path: Path):
    dest = _manifest(tmp_path, {"philly/p.csv": b"a,b\n1,2\n", "ali/n.csv": b"x\n"})
    src = tmp_path / "have"
    (src / "philly").mkdir(parents=True)
    (src / "philly" / "p.csv").write_bytes(b"a,b\n1,2\n")
    (src / "n.csv").write_bytes(b"not the pinned bytes\n")  # found by its bare name
    problems = fetch(dest, from_dir=src, log=lambda _m: None)
    assert (dest / "philly" / "p.csv").read_bytes() == b"a,b\n1,2\n"
    assert not (dest / "ali" / "n.csv").exists()
    assert len(problems) == 1 and "ali/n.csv: SHA-256" in problems[0]
    assert "not kept" in problems[0]
    (src / "n.csv").write_bytes(b"x\n")
    seen: list[str] = []
    assert fetch(dest, from_dir=src, log=seen.append) == []
    assert seen[0].startswith("ok") and seen[1].startswith("fetched")


def test_fetch_without_the_file_says_where_to_get_it(tmp_path: Path):
    dest = _manifest(tmp_path, {"philly/p.csv": b"1\n"})
    problems = fetch(dest, from_dir=tmp_path / "empty", log=lambda _m: None)
    assert len(problems) == 1
    assert "https://example.invalid/philly/p.csv" in problems[0]
    assert "TRACES_FROM" in problems[0]


def test_main_exit_code(tmp_path: Path, capsys):
    dest = _manifest(tmp_path, {"p.csv": b"1\n"})
    assert trace_fetch.main(["--dest", str(dest), "--from", str(tmp_path / "no")]) == 1
    assert "error: p.csv" in capsys.readouterr().err
    (tmp_path / "no").mkdir()
    (tmp_path / "no" / "p.csv").write_bytes(b"1\n")
    assert trace_fetch.main(["--dest", str(dest), "--from", str(tmp_path / "no")]) == 0


def test_a_missing_evaluation_trace_says_make_traces(monkeypatch):
    monkeypatch.delenv("GPUQ_TRACE_DIR", raising=False)
    scen = REPO / "eval" / "philly-day.yaml"
    target = TRACES_DIR / "philly" / "philly_sia_processed.csv"
    if target.is_file():
        pytest.skip(f"{target} is present (make traces ran): the missing case cannot be shown")
    with pytest.raises(ScenarioInputError) as e:
        load_scenario(scen)
    assert "make traces" in str(e.value)


def test_every_yaml_under_eval_is_a_scenario_or_says_what_it_is():
    """`gpuq simulate eval/<any>.yaml` from a clone: every file is a valid scenario (its
    trace aside), except the windows' generation rule, which says what it is and which
    files to simulate instead (it answered "unknown key 'tuning_every'")."""
    from app.domain.config import load_config

    for f in sorted((REPO / "eval").rglob("*.yaml")):
        if f.name == "windows.yaml":
            with pytest.raises(ScenarioInputError, match="rule that generates the evaluation"
                               "'s windows, not a scenario: simulate one of") as e:
                load_scenario(f)
            assert "eval/windows/evaluation/*.yaml" in str(e.value)
            continue
        load_config(f)  # a ValidationError names the file's problem
