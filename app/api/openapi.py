"""A truthful OpenAPI document, and ``Allow`` that lists every method of a path.

FastAPI documents each route's success answer and a 422 whose body it
describes as ``{"detail": [...]}``. gpuq answers differently, and more:

* every error body has ONE shape, :class:`ErrorOut` (``detail`` is a string
  saying what is wrong; 422s add the pydantic ``errors``);
* 401/403 on every route that takes a token, 404 on every route with a path
  parameter, 409 on every write (a name taken, an object still referenced, a
  job in the wrong state), 400 (not JSON) and 413 on every body (``GPUQ_MAX_BODY_BYTES``), 422
  wherever input is read, 429 with ``Retry-After`` on submits (a team's limits), 503
  with ``Retry-After`` wherever the database is read (down, pool exhausted,
  statement timeout: app/api/db_errors.py).

The statuses are derived from each operation itself (token, path
parameters, method, body), so a new route is documented by the same rules.
:class:`AllowMethods` answers ``OPTIONS`` with every method the path has, and
corrects the ``Allow`` header of a 405 the same way (Starlette lists only the
first matching route's methods).
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, Field

from app.domain.spec import SCENARIO_ONLY

ERROR_REF = "#/components/schemas/ErrorOut"
NO_DATABASE = {"/healthz"}  # answers without reading the database
PROBES = {"/healthz", "/readyz"}  # a kubelet's probes: any query parameters are ignored
# submits, limited per team (pending cap, submit rate): 429 with Retry-After
TEAM_LIMITED = {("/v1/jobs", "post"), ("/v1/jobs:batch", "post")}


class ValidationItem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ErrorOut(BaseModel):
    """Every error answer: ``detail`` says what is wrong (starting with the
    field at fault, when there is one)."""

    detail: str = Field(description="what is wrong, e.g. 'resources.gpus: must be >= 0'")
    errors: list[ValidationItem] | None = Field(
        default=None, description="422 only: each input error pydantic found"
    )


DESCRIPTIONS = {
    "400": "The body is not JSON",
    "401": "No token, or an unknown or revoked one",
    "403": "The token may not do this (admin only, or another team's object)",
    "404": "No such object (or not visible to this token)",
    "409": "Conflicts with the current state: a name already used, an object still "
    "referenced (the detail names the referrer), a job that can no longer change",
    "413": "The body is larger than GPUQ_MAX_BODY_BYTES",
    "422": "Invalid input: the detail names the field",
    "429": "The team is over its cap on pending jobs or its submit rate (docs/security.md, "
    "Limits); retry after Retry-After seconds",
    "503": "The database is unavailable or busy; retry after Retry-After seconds",
}
RETRY_AFTER = {
    "Retry-After": {"description": "seconds to wait before retrying", "schema": {"type": "integer"}}
}


def error_statuses(path: str, method: str, op: dict[str, Any]) -> list[str]:
    """The error statuses an operation can answer, from what it is made of: a
    token, path parameters, a write method, a body, any input, the database."""
    params = op.get("parameters") or []
    where = {p.get("in") for p in params}
    takes_token = op.get("security") or any(
        p.get("in") == "header" and p.get("name", "").lower() == "authorization" for p in params
    )
    out: list[str] = []
    if takes_token:
        out += ["401", "403"]
    if "path" in where:
        out.append("404")
    if method in ("post", "put", "patch", "delete"):
        out.append("409")
    if "requestBody" in op:
        out += ["400", "413"]
    # every route but the health probes refuses a query parameter it does not declare
    # (app/api/query_params.py), so it may answer 422
    if params or "requestBody" in op or path not in PROBES:
        out.append("422")
    if (path, method) in TEAM_LIMITED:
        out.append("429")
    if path not in NO_DATABASE:
        out.append("503")
    return out


def map_keys(node: Any) -> None:
    """pydantic writes a map whose keys have a pattern as ``patternProperties``, which
    leaves other keys allowed; the server refuses them, so say it with
    ``propertyNames`` (the key's pattern) and ``additionalProperties`` (the value)."""
    if isinstance(node, dict):
        pattern_props = node.get("patternProperties")
        if isinstance(pattern_props, dict) and len(pattern_props) == 1:
            (pattern, value), = pattern_props.items()
            del node["patternProperties"]
            node["propertyNames"] = {**node.get("propertyNames", {}), "pattern": pattern}
            node["additionalProperties"] = value
        for v in node.values():
            map_keys(v)
    elif isinstance(node, list):
        for v in node:
            map_keys(v)


# fields of the shared models the service refuses (422): the scenario-only fields of
# a job spec (``gpuq simulate`` reads them from files) and a node's ``count`` (config
# files only: nodes are created one by one)
NOT_IN_REQUESTS = {"JobSpec": SCENARIO_ONLY, "NodeConfig": ("count",), "NodePatch": ("count",)}


def live_fields_only(components: dict[str, Any]) -> None:
    """Leave out of the request schemas the fields the service refuses."""
    for model, fields in NOT_IN_REQUESTS.items():
        for name in fields:
            components.get(model, {}).get("properties", {}).pop(name, None)


def truthful(schema: dict[str, Any]) -> dict[str, Any]:
    """Document every error status of every operation with the one error body, and
    make the request schemas say what the server refuses."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    live_fields_only(components)
    map_keys(schema)
    error_schema = ErrorOut.model_json_schema(ref_template="#/components/schemas/{model}")
    components.update(error_schema.pop("$defs", {}))
    components["ErrorOut"] = error_schema
    for path, ops in schema.get("paths", {}).items():
        for method, op in ops.items():
            if not isinstance(op, dict) or "responses" not in op:
                continue
            for status in error_statuses(path, method, op):
                answer: dict[str, Any] = {
                    "description": DESCRIPTIONS[status],
                    "content": {"application/json": {"schema": {"$ref": ERROR_REF}}},
                }
                if status in ("429", "503"):
                    answer["headers"] = RETRY_AFTER
                op["responses"][status] = answer
    for unused in ("HTTPValidationError", "ValidationError"):
        components.pop(unused, None)
    return schema


def install_truthful_openapi(app: FastAPI) -> None:
    """Replace ``app.openapi`` by FastAPI's generator followed by :func:`truthful`."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if not app.openapi_schema:
            app.openapi_schema = truthful(generate())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _template_rx(template: str) -> re.Pattern[str]:
    """``/v1/pools/{name}`` -> a regex matching its concrete paths."""
    parts = re.split(r"\{[^/]+?\}", template)
    return re.compile("^" + "[^/]+".join(re.escape(p) for p in parts) + "$")


class AllowMethods:
    """``OPTIONS`` on any documented path answers 204 with ``Allow`` listing every
    method of the path; a 405's ``Allow`` lists them all too (Starlette named
    only the first matching route's methods)."""

    def __init__(self, app, router_app: FastAPI) -> None:
        self.app = app
        self.router_app = router_app
        self._paths: list[tuple[re.Pattern[str], set[str]]] | None = None

    def methods_for(self, path: str) -> set[str]:
        if self._paths is None:
            self._paths = []
            for template, ops in self.router_app.openapi().get("paths", {}).items():
                rx = _template_rx(template)
                self._paths.append((rx, {m.upper() for m in ops if m != "parameters"}))
        methods: set[str] = set()
        for rx, ms in self._paths:
            if rx.match(path):
                methods |= ms
        if "GET" in methods:
            methods.add("HEAD")
        return methods | {"OPTIONS"} if methods else methods

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] == "OPTIONS":
            allowed = self.methods_for(scope["path"])
            if allowed:
                await send({
                    "type": "http.response.start",
                    "status": 204,
                    "headers": [(b"allow", ", ".join(sorted(allowed)).encode())],
                })
                await send({"type": "http.response.body", "body": b""})
                return

        async def send_with_allow(message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 405:
                allowed = self.methods_for(scope["path"])
                if allowed:
                    headers = [(k, v) for k, v in message.get("headers", []) if k != b"allow"]
                    headers.append((b"allow", ", ".join(sorted(allowed)).encode()))
                    message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_allow)
