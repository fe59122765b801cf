"""Which apiserver refusals are the job's own (fail) and which pass (hold, retry)."""

from __future__ import annotations

import pytest

from app.cluster.k8s_refusals import is_permanent

CASES = [
    (422, 'Pod "x" is invalid: spec.containers[0].image: Required value', True),
    (400, 'admission webhook "p.example.com" denied the request: no', True),
    (404, 'namespaces "ml" not found', True),
    (413, "Request entity too large", True),
    (403, 'pods "x" is forbidden: violates PodSecurity "restricted:latest": ...', True),
    (403, 'pods "x" is forbidden: no PriorityClass with name gpuq-p7 was found', True),
    (403, 'pods "x" is forbidden: exceeded quota: gpus, requested: ...', False),
    (403, 'pods is forbidden: User "system:serviceaccount:gpuq:gpuq" cannot create '
          'resource "pods" in API group "" in the namespace "ml"', False),
    (401, "Unauthorized", False),
    (409, "Operation cannot be fulfilled", False),
    (429, "Too many requests", False),
    (500, "etcdserver: request timed out", False),
    (None, "", False),
]


@pytest.mark.parametrize(("code", "message", "permanent"), CASES)
def test_classification(code, message, permanent):
    assert is_permanent(code, message) is permanent
