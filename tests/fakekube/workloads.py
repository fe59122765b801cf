"""Workload APIs and controllers in the fake API server: batch/v1 Jobs, JobSets and
Kubeflow PyTorchJobs.

Every body a client sends is validated with kubernetes-validate (a JobSet's
replicated jobs as the batch/v1 Jobs its controller makes of them), and every Pod
the controllers create is validated too, so a Job the real API server would refuse
is refused here. The controllers run in a thread of their own, woken by every
change of the fake's state, like the real ones on their informers:

* :class:`JobController` models kubernetes ``pkg/controller/job/job_controller.go``
  (``syncJob``/``manageJob``): up to ``min(parallelism, completions - succeeded)``
  active Pods, named ``<job>-<index>-<suffix>`` with the completion index
  annotation and label and hostname ``<job>-<index>`` when Indexed; failed Pods
  counted once each (its finalizer tracking, ``trackJobStatusAndRemoveFinalizers``)
  against ``backoffLimit`` (default 6) until condition ``Failed``
  ``BackoffLimitExceeded``; condition ``Complete`` at ``completions`` successes;
  ``spec.suspend: true`` deletes the active Pods without counting them as failures,
  sets condition ``Suspended`` and resets ``startTime`` on resume.
* :class:`JobSetController` models jobset ``pkg/controller/jobset_controller.go``:
  ``replicas`` child Jobs per replicated job named ``<jobset>-<rjob>-<index>`` with
  the ``jobset.sigs.k8s.io/*`` labels on the Job and its Pods; suspend and the Pod
  template's labels carried down to the children while resuming
  (``resumeJobsIfNecessary``); ``Completed`` when every child completes, ``Failed``
  when one fails (the default failure policy, no restarts).
* :class:`PyTorchJobController` models the Kubeflow training operator
  (``pkg/controller.v1/pytorch/pytorchjob_controller.go`` with the shared
  ``pkg/controller.v1/common/job.go`` and ``pod.go``): Pods ``<job>-<type>-<index>``
  (``GenGeneralName``) labelled ``training.kubeflow.org/{job-name,replica-type,
  replica-index,operator-name}`` (``job-role: master`` on the master), the ``pytorch``
  container given ``MASTER_ADDR``/``MASTER_PORT``/``WORLD_SIZE``/``RANK``/
  ``PYTHONUNBUFFERED`` (``pytorch/envvar.go``), restart policy from the replica spec
  (``ExitCode`` as ``Never``); ``runPolicy.suspend`` deletes the Pods and sets
  ``Suspended``; ``Succeeded`` when the master (with no master: worker 0) succeeds,
  ``Failed`` when a Pod of a ``Never`` replica fails. The validating webhook's rules
  (``pkg/webhooks/pytorch/pytorchjob_webhook.go``): only ``Master``/``Worker``, at most
  one master, a container named ``pytorch`` in each template. The per-replica
  Services the operator also creates are not modelled (gpuq does not read them).
* Deleting a Job, JobSet or PyTorchJob deletes what it owns (background propagation of
  kubernetes ``pkg/controller/garbagecollector/garbagecollector.go``).
"""

from __future__ import annotations

import copy
import json
import re
import secrets
import threading
import time
from typing import Any

import kubernetes_validate

from tests.fakekube.server import FakeKube, status

VERSION = kubernetes_validate.utils.latest_version()
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
KINDS = {  # (group/version, plural) -> (kind, apiVersion)
    ("batch/v1", "jobs"): ("Job", "batch/v1"),
    ("jobset.x-k8s.io/v1alpha2", "jobsets"): ("JobSet", "jobset.x-k8s.io/v1alpha2"),
    ("kubeflow.org/v1", "pytorchjobs"): ("PyTorchJob", "kubeflow.org/v1"),
}
PATH = re.compile(r"^/apis/([^/]+/[^/]+)(?:/namespaces/([^/]+))?/(jobs|jobsets|pytorchjobs)"
                  r"(?:/([^/]+))?$")
PT_TYPES = ("Master", "Worker")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (what ``application/merge-patch+json`` means)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def validate(obj: dict) -> str | None:
    """kubernetes-validate's verdict on ``obj`` (a JobSet: its replicated jobs)."""
    try:
        if obj.get("kind") == "JobSet":
            rjobs = (obj.get("spec") or {}).get("replicatedJobs")
            if not isinstance(rjobs, list) or not rjobs:
                return "spec.replicatedJobs: Required value"
            for rj in rjobs:
                if not rj.get("name"):
                    return "spec.replicatedJobs[].name: Required value"
                t = rj.get("template") or {}
                kubernetes_validate.validate(
                    {"apiVersion": "batch/v1", "kind": "Job",
                     "metadata": {**(t.get("metadata") or {}), "name": "x"},
                     "spec": t.get("spec") or {}}, VERSION, strict=True)
        elif obj.get("kind") == "PyTorchJob":
            return _validate_pytorchjob(obj)
        else:
            kubernetes_validate.validate(obj, VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        return f"{'.'.join(str(p) for p in e.path)}: {e.message}"
    return None


def _validate_pytorchjob(obj: dict) -> str | None:
    """The training operator's webhook rules, then each replica's Pod template as a Pod."""
    specs = (obj.get("spec") or {}).get("pytorchReplicaSpecs")
    if not isinstance(specs, dict) or not specs:
        return "spec.pytorchReplicaSpecs: Required value"
    for rtype, rs in specs.items():
        where = f"spec.pytorchReplicaSpecs[{rtype}]"
        if rtype not in PT_TYPES:
            return f"{where}: Unsupported value (supported: Master, Worker)"
        if rtype == "Master" and rs.get("replicas", 1) != 1:
            return f"{where}.replicas: must be 1"
        t = rs.get("template") or {}
        names = [c.get("name") for c in (t.get("spec") or {}).get("containers") or []]
        if "pytorch" not in names:
            return f"{where}.template: there is no container named pytorch"
        try:
            kubernetes_validate.validate(
                {"apiVersion": "v1", "kind": "Pod",
                 "metadata": {**(t.get("metadata") or {}), "name": "x"},
                 "spec": t.get("spec") or {}}, VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            return f"{where}.template.{'.'.join(str(p) for p in e.path)}: {e.message}"
    return None


def _cond(obj: dict, type_: str) -> bool:
    return any(c.get("type") == type_ and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def _set_cond(obj: dict, type_: str, value: bool, reason: str = "", message: str = "") -> None:
    conds = obj.setdefault("status", {}).setdefault("conditions", [])
    for c in conds:
        if c["type"] == type_:
            c.update(status="True" if value else "False", reason=reason, message=message,
                     lastTransitionTime=_now())
            return
    if value:
        conds.append({"type": type_, "status": "True", "reason": reason, "message": message,
                      "lastTransitionTime": _now()})


def _owner_ref(obj: dict) -> dict:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"],
            "name": obj["metadata"]["name"], "uid": obj["metadata"]["uid"],
            "controller": True, "blockOwnerDeletion": True}


def _owned_by(obj: dict, owner: dict) -> bool:
    return any(r.get("uid") == owner["metadata"]["uid"]
               for r in obj["metadata"].get("ownerReferences") or [])


class Workloads:
    """The objects, their HTTP verbs, and the controllers' thread."""

    def __init__(self, kube: FakeKube) -> None:
        self.kube = kube
        self.objects: dict[tuple[str, str, str], dict] = {}  # (kind, ns, name)
        self.counted_failed: set[str] = set()  # Pod uids counted against backoffLimit
        self.patches: list[tuple[str, str, dict]] = []  # (kind, name, patch)
        self.refused: list[str] = []  # validation messages of bodies refused
        self.job = JobController(self)
        self.jobset = JobSetController(self)
        self.pytorchjob = PyTorchJobController(self)
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        kube.extensions.append(self.handle)
        self._thread.start()

    def close(self) -> None:
        with self.kube.cond:
            self._stop = True
            self.kube.cond.notify_all()
        self._thread.join(timeout=5)

    # -------------------------------------------------------------- controllers
    def _run(self) -> None:
        seen = -1
        while True:
            with self.kube.cond:
                while not self._stop and self.kube.rv == seen:
                    self.kube.cond.wait(timeout=0.2)
                if self._stop:
                    return
                self.sync()
                seen = self.kube.rv

    def sync(self) -> None:
        """One reconcile of every workload (caller holds the lock)."""
        for key in list(self.objects):
            obj = self.objects.get(key)
            if obj is None:
                continue
            if key[0] == "JobSet":
                self.jobset.sync(obj)
            elif key[0] == "PyTorchJob":
                self.pytorchjob.sync(obj)
        for key in list(self.objects):
            obj = self.objects.get(key)
            if obj is not None and key[0] == "Job":
                self.job.sync(obj)

    def emit(self, obj: dict, type_: str = "MODIFIED") -> None:
        self.kube._emit(obj["kind"].lower() + "s", type_, obj)

    # -------------------------------------------------------------- object edits
    def put(self, obj: dict) -> dict:
        """Create ``obj`` (validated; caller holds the lock)."""
        ns, name = obj["metadata"].get("namespace", "default"), obj["metadata"]["name"]
        obj = self.kube._stamp(obj, ns)
        obj.setdefault("status", {})
        if obj["kind"] == "Job":
            spec = obj.setdefault("spec", {})
            spec.setdefault("parallelism", 1)
            spec.setdefault("completionMode", "NonIndexed")
            spec.setdefault("backoffLimit", 6)
            spec.setdefault("suspend", False)
            if spec.get("completions") is None and spec["completionMode"] == "Indexed":
                spec["completions"] = spec["parallelism"]
        elif obj["kind"] == "PyTorchJob":  # pytorch_defaults.go: replicas 1, OnFailure
            spec = obj.setdefault("spec", {})
            spec.setdefault("runPolicy", {}).setdefault("suspend", False)
            for rs in spec.get("pytorchReplicaSpecs", {}).values():
                rs.setdefault("replicas", 1)
                rs.setdefault("restartPolicy", "OnFailure")
        self.objects[(obj["kind"], ns, name)] = obj
        self.emit(obj, "ADDED")
        return obj

    def remove(self, kind: str, ns: str, name: str) -> dict | None:
        """Delete and garbage-collect what it owns (caller holds the lock)."""
        obj = self.objects.pop((kind, ns, name), None)
        if obj is None:
            return None
        self.emit(obj, "DELETED")
        for key, child in list(self.objects.items()):
            if _owned_by(child, obj):
                self.remove(*key)
        for (pns, pname), pod in list(self.kube.pods.items()):
            if _owned_by(pod, obj):
                self.kube.pods.pop((pns, pname))
                self.kube._emit("pods", "DELETED", pod)
        return obj

    # -------------------------------------------------------------- HTTP
    def handle(self, method: str, path: str, query: dict, body: dict) -> tuple[int, dict] | None:
        m = PATH.match(path)
        if not m or (m.group(1), m.group(3)) not in KINDS:
            return None
        kind, api_version = KINDS[(m.group(1), m.group(3))]
        ns, name = m.group(2), m.group(4)
        with self.kube.cond:
            if method == "GET" and name is None:
                items = [copy.deepcopy(o) for (k, ons, _), o in self.objects.items()
                         if k == kind and (ns is None or ons == ns)
                         and _selected(query.get("labelSelector"), o)]
                return 200, {"apiVersion": api_version, "kind": f"{kind}List",
                             "metadata": {"resourceVersion": str(self.kube.rv)}, "items": items}
            if method == "POST" and name is None and ns:
                body = {**body, "apiVersion": api_version, "kind": kind}
                body.setdefault("metadata", {})["namespace"] = ns
                err = validate(body)
                if err:
                    self.refused.append(err)
                    return 422, status(422, "Invalid", f"{kind} is invalid: {err}")
                if (kind, ns, body["metadata"].get("name")) in self.objects:
                    return 409, status(409, "AlreadyExists", "already exists")
                return 201, copy.deepcopy(self.put(copy.deepcopy(body)))
            obj = self.objects.get((kind, ns or "", name or ""))
            if obj is None:
                return 404, status(404, "NotFound", f'{m.group(3)} "{name}" not found',
                                   name=name, kind=m.group(3))
            if method == "GET":
                return 200, copy.deepcopy(obj)
            if method == "DELETE":
                return 200, copy.deepcopy(self.remove(kind, ns, name))
            if method == "PATCH":
                patched = merge_patch(obj, body)
                err = validate(patched) or self._immutable(obj, patched)
                if err:
                    self.refused.append(err)
                    return 422, status(422, "Invalid", f"{kind} {name} is invalid: {err}")
                self.patches.append((kind, name, copy.deepcopy(body)))
                obj.clear()
                obj.update(patched)
                self.emit(obj)
                return 200, copy.deepcopy(obj)
        return 405, status(405, "MethodNotAllowed", f"{method} not allowed")

    @staticmethod
    def _immutable(old: dict, new: dict) -> str | None:
        """batch/v1 ``ValidateJobSpecUpdate``: the Pod template may change only while
        the Job is suspended (and then only its scheduling directives and labels,
        annotations: kubernetes ``pkg/apis/batch/validation/validation.go``)."""
        if old["kind"] != "Job":
            return None
        o, n = old.get("spec") or {}, new.get("spec") or {}
        if o.get("template") != n.get("template"):
            if not o.get("suspend"):
                return "spec.template: field is immutable (the Job is not suspended)"
            strip = [copy.deepcopy(o.get("template") or {}), copy.deepcopy(n.get("template"))]
            for t in strip:
                t.setdefault("metadata", {}).pop("labels", None)
                t["metadata"].pop("annotations", None)
                for k in ("nodeSelector", "tolerations", "affinity", "schedulingGates"):
                    t.setdefault("spec", {}).pop(k, None)
            if strip[0] != strip[1]:
                return "spec.template: only labels, annotations and scheduling may change"
        for k in ("completions", "completionMode", "selector"):
            if o.get(k) != n.get(k) and k != "completions":
                return f"spec.{k}: field is immutable"
        return None

    def create_pod(self, owner: dict, pod: dict) -> None:
        """A controller's Pod (validated; caller holds the lock)."""
        pod = {"apiVersion": "v1", "kind": "Pod", **pod}
        pod["metadata"]["ownerReferences"] = [_owner_ref(owner)]
        err = validate(pod)
        if err:
            raise AssertionError(f"the fake's controller made an invalid Pod: {err}")
        code, out = self.kube.create_pod(pod["metadata"]["namespace"], pod)
        assert code == 201, out


def _selected(selector: str | None, obj: dict) -> bool:
    from tests.fakekube.server import _match_labels

    return _match_labels(selector, obj["metadata"].get("labels") or {})


class JobController:
    """kubernetes ``pkg/controller/job/job_controller.go`` (see the module docstring)."""

    def __init__(self, w: Workloads) -> None:
        self.w = w

    def pods(self, job: dict) -> list[dict]:
        return [p for p in self.w.kube.pods.values() if _owned_by(p, job)]

    def sync(self, job: dict) -> None:
        if _cond(job, "Complete") or _cond(job, "Failed"):
            return
        spec, st = job["spec"], job.setdefault("status", {})
        before = json.dumps(st, sort_keys=True)
        pods = self.pods(job)
        active = [p for p in pods if p["status"].get("phase") not in ("Succeeded", "Failed")
                  and not p["metadata"].get("deletionTimestamp")]
        for p in pods:
            uid = p["metadata"]["uid"]
            if p["status"].get("phase") == "Failed" and uid not in self.w.counted_failed:
                self.w.counted_failed.add(uid)
                st["failed"] = st.get("failed", 0) + 1
        succeeded_idx = {self._index(p) for p in pods if p["status"].get("phase") == "Succeeded"}
        succeeded = sum(p["status"].get("phase") == "Succeeded" for p in pods)
        st["succeeded"] = succeeded
        completions = spec.get("completions")
        indexed = spec.get("completionMode") == "Indexed"
        done = len(succeeded_idx) if indexed else succeeded
        if spec.get("suspend"):
            for p in active:  # deleted, not failed: suspension is not a failure
                self._delete(p)
            st["active"] = 0
            st.pop("startTime", None)
            if not _cond(job, "Suspended"):
                _set_cond(job, "Suspended", True, "JobSuspended", "Job suspended")
        elif st.get("failed", 0) > spec.get("backoffLimit", 6):
            for p in active:
                self._delete(p)
            st["active"] = 0
            _set_cond(job, "Failed", True, "BackoffLimitExceeded",
                      "Job has reached the specified backoff limit")
        elif (completions is not None and done >= completions) or (
                completions is None and succeeded and not active):
            st["active"] = 0
            _set_cond(job, "Complete", True, "", "")
            st["completionTime"] = _now()
        else:
            if _cond(job, "Suspended"):
                _set_cond(job, "Suspended", False, "JobResumed", "Job resumed")
            st.setdefault("startTime", _now())
            parallelism = spec.get("parallelism", 1)
            if indexed:
                running = {self._index(p) for p in active}
                todo = [i for i in range(completions)
                        if i not in succeeded_idx and i not in running]
                for i in todo[: max(0, parallelism - len(active))]:
                    self._create(job, i)
            else:
                want = parallelism if completions is None else min(
                    parallelism, completions - succeeded)
                for _ in range(max(0, want - len(active))):
                    self._create(job, None)
            st["active"] = len([p for p in self.pods(job)
                                if p["status"].get("phase") not in ("Succeeded", "Failed")])
        if json.dumps(st, sort_keys=True) != before:
            self.w.emit(job)

    @staticmethod
    def _index(pod: dict) -> int:
        return int((pod["metadata"].get("annotations") or {}).get(COMPLETION_INDEX, "-1"))

    def _delete(self, pod: dict) -> None:
        meta = pod["metadata"]
        self.w.kube._remove(meta["namespace"], meta["name"], None)

    def _create(self, job: dict, index: int | None) -> None:
        meta, tmpl = job["metadata"], copy.deepcopy(job["spec"].get("template") or {})
        pmeta, pspec = tmpl.get("metadata") or {}, tmpl.get("spec") or {}
        name = meta["name"] + (f"-{index}" if index is not None else "")
        labels = {**(pmeta.get("labels") or {}),
                  "batch.kubernetes.io/controller-uid": meta["uid"],
                  "batch.kubernetes.io/job-name": meta["name"],
                  "controller-uid": meta["uid"], "job-name": meta["name"]}
        annotations = dict(pmeta.get("annotations") or {})
        if index is not None:
            labels[COMPLETION_INDEX] = str(index)
            annotations[COMPLETION_INDEX] = str(index)
            pspec.setdefault("hostname", name)
        pod = {"metadata": {"name": f"{name}-{secrets.token_hex(3)[:5]}",
                            "namespace": meta["namespace"], "labels": labels,
                            "annotations": annotations},
               "spec": pspec}
        self.w.create_pod(job, pod)


class JobSetController:
    """jobset ``pkg/controller/jobset_controller.go`` (see the module docstring)."""

    def __init__(self, w: Workloads) -> None:
        self.w = w

    def sync(self, js: dict) -> None:
        if _cond(js, "Completed") or _cond(js, "Failed"):
            return
        meta, spec = js["metadata"], js["spec"]
        children = [o for o in self.w.objects.values() if o["kind"] == "Job" and _owned_by(o, js)]
        by_name = {c["metadata"]["name"]: c for c in children}
        suspend = bool(spec.get("suspend"))
        for rj in spec.get("replicatedJobs") or []:
            for i in range(rj.get("replicas", 1)):
                name = f"{meta['name']}-{rj['name']}-{i}"
                labels = {"jobset.sigs.k8s.io/jobset-name": meta["name"],
                          "jobset.sigs.k8s.io/replicatedjob-name": rj["name"],
                          "jobset.sigs.k8s.io/job-index": str(i)}
                tmpl = copy.deepcopy(rj["template"])
                ptmpl = tmpl.setdefault("spec", {}).setdefault("template", {})
                ptmpl.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
                child = by_name.get(name)
                if child is None:
                    job = {"apiVersion": "batch/v1", "kind": "Job",
                           "metadata": {"name": name, "namespace": meta["namespace"],
                                        "labels": labels, "ownerReferences": [_owner_ref(js)]},
                           "spec": {**tmpl["spec"], "suspend": suspend}}
                    err = validate(job)
                    assert err is None, err
                    self.w.put(job)
                    continue
                cs = child["spec"]
                if cs.get("suspend") != suspend:
                    if not suspend:  # resumeJobsIfNecessary: the template's labels first
                        cs["template"].setdefault("metadata", {})["labels"] = (
                            ptmpl["metadata"]["labels"])
                    cs["suspend"] = suspend
                    self.w.emit(child)
        if children and all(_cond(c, "Complete") for c in children):
            _set_cond(js, "Completed", True, "AllJobsCompleted", "jobset completed successfully")
            self.w.emit(js)
        elif any(_cond(c, "Failed") for c in children):
            for c in children:
                c["spec"]["suspend"] = True
            _set_cond(js, "Failed", True, "FailedJobs", "jobset failed: a child Job failed")
            self.w.emit(js)


class PyTorchJobController:
    """The Kubeflow training operator's PyTorchJob reconcile (see the module docstring)."""

    MASTER_PORT = 23456  # pytorch_defaults.go: the default port of the pytorchjob-port

    def __init__(self, w: Workloads) -> None:
        self.w = w

    def sync(self, job: dict) -> None:
        if _cond(job, "Succeeded") or _cond(job, "Failed"):
            return
        meta, spec = job["metadata"], job["spec"]
        specs = spec.get("pytorchReplicaSpecs") or {}
        pods = [p for p in self.w.kube.pods.values() if _owned_by(p, job)]
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        if (spec.get("runPolicy") or {}).get("suspend"):
            for p in live:
                self.w.kube._remove(p["metadata"]["namespace"], p["metadata"]["name"], None)
            if not _cond(job, "Suspended"):
                _set_cond(job, "Suspended", True, "PyTorchJobSuspended",
                          "PyTorchJob is suspended")
                self.w.emit(job)
            return
        if _cond(job, "Suspended"):
            _set_cond(job, "Suspended", False, "PyTorchJobResumed", "PyTorchJob is resumed")
            self.w.emit(job)
        by_name = {p["metadata"]["name"]: p for p in live}
        world = sum(rs.get("replicas", 1) for rs in specs.values())
        for rtype in PT_TYPES:
            rs = specs.get(rtype)
            for i in range((rs or {}).get("replicas", 0)):
                name = f"{meta['name']}-{rtype.lower()}-{i}"
                pod = by_name.get(name)
                if pod is None:
                    rank = i if rtype == "Master" or "Master" not in specs else i + 1
                    self._create(job, rtype, i, rank, world)
                elif pod["status"].get("phase") == "Failed" and rs.get(
                        "restartPolicy") in ("Never", "ExitCode"):
                    for p in live:
                        self.w.kube._remove(p["metadata"]["namespace"],
                                            p["metadata"]["name"], None)
                    _set_cond(job, "Failed", True, "PyTorchJobFailed",
                              f"PyTorchJob {meta['name']} is failed because 1 {rtype} "
                              "replica(s) failed.")
                    self.w.emit(job)
                    return
        chief = f"{meta['name']}-master-0" if "Master" in specs else f"{meta['name']}-worker-0"
        if (by_name.get(chief) or {}).get("status", {}).get("phase") == "Succeeded":
            _set_cond(job, "Succeeded", True, "PyTorchJobSucceeded",
                      f"PyTorchJob {meta['name']} is successfully completed.")
            self.w.emit(job)
        elif not _cond(job, "Running") and any(
                p["status"].get("phase") == "Running" for p in live):
            _set_cond(job, "Running", True, "PyTorchJobRunning",
                      f"PyTorchJob {meta['name']} is running.")
            self.w.emit(job)

    def _create(self, job: dict, rtype: str, index: int, rank: int, world: int) -> None:
        meta = job["metadata"]
        rs = job["spec"]["pytorchReplicaSpecs"][rtype]
        tmpl = copy.deepcopy(rs.get("template") or {})
        pmeta, pspec = tmpl.get("metadata") or {}, tmpl.get("spec") or {}
        labels = {**(pmeta.get("labels") or {}),
                  "training.kubeflow.org/job-name": meta["name"],
                  "training.kubeflow.org/operator-name": "pytorchjob-controller",
                  "training.kubeflow.org/replica-type": rtype.lower(),
                  "training.kubeflow.org/replica-index": str(index)}
        if rtype == "Master":
            labels["training.kubeflow.org/job-role"] = "master"
        restart = rs.get("restartPolicy", "OnFailure")
        pspec["restartPolicy"] = "Never" if restart == "ExitCode" else restart
        master = f"{meta['name']}-master-0" if "Master" in job["spec"][
            "pytorchReplicaSpecs"] else "localhost"
        for c in pspec.get("containers") or []:
            if c.get("name") == "pytorch":
                c.setdefault("env", []).extend([
                    {"name": "MASTER_PORT", "value": str(self.MASTER_PORT)},
                    {"name": "MASTER_ADDR", "value": master},
                    {"name": "WORLD_SIZE", "value": str(world)},
                    {"name": "RANK", "value": str(rank)},
                    {"name": "PYTHONUNBUFFERED", "value": "1"},
                ])
        pod = {"metadata": {"name": f"{meta['name']}-{rtype.lower()}-{index}",
                            "namespace": meta["namespace"], "labels": labels,
                            "annotations": dict(pmeta.get("annotations") or {})},
               "spec": pspec}
        self.w.create_pod(job, pod)
