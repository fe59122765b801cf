"""What kube-apiserver checks in a body before anything else, for the fake API server.

Every body the fake receives (Pod, Service, Binding, Eviction, Event) is validated with
``kubernetes-validate`` (strict: unknown fields are errors, as the apiserver's
``fieldValidation=Strict``, against the targeted release's schemas), plus what a schema
cannot express and pkg/apis/core/validation/validation.go checks:

* object names: a Pod or Event name is a DNS-1123 subdomain (ValidatePodName via
  apimachinery pkg/api/validation/objectmeta.go), a Service name a DNS-1035 label
  (ValidateServiceName);
* a container's requests at most its limits (ValidateResourceRequirements: ``must be
  less than or equal to <resource> limit``), and a limit without a request is the
  request (the defaulting in pkg/apis/core/v1/defaults.go).

The answer is the apiserver's: 422 ``Invalid`` with the field path and message.
"""

from __future__ import annotations

import re

import kubernetes_validate

from app.domain.pod_resources import quantity

VERSION = kubernetes_validate.utils.latest_version()
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def _name_problem(kind: str, name: str) -> str | None:
    if kind == "Service":
        if len(name) > 63 or not DNS1035_LABEL.match(name):
            return (f"metadata.name: Invalid value: {name!r}: a DNS-1035 label must consist "
                    "of lower case alphanumeric characters or '-', start with an alphabetic "
                    "character, and end with an alphanumeric character")
    elif kind in ("Pod", "Event") and (len(name) > 253 or not DNS1123_SUBDOMAIN.match(name)):
        return (f"metadata.name: Invalid value: {name!r}: a lowercase RFC 1123 subdomain "
                "must consist of lower case alphanumeric characters, '-' or '.', and must "
                "start and end with an alphanumeric character")
    return None


def _requests_within_limits(pod: dict) -> str | None:
    spec = pod.get("spec") or {}
    for field in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(field) or []):
            res = c.get("resources") or {}
            limits, requests = res.get("limits") or {}, res.get("requests") or {}
            for name, req in requests.items():
                if name not in limits:
                    continue
                if quantity(req) > quantity(limits[name]):
                    return (f"spec.{field}[{i}].resources.requests: Invalid value: "
                            f"\"{req}\": must be less than or equal to {name} limit of "
                            f"{limits[name]}")
    return None


def invalid(obj: dict) -> str | None:
    """Why kube-apiserver would answer 422 to ``obj``, or None."""
    try:
        kubernetes_validate.validate(obj, VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        return f"{'.'.join(str(p) for p in e.path)}: {e.message}"
    name = (obj.get("metadata") or {}).get("name")
    if name and (problem := _name_problem(obj.get("kind", ""), name)):
        return problem
    if obj.get("kind") == "Pod":
        return _requests_within_limits(obj)
    return None
