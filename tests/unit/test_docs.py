"""The documentation cannot drift from the code, and README stays a front door.

- docs/configuration.md and docs/api.md are generated (app/docgen.py); these tests
  regenerate them and compare. The fix is always the one command in the message.
- README.md stays under 12 KB (details belong in docs/).
- Every relative link in README.md and docs/ points to a file that exists, and a link
  with an #anchor to a Markdown file names one of its headings.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import pytest

from app import docgen
from app.cluster.k8s_settings import KubeSettings
from app.domain.config import GpuqConfig
from app.scheduling.model import SchedulerConfig
from app.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
README_LIMIT = 12 * 1024
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _stale_message(path: Path, expected: str) -> str:
    current = path.read_text() if path.exists() else ""
    diff = list(
        difflib.unified_diff(
            current.splitlines(), expected.splitlines(), "committed", "generated", lineterm="", n=0
        )
    )
    shown = "\n".join(diff[:40])
    return (
        f"{path.relative_to(ROOT)} is out of date with the code. Regenerate it with:\n\n"
        f"    make docs        (or: .venv/bin/python -m app.docgen)\n\n"
        f"and commit the result. First differences:\n{shown}"
    )


@pytest.mark.parametrize(
    "path", [docgen.CONFIG_DOC, docgen.API_DOC], ids=["configuration.md", "api.md"]
)
def test_generated_reference_is_current(path: Path) -> None:
    expected = docgen.DOCS[path]()
    current = path.read_text() if path.exists() else ""
    assert current == expected, _stale_message(path, expected)


def test_configuration_reference_names_every_setting_and_field() -> None:
    """The generator itself must not skip anything: every environment variable and every
    config-file field of the code appears in the document."""
    text = docgen.config_markdown()
    for name, field in Settings.model_fields.items():
        assert f"`{field.alias or name}`" in text
    for name in KubeSettings.model_fields:
        assert f"`GPUQ_K8S_{name.upper()}`" in text
    for name in GpuqConfig.model_fields:
        assert f"| `{name}` |" in text
    for name in SchedulerConfig.__dataclass_fields__:
        assert f"| `{name}` |" in text


def test_api_reference_lists_every_route() -> None:
    doc = docgen.openapi_document()
    text = docgen.api_markdown(doc)
    for path, item in doc["paths"].items():
        for method in item:
            assert f"### {method.upper()} {path}" in text


def test_readme_stays_under_12_kb() -> None:
    size = len((ROOT / "README.md").read_bytes())
    assert size < README_LIMIT, (
        f"README.md is {size} bytes, the limit is {README_LIMIT}: move details to docs/<topic>.md "
        "and leave a short paragraph with a link in README"
    )


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens,
    repeated headings numbered."""
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", markdown).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


INLINE_CODE = re.compile(r"`[^`\n]+`")


def _broken_links(md: Path, root: Path = ROOT) -> list[str]:
    text = INLINE_CODE.sub("", FENCE.sub("", md.read_text()))  # code is not a link
    broken = []
    for m in LINK.finditer(text):
        target = m.group(1) or m.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("//"):
            continue  # http:, https:, mailto: ...
        file_part, _, anchor = target.partition("#")
        dest = md if not file_part else (md.parent / file_part).resolve()
        if not dest.exists():
            broken.append(f"{target} (no file {dest.relative_to(root)})")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest.read_text()):
            broken.append(f"{target} (no heading #{anchor} in {dest.relative_to(root)})")
    return broken


def test_relative_links_point_to_existing_files() -> None:
    files = _markdown_files()
    assert len(files) > 1
    broken = {str(md.relative_to(ROOT)): b for md in files if (b := _broken_links(md))}
    assert not broken, f"broken relative links: {broken}"


def test_link_checker_sees_a_broken_link(tmp_path: Path) -> None:
    """The checker is not vacuous: a missing file and a missing heading are reported."""
    (tmp_path / "other.md").write_text("# Present\n")
    md = tmp_path / "doc.md"
    md.write_text(
        "[ok](other.md#present) [gone](missing.md) [bad](other.md#absent) [web](https://x.org)\n"
        "```\n[in code](ignored.md)\n```\n`^[a-z]([-a-z]*)$` in inline code\n"
    )
    assert [b.split(" ")[0] for b in _broken_links(md, tmp_path)] == [
        "missing.md",
        "other.md#absent",
    ]


# gpuq/ is the package's old name (app/ since the rename): a path under it is a leftover
CODE_PATH = re.compile(
    r"`((?:app|gpuq|bench|tests|k8s|eval|docs|migrations|release|tools)/[^`\s]*)`"
)


def _missing_code_paths(md: Path, root: Path = ROOT) -> list[str]:
    """Repository paths quoted in backticks (`app/store/jobs.py`, `tests/unit/x.py::test`)
    that do not exist: a moved or deleted module leaves the docs pointing nowhere."""
    missing = []
    for m in CODE_PATH.finditer(md.read_text()):
        path = m.group(1).split("::")[0].rstrip("/")
        if any(c in path for c in "<*{"):
            continue  # a pattern such as k8s/<overlay> or eval/philly-day*.yaml
        if not (root / path).exists():
            missing.append(m.group(1))
    return missing


def test_quoted_repository_paths_exist() -> None:
    missing = {
        str(md.relative_to(ROOT)): p for md in _markdown_files() if (p := _missing_code_paths(md))
    }
    assert not missing, (
        f"docs quote paths that do not exist (moved or deleted? fix the doc): {missing}"
    )


def test_path_checker_sees_a_missing_path(tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "x.py").write_text("")
    md = tmp_path / "doc.md"
    md.write_text("`app/x.py::test_a` `app/gone.py` `eval/*.yaml` `app/` `gpuq/x.py`\n")
    assert _missing_code_paths(md, tmp_path) == ["app/gone.py", "gpuq/x.py"]


class _Commented:
    # above, first line
    # above, second line
    a: int = 1
    b: int = 2  # on the line

    # a heading comment, cut off by the blank line

    c: int = 3
    d: int = 4


def test_field_comments_read_the_line_or_the_block_above() -> None:
    assert docgen.field_comments(_Commented) == {
        "a": "above, first line above, second line",
        "b": "on the line",
    }


def _bad_tables(text: str) -> list[str]:
    """Tables whose separator row has another number of columns than their header (such a
    table does not render as a table)."""
    lines = FENCE.sub("", text).splitlines()
    bad = []
    for header, sep in zip(lines, lines[1:], strict=False):
        if header.startswith("|") and re.fullmatch(r"\|[-:| ]+\|", sep.strip()):
            columns = len(re.split(r"(?<!\\)\|", header.strip())) - 2
            if columns != len(sep.strip().split("|")) - 2:
                bad.append(header[:60])
    return bad


def test_tables_have_a_separator_per_column() -> None:
    bad = {
        str(md.relative_to(ROOT)): b
        for md in _markdown_files()
        if (b := _bad_tables(md.read_text()))
    }
    assert not bad, f"tables whose separator row does not match the header: {bad}"
    assert _bad_tables("| a | b |\n|---|\n") == ["| a | b |"]


# Commands the docs tell a user to run. The package was renamed (gpuq/ -> app/) and flags come
# and go: a `python -m` module that is not in the repository, or a `gpuq` flag the command no
# longer has, fails here rather than on the reader's machine.
PY_MODULE = re.compile(r"(?:\bpython3?|\$\(PY\)) -m ([A-Za-z_][\w.]*)")
OWN_PACKAGES = ("app", "gpuq", "bench", "tools", "tests")  # gpuq: the old name of app
FENCED = re.compile(r"^[ \t]*```.*?^[ \t]*```", re.S | re.M)


def _command_files() -> list[Path]:
    return [*_markdown_files(), ROOT / "Makefile", ROOT / "Dockerfile"]


def _missing_modules(path: Path, root: Path = ROOT) -> list[str]:
    """`python -m X` (and the Makefile's `$(PY) -m X`) where X is one of the repository's
    modules that does not exist as a file or package with a __main__."""
    missing = []
    for name in PY_MODULE.findall(path.read_text()):
        if name.split(".")[0] not in OWN_PACKAGES:
            continue
        base = root.joinpath(*name.split("."))
        if not (base.with_suffix(".py").is_file() or (base / "__main__.py").is_file()):
            missing.append(name)
    return missing


def test_python_m_modules_exist() -> None:
    missing = {
        str(p.relative_to(ROOT)): m for p in _command_files() if (m := _missing_modules(p))
    }
    assert not missing, f"docs run modules that do not exist (renamed? moved?): {missing}"


def _code_lines(text: str) -> list[str]:
    """Each line of a fenced block (continuations joined, comments cut) and each inline
    code span."""
    lines = []
    for block in FENCED.findall(text):
        body = re.sub(r"\\\n\s*", " ", block)
        lines += [re.sub(r"\s#.*", "", line) for line in body.splitlines()[1:-1]]
    lines += INLINE_CODE.findall(FENCED.sub("", text))
    return [line.strip("`").strip() for line in lines]


def _cli_tree() -> object:
    import typer

    from app.cli import app

    return typer.main.get_command(app)


def _bad_gpuq_commands(md: Path) -> list[str]:
    """`gpuq SUB ... --flag` lines whose subcommand or flag the CLI does not have."""
    root = _cli_tree()
    bad = []
    for line in _code_lines(md.read_text()):
        words = re.sub(r"^(?:\w+=\S*\s+)*(?:\S*/)?(?=gpuq\s)", "", line).split()
        if words[:1] != ["gpuq"] or len(words) < 2 or not re.fullmatch(r"[a-z][a-z-]*", words[1]):
            continue
        cmd, i = root, 1
        while hasattr(cmd, "commands") and i < len(words) and words[i] in cmd.commands:
            cmd, i = cmd.commands[words[i]], i + 1
        if i == 1:
            bad.append(f"{line} (no command {words[1]!r})")
            continue
        opts = {o for p in cmd.params for o in [*p.opts, *getattr(p, "secondary_opts", [])]}
        for w in words[i:]:
            flag = w.strip("[]()").split("=")[0]
            if re.fullmatch(r"--?[a-z][a-z-]*", flag) and flag not in opts | {"--help"}:
                bad.append(f"{line} (no option {flag})")
    return bad


def test_gpuq_commands_in_docs_exist() -> None:
    bad = {
        str(md.relative_to(ROOT)): b for md in _markdown_files() if (b := _bad_gpuq_commands(md))
    }
    assert not bad, f"docs quote gpuq subcommands or options the CLI does not have: {bad}"


def _make_targets(makefile: Path) -> set[str]:
    """The Makefile's rule names, its variables expanded (`$(RUN_STAMP)`: .venv/.installed-run)."""
    text = makefile.read_text()
    var = dict(re.findall(r"^(\w+)\s*[:?]?=\s*(.*?)\s*$", text, re.M))

    def expand(s: str) -> str:
        return re.sub(r"\$\((\w+)\)", lambda m: expand(var.get(m.group(1), "")), s)

    return {expand(t) for t in re.findall(r"^([^\s:#=][^:=]*):(?!=)", text, re.M)}


def _unknown_make_targets(md: Path, targets: set[str]) -> list[str]:
    bad = []
    for line in _code_lines(md.read_text()):
        for m in re.finditer(r"(?:^|[;&|]\s*)make((?:\s+[^\s;&|#]+)*)", line):
            names = [w for w in m.group(1).split() if "=" not in w and not w.startswith("-")]
            bad += [f"make {n}" for n in names if n not in targets]
    return bad


def test_make_targets_in_docs_exist() -> None:
    targets = _make_targets(ROOT / "Makefile")
    assert {"run", "test", "traces", ".venv/.installed-run"} <= targets
    bad = {
        str(md.relative_to(ROOT)): b
        for md in _markdown_files()
        if (b := _unknown_make_targets(md, targets))
    }
    assert not bad, f"docs run make targets the Makefile does not have: {bad}"


ENV_NAME = re.compile(r"\bGPUQ_[A-Z0-9_]*[A-Z0-9]\b")
ENV_SOURCES = ("app", "tests", "bench", "tools", "k8s", "release")


def _known_env_names() -> set[str]:
    """Every GPUQ_* name the code, tests, benchmarks and manifests read or set, and the
    Kubernetes settings (GPUQ_K8S_ + field, read through env_prefix)."""
    known = {f"GPUQ_K8S_{name.upper()}" for name in KubeSettings.model_fields}
    files = [ROOT / "Makefile", ROOT / "docker-compose.yml", ROOT / ".ci" / "run"]
    files += [p for d in ENV_SOURCES for p in (ROOT / d).rglob("*") if p.is_file()]
    for path in files:
        if path.suffix in {".py", ".yaml", ".yml", ".sh", ".mod", ""} and path.exists():
            known |= set(ENV_NAME.findall(path.read_text(errors="replace")))
    return known


def _unknown_env_names(md: Path, known: set[str]) -> list[str]:
    return sorted(set(ENV_NAME.findall(md.read_text())) - known)


def test_environment_variables_in_docs_exist() -> None:
    """A setting renamed or removed leaves the prose pointing at a variable nobody reads."""
    known = _known_env_names()
    assert {"GPUQ_PORT", "GPUQ_K8S_NAMESPACE", "GPUQ_TRACE_DIR"} <= known
    bad = {
        str(md.relative_to(ROOT)): b
        for md in _markdown_files()
        if (b := _unknown_env_names(md, known))
    }
    assert not bad, f"docs name GPUQ_* variables nothing reads or sets: {bad}"


def test_command_checkers_see_drift(tmp_path: Path) -> None:
    md = tmp_path / "doc.md"
    md.write_text(
        "```bash\npython -m gpuq.simulate.suite x   # the old package\n"
        ".venv/bin/gpuq simulate s.yaml \\\n    --polcy gpuq   # a typo\n"
        "GPUQ_URL=u gpuq submitt -f job.yaml\n```\n"
        "`python -m app.simulate.suite` `python -m json.tool` `gpuq jobs [--team T] -o json`\n"
        "`kubectl -n gpuq get pods` `gpuq nodes drain NODE --force`\n"
    )
    assert _missing_modules(md) == ["gpuq.simulate.suite"]
    (tmp_path / "Makefile").write_text("S := .stamp\n$(S): x\nrun: $(S)\n\tgo\n")
    md2 = tmp_path / "make.md"
    md2.write_text(
        "`make run` `make .stamp` `make traces TRACES_FROM=D`\n```\nmake -j2 run tset\n```\n"
    )
    assert _make_targets(tmp_path / "Makefile") == {".stamp", "run"}
    assert _unknown_make_targets(md2, {".stamp", "run"}) == ["make tset", "make traces"]
    md3 = tmp_path / "env.md"
    md3.write_text("`GPUQ_PORT` and GPUQ_PORTS, GPUQ_K8S_NAMESPACE; GPUQ_\n")
    assert _unknown_env_names(md3, {"GPUQ_PORT", "GPUQ_K8S_NAMESPACE"}) == ["GPUQ_PORTS"]
    assert [b.split(" (")[1] for b in _bad_gpuq_commands(md)] == [
        "no option --polcy)",
        "no command 'submitt')",
        "no option --force)",
    ]


def test_docgen_help_writes_nothing(capsys) -> None:
    """`python -m app.docgen --help` regenerated both documents instead of helping."""
    import pytest

    before = {p: p.stat().st_mtime_ns for p in docgen.DOCS}
    with pytest.raises(SystemExit) as e:
        docgen.main(["--help"])
    assert e.value.code == 0 and "--check" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in docgen.DOCS} == before
    with pytest.raises(SystemExit):
        docgen.main(["--chek"])  # a typo is an error, not a rewrite
