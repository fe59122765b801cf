"""The HTTP side of the Kubernetes front door: list, read and patch workloads of any
adaptor through the generic custom-objects client (it builds
``/apis/<group>/<version>/...`` for built-in groups like ``batch`` as for CRDs),
write Events on them, and bind their Pods on the nodes gpuq reserved.

Patches are JSON merge patches (``application/merge-patch+json``): they name only
the fields gpuq owns, so a GitOps tool's fields are left as they are.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Mapping
from typing import Any

from kubernetes import client as kclient
from kubernetes.client.exceptions import ApiException

from app.cluster.workloads import ADAPTORS
from app.cluster.workloads.adaptor import WorkloadAdaptor
from app.domain.owner import WorkloadOwner

log = logging.getLogger(__name__)
MERGE_PATCH = "application/merge-patch+json"


def owner_of_object(obj: Mapping[str, Any]) -> WorkloadOwner:
    meta = obj.get("metadata") or {}
    return WorkloadOwner(obj.get("apiVersion", ""), obj.get("kind", ""),
                         meta.get("namespace", ""), meta.get("name", ""), meta.get("uid", ""))


class WorkloadClient:
    def __init__(self, api_client: kclient.ApiClient, kinds: list[str]) -> None:
        self.custom = kclient.CustomObjectsApi(api_client)
        self.core = kclient.CoreV1Api(api_client)
        self.adaptors = [ADAPTORS[k] for k in kinds if k in ADAPTORS]
        self.missing_kinds: set[str] = set()  # kinds whose API the cluster does not serve

    @staticmethod
    def adaptor(kind: str) -> WorkloadAdaptor | None:
        return ADAPTORS.get(kind)

    def list(self, a: WorkloadAdaptor, *, namespace: str | None = None,
             selector: str | None = None) -> list[dict]:
        """The workloads of one kind (empty, logged once, when its API is not served:
        JobSet without its CRD)."""
        try:
            if namespace is None:
                resp = self.custom.list_cluster_custom_object(
                    a.group, a.version, a.plural, label_selector=selector,
                    _preload_content=False)
            else:
                resp = self.custom.list_namespaced_custom_object(
                    a.group, a.version, namespace, a.plural, label_selector=selector,
                    _preload_content=False)
        except ApiException as e:
            if e.status == 404:
                if a.kind not in self.missing_kinds:
                    log.warning("the cluster serves no %s API (%s/%s): not queued",
                                a.kind, a.group, a.version)
                self.missing_kinds.add(a.kind)
                return []
            raise
        self.missing_kinds.discard(a.kind)
        # _preload_content=False: the raw urllib3 response, not the hinted model
        items = json.loads(resp.data).get("items") or []  # type: ignore[attr-defined]
        for o in items:  # list items carry no kind
            o.setdefault("apiVersion", a.api_version)
            o.setdefault("kind", a.kind)
        return items

    def get(self, owner: WorkloadOwner) -> dict | None:
        a = ADAPTORS[owner.kind]
        try:
            resp = self.custom.get_namespaced_custom_object(
                a.group, a.version, owner.namespace, a.plural, owner.name,
                _preload_content=False)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        # _preload_content=False: the raw urllib3 response, not the hinted model
        obj = json.loads(resp.data)  # type: ignore[attr-defined]
        if owner.uid and (obj.get("metadata") or {}).get("uid") != owner.uid:
            return None  # deleted and created again: another workload
        return obj

    def patch(self, owner: WorkloadOwner, body: dict) -> dict:
        a = ADAPTORS[owner.kind]
        resp = self.custom.patch_namespaced_custom_object(
            a.group, a.version, owner.namespace, a.plural, owner.name, body,
            _content_type=MERGE_PATCH, _preload_content=False)
        # _preload_content=False: the raw urllib3 response, not the hinted model
        return json.loads(resp.data)  # type: ignore[attr-defined]

    def annotate(self, owner: WorkloadOwner, annotations: Mapping[str, str | None]) -> None:
        """Set (None: remove) gpuq's annotations; best effort (a status, not a decision)."""
        try:
            self.patch(owner, {"metadata": {"annotations": dict(annotations)}})
        except ApiException as e:
            log.info("annotate %s: %s", owner.ref, e.status)

    def event(self, owner: WorkloadOwner, reason: str, message: str,
              type_: str = "Normal") -> None:
        """An Event on the workload (``kubectl describe`` shows it); best effort."""
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": "gpuq-", "namespace": owner.namespace},
            "involvedObject": {"apiVersion": owner.api_version, "kind": owner.kind,
                               "name": owner.name, "namespace": owner.namespace,
                               "uid": owner.uid},
            "reason": reason, "message": message[:1000], "type": type_,
            "source": {"component": "gpuq"},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        try:
            # the client's hints say its model class; it serializes a dict body too
            self.core.create_namespaced_event(owner.namespace, body, _preload_content=False)  # type: ignore[arg-type]
        except Exception as e:  # events are best effort
            log.info("could not record event %s on %s: %s", reason, owner.ref, e)

    def patch_pod(self, namespace: str, name: str, body: dict) -> None:
        self.core.patch_namespaced_pod(name, namespace, body, _content_type=MERGE_PATCH,
                                       _preload_content=False)
