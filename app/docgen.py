"""Reference documents generated from the code: ``docs/configuration.md`` and ``docs/api.md``.

Why generated: a hand-kept list of settings or routes drifts from the code the day someone
adds one. Run ``make docs`` (``python -m app.docgen``) after changing a config field, a
setting or a route; ``tests/unit/test_docs.py`` regenerates both files and fails, naming that
command, when the committed ones differ.

Sources: the pydantic models of the config file (``app/domain/config.py``, with the job spec
of ``app/domain/spec.py``), the core's ``scheduler:`` knobs (``SchedulerConfig``) and alert
thresholds, the environment settings (``app/settings.py`` and the ``GPUQ_K8S_*`` settings),
and the app's OpenAPI document. A field's text is its pydantic ``description`` or, where it
has none, the ``#`` comment on or directly above its line in the class body.
"""

from __future__ import annotations

import argparse
import inspect
import io
import json
import sys
import tokenize
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, TypeAdapter
from pydantic_core import to_jsonable_python
from pydantic_settings import BaseSettings

from app.cluster.k8s_settings import KubeSettings
from app.domain.config import AlertThresholds, GpuqConfig
from app.main import create_app
from app.scheduling.model import SchedulerConfig
from app.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
CONFIG_DOC = ROOT / "docs" / "configuration.md"
API_DOC = ROOT / "docs" / "api.md"
REGENERATE = "make docs"


# -- descriptions from comments ----------------------------------------------------------------


def field_comments(cls: type) -> dict[str, str]:
    """``# comment`` text per field of a class body: the comment on the field's line, or the
    comment lines directly above it (a blank line or code in between breaks the block)."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    comments: dict[int, str] = {}
    code_lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
        elif tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            code_lines.add(tok.start[0])
    lines = source.splitlines()
    out: dict[str, str] = {}
    for no, line in enumerate(lines, start=1):
        stripped = line.strip()
        if line[:1].isspace() and ":" in stripped and not stripped.startswith(("#", "def ", "@")):
            name = stripped.split(":", 1)[0].strip()
            if not name.isidentifier() or line.index(stripped) != 4:
                continue
            if no in comments and no in code_lines:
                out[name] = comments[no]
                continue
            above: list[str] = []
            prev = no - 1
            while prev in comments and prev not in code_lines:
                above.insert(0, comments[prev])
                prev -= 1
            if above:
                out[name] = " ".join(above)
    return out


# -- JSON schema to Markdown --------------------------------------------------------------------


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


def schema_type(s: Mapping[str, Any]) -> str:
    """A short, readable type for one JSON schema node."""
    if "$ref" in s:
        name = s["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in s or "oneOf" in s:
        parts = [schema_type(x) for x in s.get("anyOf", s.get("oneOf", []))]
        return " or ".join(dict.fromkeys(parts))
    if "allOf" in s and len(s["allOf"]) == 1:
        return schema_type(s["allOf"][0])
    if "enum" in s:
        return "one of " + ", ".join(f"`{v}`" for v in s["enum"])
    if "const" in s:
        return f"`{s['const']}`"
    t = s.get("type")
    if t == "array":
        return f"list of {schema_type(s.get('items', {}))}"
    if t == "object":
        extra = s.get("additionalProperties")
        if isinstance(extra, dict) and extra:
            return f"map of {schema_type(extra)}"
        return "object"
    if isinstance(t, list):
        return " or ".join(t)
    return t or "any"


_CONSTRAINTS = (
    ("minimum", ">= {}"),
    ("exclusiveMinimum", "> {}"),
    ("maximum", "<= {}"),
    ("exclusiveMaximum", "< {}"),
    ("minLength", "length >= {}"),
    ("maxLength", "length <= {}"),
    ("minItems", "items >= {}"),
    ("maxItems", "items <= {}"),
    ("pattern", "matches `{}`"),
)


def constraints(s: Mapping[str, Any]) -> str:
    found = [fmt.format(s[k]) for k, fmt in _CONSTRAINTS if k in s]
    for sub in s.get("anyOf", []):
        found += [fmt.format(sub[k]) for k, fmt in _CONSTRAINTS if k in sub]
    return ", ".join(found)


def _default(value: Any) -> str:
    if value is None:
        return "null"
    return f"`{json.dumps(value, sort_keys=True)}`"


def properties_table(
    schema: Mapping[str, Any],
    comments: Mapping[str, str] | None = None,
    key_header: str = "field",
    model: type | None = None,
) -> list[str]:
    """One row per property: name, type, required or default, constraints, description.

    With ``model`` (a pydantic class), defaults built by a factory are shown too (the JSON
    schema leaves them out)."""
    required = set(schema.get("required", []))
    factory_defaults: dict[str, Any] = {}
    if model is not None and issubclass(model, BaseModel):
        for fname, f in model.model_fields.items():
            if f.default_factory is not None:
                factory_defaults[f.alias or fname] = to_jsonable_python(
                    f.get_default(call_default_factory=True)
                )
    rows = [
        f"| {key_header} | type | default | constraints | description |",
        "|---|---|---|---|---|",
    ]
    for name, prop in schema.get("properties", {}).items():
        if name in required:
            default = "required"
        elif "default" in prop:
            default = _default(prop["default"])
        elif name in factory_defaults:
            default = _default(factory_defaults[name])
        else:
            default = "-"
        text = prop.get("description") or (comments or {}).get(name, "")
        rows.append(
            f"| `{name}` | {_cell(schema_type(prop))} | {_cell(default)} "
            f"| {_cell(constraints(prop))} | {_cell(text)} |"
        )
    return rows


# -- configuration reference -------------------------------------------------------------------


def _model_classes() -> dict[str, type]:
    """Class of every model reachable from the config file, for comment fallbacks."""
    seen: dict[str, type] = {}

    def walk(cls: type) -> None:
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or cls.__name__ in seen:
            return
        seen[cls.__name__] = cls
        for f in cls.model_fields.values():
            for arg in _type_args(f.annotation):
                walk(arg)

    walk(GpuqConfig)
    return seen


def _type_args(tp: Any) -> list[Any]:
    args = [tp]
    for a in getattr(tp, "__args__", ()) or ():
        args += _type_args(a)
    return args


def _env_rows(cls: type[BaseSettings]) -> list[str]:
    prefix = cls.model_config.get("env_prefix", "") or ""
    comments = field_comments(cls)
    schema = cls.model_json_schema(by_alias=False)
    rows = []
    for name, field in cls.model_fields.items():
        env = field.alias or field.validation_alias or f"{prefix}{name}".upper()
        prop = schema["properties"][name]
        default = field.get_default(call_default_factory=True)
        if isinstance(default, Path):
            default = str(default)
        if isinstance(default, list):
            default = ",".join(default)
        if isinstance(default, bool):
            default = str(default).lower()
        shown = "unset" if default is None else f"`{default}`"
        text = field.description or comments.get(name, "")
        rows.append(
            f"| `{env}` | {_cell(schema_type(prop))} | {_cell(shown)} "
            f"| {_cell(constraints(prop))} | {_cell(text)} |"
        )
    return rows


def config_markdown() -> str:
    """The whole of docs/configuration.md."""
    schema = GpuqConfig.model_json_schema()
    defs = schema.get("$defs", {})
    classes = _model_classes()
    out = [
        "# Configuration reference",
        "",
        f"Generated from the code by `{REGENERATE}` (`python -m app.docgen`); do not edit by",
        "hand. `tests/unit/test_docs.py` fails when this file and the code differ.",
        "",
        "gpuq reads two things: a YAML **configuration file** (`gpuq serve --config FILE` or",
        "`GPUQ_CONFIG`; the same format is the head of a `gpuq simulate` scenario) and",
        "**environment variables**. Loading the file is idempotent: objects are upserted by",
        "name, so the same file can be applied at every start. Durations are seconds, memory",
        "is GB (decimal), compute is CU. An example is `app/config/demo.yaml`.",
        "",
        "## Configuration file",
        "",
        "### Top level",
        "",
        *properties_table(schema, field_comments(GpuqConfig), "key", GpuqConfig),
        "",
    ]
    for name in sorted(defs):
        out += [
            f"### {name}",
            "",
            *([_cell(defs[name]["description"]), ""] if defs[name].get("description") else []),
            *properties_table(
                defs[name], field_comments(classes.get(name, object)), model=classes.get(name)
            ),
            "",
        ]
    out += [
        "### scheduler",
        "",
        "Knobs of the scheduling core (`SchedulerConfig`) and `alerts` (below). A key that",
        "is not listed is refused when the file is loaded (also by `gpuq config apply",
        "--dry-run`), naming the nearest valid key; so is an unknown key in any section.",
        "Score weights (`w_*`) of 0 turn a term off.",
        "",
        *properties_table(
            TypeAdapter(SchedulerConfig).json_schema(), field_comments(SchedulerConfig), "key"
        ),
        "",
        "### scheduler.alerts",
        "",
        "Thresholds of the head-of-line and type-imbalance alerts (`AlertThresholds`).",
        "",
        *properties_table(
            TypeAdapter(AlertThresholds).json_schema(), field_comments(AlertThresholds), "key"
        ),
        "",
        "## Environment variables",
        "",
        "| variable | type | default | constraints | description |",
        "|---|---|---|---|---|",
        *_env_rows(Settings),
        *_env_rows(KubeSettings),
        "",
    ]
    return "\n".join(out)


# -- API reference -------------------------------------------------------------------------------


def openapi_document() -> dict[str, Any]:
    """The app's OpenAPI document, built without a database (routes only)."""
    return create_app(Settings()).openapi()


def _request_body(op: Mapping[str, Any]) -> str:
    body = op.get("requestBody")
    if not body:
        return ""
    content = body.get("content", {})
    kinds = [f"{schema_type(c.get('schema', {}))} ({ctype})" for ctype, c in content.items()]
    return ", ".join(kinds)


def api_markdown(doc: Mapping[str, Any] | None = None) -> str:
    """The whole of docs/api.md, from an OpenAPI document (the app's by default)."""
    doc = openapi_document() if doc is None else doc
    info = doc.get("info", {})
    out = [
        "# REST API reference",
        "",
        f"Generated from the OpenAPI document of {info.get('title', 'gpuq')} "
        f"{info.get('version', '')} by `{REGENERATE}` (`python -m app.docgen`); do not edit",
        "by hand. `tests/unit/test_docs.py` fails when this file and the app differ. A running",
        "server serves the same document at `/openapi.json` and an interactive UI at `/docs`.",
        "",
        "Auth: `Authorization: Bearer TOKEN` on every `/v1` route (the admin token, or a team",
        "token that acts for its team only). Errors are JSON with a `detail` saying what is",
        "wrong. A query parameter a route does not list below is refused (422, naming the",
        "nearest one it does), as an unknown body field is: a misspelt filter is never",
        "silently ignored. (`/metrics`, `/healthz` and `/readyz` take any: a Prometheus "
        "scrape may add its own, a probe is answered whatever its URL holds.)",
        "",
        "Every timestamp in an answer is ISO 8601 UTC to the second (`2026-12-01T05:52:58Z`;",
        "never epoch seconds) and every computed number is rounded (3 decimals from 1 up, 4",
        "significant digits below): one serializer, `app/domain/people.py`.",
        "",
        "## Routes",
        "",
        "| method | path | summary |",
        "|---|---|---|",
    ]
    ops: list[tuple[str, str, Mapping[str, Any]]] = []
    for path, item in doc.get("paths", {}).items():
        for method, op in item.items():
            if method in ("get", "put", "post", "patch", "delete", "head", "options"):
                ops.append((method.upper(), path, op))
    for method, path, op in ops:
        anchor = _anchor(f"{method} {path}")
        out.append(f"| {method} | [`{path}`](#{anchor}) | {_cell(op.get('summary', ''))} |")
    out.append("")
    for method, path, op in ops:
        out += [f"### {method} {path}", ""]
        if op.get("description"):
            out += [op["description"].strip(), ""]
        params = op.get("parameters", [])
        if params:
            out += ["| parameter | in | type | required | description |", "|---|---|---|---|---|"]
            for p in params:
                kind = _cell(schema_type(p.get("schema", {})))
                required = "yes" if p.get("required") else "no"
                text = _cell(p.get("description", ""))
                out.append(f"| `{p['name']}` | {p.get('in', '')} | {kind} | {required} | {text} |")
            out.append("")
        body = _request_body(op)
        if body:
            out += [f"Body: {body}", ""]
        responses = op.get("responses", {})
        if responses:
            out += ["| status | body | description |", "|---|---|---|"]
            for status, r in responses.items():
                schemas = [schema_type(c.get("schema", {})) for c in r.get("content", {}).values()]
                out.append(
                    f"| {status} | {_cell(', '.join(s for s in schemas if s != 'any'))} "
                    f"| {_cell(r.get('description', ''))} |"
                )
            out.append("")
    out += ["## Schemas", ""]
    for name, schema in doc.get("components", {}).get("schemas", {}).items():
        out += [f"### {name}", ""]
        if schema.get("description"):
            out += [_cell(schema["description"]), ""]
        if schema.get("properties"):
            out += [*properties_table(schema), ""]
        elif schema.get("enum"):
            out += [schema_type(schema), ""]
    return "\n".join(out)


def _anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    keep = [c for c in heading.lower() if c.isalnum() or c in " -_"]
    return "".join(keep).replace(" ", "-")


# -- command -------------------------------------------------------------------------------------

DOCS: dict[Path, Callable[[], str]] = {CONFIG_DOC: config_markdown, API_DOC: api_markdown}


def main(argv: list[str] | None = None) -> int:
    """Rewrite the generated documents (``--check``: only report the ones that differ)."""
    ap = argparse.ArgumentParser(
        prog="python -m app.docgen",
        description="Regenerate docs/configuration.md and docs/api.md from the code.")
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 naming the documents that are out of date")
    check = ap.parse_args(sys.argv[1:] if argv is None else argv).check
    stale = []
    for path, render in DOCS.items():
        text = render()
        if path.exists() and path.read_text() == text:
            continue
        stale.append(path)
        if not check:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    if check and stale:
        names = ", ".join(str(p.relative_to(ROOT)) for p in stale)
        print(f"out of date: {names}; run `{REGENERATE}`")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
