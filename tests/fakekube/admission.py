"""Admission answers of kube-apiserver to a Pod create, for the fake API server.

Each plug-in is a function ``(namespace, pod) -> (code, Status) | None`` a test puts in
``FakeKube.admission``; the codes and messages are the upstream ones, so gpuq's
classification (app/cluster/k8s_refusals.py) meets what a real cluster says. The
real control plane produces the Pod Security and PriorityClass answers itself
(tests/integration/test_k8s_real_cluster.py); these cover the rest on demand.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.fakekube.server import status

Admission = Callable[[str, dict], "tuple[int, dict] | None"]


def _name(pod: dict) -> str:
    return (pod.get("metadata") or {}).get("name", "")


def forbidden(pod: dict, why: str) -> tuple[int, dict]:
    """k8s.io/apiserver pkg/admission/errors.go NewForbidden: 403, ``<resource>
    "<name>" is forbidden: <why>``."""
    return 403, status(403, "Forbidden", f'pods "{_name(pod)}" is forbidden: {why}',
                       name=_name(pod), kind="pods")


def missing_namespace(namespaces: set[str]) -> Admission:
    """NamespaceLifecycle (k8s.io/apiserver pkg/admission/plugin/namespace/lifecycle/
    admission.go): a create in a namespace that does not exist is a 404 NotFound."""
    def check(ns: str, pod: dict) -> tuple[int, dict] | None:
        if ns in namespaces:
            return None
        return 404, status(404, "NotFound", f'namespaces "{ns}" not found', name=ns,
                           kind="namespaces")
    return check


def priority_classes(names: set[str]) -> Admission:
    """Priority (plugin/pkg/admission/priority/admission.go): a priorityClassName with
    no PriorityClass is refused, 403."""
    def check(ns: str, pod: dict) -> tuple[int, dict] | None:
        pc = (pod.get("spec") or {}).get("priorityClassName")
        if not pc or pc in names:
            return None
        return forbidden(pod, f"no PriorityClass with name {pc} was found")
    return check


def pod_security_restricted(ns: str, pod: dict) -> tuple[int, dict] | None:
    """Pod Security admission (k8s.io/pod-security-admission admission/admission.go),
    as a namespace enforcing ``restricted`` answers a Pod that runs as root."""
    for c in (pod.get("spec") or {}).get("containers") or []:
        if ((c.get("securityContext") or {}).get("runAsUser")) == 0:
            return forbidden(pod, 'violates PodSecurity "restricted:latest": runAsUser=0 '
                             f'(container "{c.get("name")}" must not set runAsUser=0)')
    return None


def webhook_denial(ns: str, pod: dict) -> tuple[int, dict] | None:
    """A validating webhook that denies (k8s.io/apiserver pkg/admission/plugin/webhook/
    errors/statuserror.go ToStatusErr: the webhook's code, 400 here)."""
    return 400, status(400, "BadRequest", 'admission webhook "policy.example.com" denied '
                       "the request: images must come from registry.example.com")


def quota_exceeded(ns: str, pod: dict) -> tuple[int, dict] | None:
    """ResourceQuota (k8s.io/apiserver pkg/admission/plugin/resourcequota/controller.go):
    403 ``exceeded quota``; passes once other Pods of the namespace end."""
    return forbidden(pod, "exceeded quota: gpus, requested: requests.nvidia.com/gpu=1, "
                     "used: requests.nvidia.com/gpu=8, limited: requests.nvidia.com/gpu=8")


def rbac_denied(ns: str, pod: dict) -> tuple[int, dict] | None:
    """RBAC (plugin/pkg/auth/authorizer/rbac/rbac.go via k8s.io/apiserver pkg/endpoints/
    handlers/responsewriters/errors.go ForbiddenStatusError): gpuq's own rights."""
    return 403, status(403, "Forbidden", 'pods is forbidden: User "system:serviceaccount:'
                       'gpuq:gpuq" cannot create resource "pods" in API group "" in the '
                       f'namespace "{ns}"', kind="pods")
