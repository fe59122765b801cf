"""Which refusals of a create are the job's own, and which pass.

kube-apiserver refuses a Pod (or a gang's Service) for reasons of two kinds:

* **the job's**, the same answer on every try: schema or field validation (422,
  400), a namespace that does not exist (404, NamespaceLifecycle:
  k8s.io/apiserver pkg/admission/plugin/namespace/lifecycle/admission.go), a Pod
  Security violation (403 ``violates PodSecurity``:
  k8s.io/pod-security-admission admission/admission.go), a PriorityClass that does
  not exist (403 ``no PriorityClass with name``: plugin/pkg/admission/priority/
  admission.go), a validating webhook's denial (``admission webhook ... denied the
  request``, with the code the webhook chose: k8s.io/apiserver pkg/admission/plugin/
  webhook/errors/statuserror.go), a body too large (413). gpuq ends the job
  ``failed`` with the apiserver's message as its reason: retrying would create and
  delete the same refused Pods every pass.
* **passing**, which a later try can get past: an exceeded ResourceQuota (403
  ``exceeded quota``: k8s.io/apiserver pkg/admission/plugin/resourcequota/
  controller.go; other Pods of the namespace end and free it), gpuq's own rights
  (403 ``cannot create resource``, RBAC: an operator's fix, not the job's fault), a
  ServiceAccount the namespace does not have yet (403 ``error looking up service
  account``: plugin/pkg/admission/serviceaccount/admission.go; the serviceaccounts
  controller makes ``default`` a moment after a namespace, an operator the team's own),
  authentication (401), conflicts (409), throttling (429), server errors (5xx) and
  calls that got no answer in time. The job goes back to the queue with the message
  as its reason and is held there with exponential backoff (app/dispatch/bind.py),
  so a refusal that lasts costs one try per backoff step, not one per pass.
"""

from __future__ import annotations

import re

#: answers that are the same on every try, whatever the message
PERMANENT_CODES = frozenset({400, 404, 413, 422})
#: 403 messages that pass with time or an operator's fix (quota, gpuq's own RBAC, a
#: ServiceAccount not made yet)
_PASSING_403 = re.compile(r"exceeded quota|cannot \w+ resource|error looking up service account")


def is_permanent(status: int | None, message: str) -> bool:
    """True when the apiserver refused the job's object for a reason of the job's
    own (see the module docstring); False when a later try may pass."""
    if status in PERMANENT_CODES:
        return True
    if status == 403:
        return not _PASSING_403.search(message or "")
    return False
