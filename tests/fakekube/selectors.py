"""Label selectors, field selectors and list pagination as kube-apiserver serves them.

What is modelled, and from where (kubernetes/kubernetes):

* Label selectors: the full string syntax of
  ``staging/src/k8s.io/apimachinery/pkg/labels/selector.go`` (``Parse``): comma-joined
  requirements ``k=v``, ``k==v``, ``k!=v`` (true when the key is absent), ``k in (a,b)``,
  ``k notin (a,b)`` (true when absent), ``k`` (exists), ``!k`` (does not exist),
  ``k>n`` / ``k<n`` (integers); a malformed selector is a 400.
* Field selectors: ``staging/src/k8s.io/apimachinery/pkg/fields/selector.go``
  (``ParseSelector``: ``=``, ``==``, ``!=``, comma-joined, empty values allowed), over the
  fields each resource makes selectable: Pods per ``pkg/registry/core/pod/strategy.go``
  (``ToSelectableFields``), Nodes per ``pkg/registry/core/node/strategy.go``
  (``NodeToSelectableFields``), every object's ``metadata.name`` / ``metadata.namespace``
  (``staging/src/k8s.io/apiserver/pkg/registry/generic/matcher.go``). Any other field is
  a 400 ``field label not supported``, as the real server answers.
* Watch filtering: ``staging/src/k8s.io/apiserver/pkg/storage/cacher/cache_watcher.go``
  (``convertToWatchEvent``): an update that makes an object start matching is sent as
  ADDED, one that makes it stop matching as DELETED, neither as nothing.
* Pagination: ``staging/src/k8s.io/apiserver/pkg/storage/etcd3/store.go`` (``GetList``
  with ``limit``) and ``staging/src/k8s.io/apiserver/pkg/storage/continue.go``: items in
  key order, ``metadata.continue`` while more remain, every page served from the
  snapshot of the first one (same ``resourceVersion``); a token whose version has been
  compacted is a 410 ``Expired``.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Mapping

# key: an optional DNS-subdomain prefix and a name (validation is the client's problem;
# here a key is whatever the grammar's tokens allow)
_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET_TERM = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s*\(([^)]*)\)\s*$")
_CMP_TERM = re.compile(rf"^\s*({_KEY})\s*(==|=|!=|>|<)\s*({_VALUE})\s*$")
_EXISTS_TERM = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")


class SelectorError(ValueError):
    """A selector the real server refuses with 400 BadRequest."""


def _split_terms(selector: str) -> list[str]:
    """Commas separate requirements except inside ``in (...)`` value sets."""
    terms, depth, cur = [], 0, []
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    terms.append("".join(cur))
    return [t for t in terms if t.strip()]


LabelPredicate = Callable[[Mapping[str, str]], bool]


def parse_labels(selector: str | None) -> LabelPredicate:
    """A predicate over an object's labels (raises :class:`SelectorError`)."""
    if not selector or not selector.strip():
        return lambda _labels: True
    preds: list[LabelPredicate] = []
    for term in _split_terms(selector):
        if m := _SET_TERM.match(term):
            key, op = m.group(1), m.group(3)
            values = {v.strip() for v in m.group(4).split(",") if v.strip()}
            if not values:
                raise SelectorError(f"unable to parse requirement: {term!r}: empty value set")
            if op == "in":
                preds.append(lambda ls, k=key, vs=values: ls.get(k) in vs)
            else:
                preds.append(lambda ls, k=key, vs=values: ls.get(k) not in vs)
        elif m := _CMP_TERM.match(term):
            key, op, value = m.group(1), m.group(3), m.group(4)
            if op in ("=", "=="):
                preds.append(lambda ls, k=key, v=value: ls.get(k) == v)
            elif op == "!=":
                preds.append(lambda ls, k=key, v=value: ls.get(k) != v)
            else:
                if not value.lstrip("-").isdigit():
                    raise SelectorError(f"for '{op}' operator, the value must be an integer")
                n = int(value)
                preds.append(lambda ls, k=key, n=n, gt=(op == ">"): _int_cmp(ls.get(k), n, gt))
        elif m := _EXISTS_TERM.match(term):
            neg, key = m.group(1) == "!", m.group(2)
            preds.append((lambda ls, k=key: k not in ls) if neg else (lambda ls, k=key: k in ls))
        else:
            raise SelectorError(f"unable to parse requirement: {term!r}")
    return lambda labels: all(p(labels) for p in preds)


def _int_cmp(have: str | None, n: int, gt: bool) -> bool:
    try:
        v = int(have) if have is not None else None
    except ValueError:
        return False
    return v is not None and (v > n if gt else v < n)


def _pod_fields(pod: Mapping) -> dict[str, str]:
    meta, spec, st = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    ips = st.get("podIPs") or []
    return {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "spec.nodeName": spec.get("nodeName", "") or "",
        "spec.restartPolicy": spec.get("restartPolicy", "") or "",
        "spec.schedulerName": spec.get("schedulerName", "") or "",
        "spec.serviceAccountName": spec.get("serviceAccountName", "") or "",
        "spec.hostNetwork": "true" if spec.get("hostNetwork") else "false",
        "status.phase": st.get("phase", "") or "",
        "status.podIP": (ips[0].get("ip", "") if ips else st.get("podIP", "")) or "",
        "status.nominatedNodeName": st.get("nominatedNodeName", "") or "",
    }


def _node_fields(node: Mapping) -> dict[str, str]:
    meta, spec = node.get("metadata") or {}, node.get("spec") or {}
    return {"metadata.name": meta.get("name", ""),
            "spec.unschedulable": "true" if spec.get("unschedulable") else "false"}


def _meta_fields(obj: Mapping) -> dict[str, str]:
    meta = obj.get("metadata") or {}
    out = {"metadata.name": meta.get("name", "")}
    if "namespace" in meta:
        out["metadata.namespace"] = meta["namespace"]
    return out


SELECTABLE: dict[str, Callable[[Mapping], dict[str, str]]] = {
    "pods": _pod_fields, "nodes": _node_fields}

FieldPredicate = Callable[[Mapping], bool]


def parse_fields(selector: str | None, kind: str) -> FieldPredicate:
    """A predicate over a whole object (raises :class:`SelectorError`)."""
    if not selector or not selector.strip():
        return lambda _obj: True
    fields_of = SELECTABLE.get(kind, _meta_fields)
    known = set(fields_of({"metadata": {"name": "", "namespace": ""}}))
    terms: list[tuple[str, bool, str]] = []
    for term in selector.split(","):
        m = re.match(r"^\s*([^=!\s]+)\s*(==|=|!=)\s*(.*?)\s*$", term)
        if not m:
            raise SelectorError(f"invalid selector: '{selector}'; can't understand '{term}'")
        field, op, value = m.groups()
        if field not in known:
            raise SelectorError(f'field label not supported: {field}')
        terms.append((field, op == "!=", value))

    def pred(obj: Mapping) -> bool:
        have = fields_of(obj)
        return all((have.get(f, "") != v) if neg else (have.get(f, "") == v)
                   for f, neg, v in terms)
    return pred


class Matcher:
    """Label and field selector of one request, over whole objects."""

    def __init__(self, kind: str, label_selector: str | None,
                 field_selector: str | None) -> None:
        self._labels = parse_labels(label_selector)
        self._fields = parse_fields(field_selector, kind)

    def __call__(self, obj: Mapping | None) -> bool:
        if obj is None:
            return False
        return self._labels((obj.get("metadata") or {}).get("labels") or {}) and self._fields(obj)


def watch_event(type_: str, obj: dict, prev: dict | None, match: Matcher) -> str | None:
    """The event a filtered watch sends for a change, or None (cache_watcher.go)."""
    if type_ == "DELETED":
        return "DELETED" if match(prev if prev is not None else obj) else None
    now, before = match(obj), prev is not None and match(prev)
    if now and before:
        return "MODIFIED"
    if now:
        return "ADDED"
    if before:
        return "DELETED"
    return None


def encode_continue(rv: int, start: str) -> str:
    """The token continue.go builds: the list's version and the next key to read."""
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start})
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, str]:
    try:
        pad = "=" * (-len(token) % 4)
        data = json.loads(base64.urlsafe_b64decode(token + pad))
        if data.get("v") != "meta.k8s.io/v1":
            raise ValueError(data.get("v"))
        return int(data["rv"]), str(data["start"])
    except (ValueError, KeyError, TypeError) as e:
        raise SelectorError(f"continue key is not valid: {e}") from e
