"""Build the Pod of one replica, and read a job's phase back from its Pods.

Pure: JSON dicts in and out, so every field gpuq sets is unit-tested.
The Pod is the job's ``pod_template`` (a PodTemplateSpec ``{metadata, spec}``
or a bare PodSpec) with gpuq's additions: ``schedulerName`` (so the default
scheduler leaves it alone until gpuq binds it), labels, the accelerator
requests/limits of the placement, the PriorityClass, tolerations for the
node's GPU taints, and env vars with the GPU type, world size and rank. A job
with several replicas also gets a headless Service (:func:`build_service`) and,
on every Pod, a stable hostname under it and the rendezvous variables
(``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``, ``NODE_RANK``...) that
torchrun and MPI-style launchers read (docs/multi-node.md).
"""

from __future__ import annotations

import copy
import datetime as dt
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from app.cluster import k8s_labels as L
from app.cluster.interface import BindRequest, PodPhase
from app.cluster.k8s_devices import MIG_SINGLE, SHARE_UNSUPPORTED, DeviceLayer, UnsupportedDevice
from app.cluster.k8s_settings import KubeSettings
from app.domain.pod_policy import OWN_DEVICE_ENV, PodPolicy
from app.domain.pod_resources import mig_prefix
from app.scheduling.model import GpuType, ReplicaPlacement

_NAME_BAD = re.compile(r"[^a-z0-9-]")

# The default container's securityContext: non-root (busybox's "nobody"), no
# privilege escalation, no capabilities, the runtime's seccomp profile.
DEFAULT_SECURITY_CONTEXT: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": 65534,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def pod_name(req: BindRequest, replica: int, bind_id: str) -> str:
    """``<job name>-<job id prefix>-<bind id>-<replica>``: the bind id names the
    admission (app/cluster/kubernetes.py attempt_id), so two binds of one admission
    collide at the apiserver (409) instead of making two Pod sets; a new admission
    gets new names, so it never collides with an earlier one's terminating Pods."""
    base = _NAME_BAD.sub("-", req.name.lower())[:40].strip("-") or "job"
    jid = _NAME_BAD.sub("", req.job_id.lower())[:8] or "x"
    return f"{base}-{jid}-{bind_id}-{replica}"


def service_name(req: BindRequest) -> str:
    """The headless Service of a multi-replica job: ``<job name>-<job id>``, a DNS-1035
    label (starts with a letter) short enough that ``<service>-<replica>`` is one too."""
    base = _NAME_BAD.sub("-", req.name.lower())[:40].strip("-") or "job"
    if not base[0].isalpha():
        base = "j" + base
    jid = _NAME_BAD.sub("", req.job_id.lower())[:8] or "x"
    return f"{base}-{jid}"


def is_gang(req: BindRequest) -> bool:
    """More than one replica: the replicas must find each other (Service + rendezvous)."""
    return len(req.placements) > 1


def replica_host(req: BindRequest, replica: int, namespace: str) -> str:
    """The stable DNS name of one replica (the same in every bind attempt)."""
    svc = service_name(req)
    return f"{svc}-{replica}.{svc}.{namespace}.svc"


def build_service(req: BindRequest, ks: KubeSettings, namespace: str) -> dict:
    """A headless Service selecting the job's Pods, so each replica gets the DNS name
    ``<service>-<replica>.<service>.<namespace>.svc`` (Pod ``hostname`` + ``subdomain``),
    published before the Pods are ready (rendezvous happens before readiness)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(req),
            "namespace": namespace,
            "labels": {
                L.MANAGED_BY: L.MANAGED_BY_VALUE,
                L.JOB_ID: L.label_value(req.job_id),
                L.JOB_NAME: L.label_value(req.name),
            },
            "annotations": {L.ANN_JOB_ID: req.job_id},
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {L.MANAGED_BY: L.MANAGED_BY_VALUE, L.JOB_ID: L.label_value(req.job_id)},
            "ports": [{"name": "rendezvous", "port": ks.rendezvous_port, "protocol": "TCP"}],
        },
    }


def rendezvous_env(req: BindRequest, p: ReplicaPlacement, ks: KubeSettings, namespace: str):
    """torchrun / PyTorchJob-style variables plus host lists for MPI-style launchers.

    ``WORLD_SIZE`` and ``NNODES`` count replicas (one per node), ``NODE_RANK`` and
    ``RANK`` are this replica's index; ``GPUQ_HOSTS`` lists every replica's stable
    name in rank order (a hostfile is one line per entry, ``slots=$GPUQ_GPUS``).
    """
    n = len(req.placements)
    if is_gang(req):
        hosts = [replica_host(req, i, namespace) for i in range(n)]
        master = hosts[0]
    else:
        hosts, master = ["localhost"], "localhost"
    return [
        {"name": "MASTER_ADDR", "value": master},
        {"name": "MASTER_PORT", "value": str(ks.rendezvous_port)},
        {"name": "WORLD_SIZE", "value": str(n)},
        {"name": "NNODES", "value": str(n)},
        {"name": "NODE_RANK", "value": str(p.replica)},
        {"name": "RANK", "value": str(p.replica)},
        {"name": "GPUQ_REPLICA_INDEX", "value": str(p.replica)},
        {"name": "GPUQ_HOSTNAME", "value": hosts[p.replica] if is_gang(req) else "localhost"},
        {"name": "GPUQ_HOSTS", "value": ",".join(hosts)},
    ]


def accelerator_resources(p: ReplicaPlacement, gpu_type: GpuType | None,
                          layer: DeviceLayer | None = None) -> dict[str, str]:
    """Extended-resource requests (= limits) for what the placement holds, as the node's
    device plugin advertises it (app/cluster/k8s_devices.py): ``<resource>: N`` whole
    cards, ``<vendor>/mig-<profile>: 1`` per slice (mixed strategy), ``<resource>: 1`` per
    slice under the single strategy. A share of a card has no device-plugin contract gpuq
    drives (shares are refused at submit on Kubernetes): :class:`UnsupportedDevice`."""
    if gpu_type is None or p.gpu_type is None:
        return {}
    if p.mig:
        counts = Counter(profile for _dev, _slice, profile in p.mig)
        if layer is not None and layer.mode == MIG_SINGLE:
            return {gpu_type.resource_name: str(sum(counts.values()))}
        prefix = mig_prefix(gpu_type.resource_name)
        return {f"{prefix}{profile}": str(n) for profile, n in sorted(counts.items())}
    if p.share > 0:
        raise UnsupportedDevice(SHARE_UNSUPPORTED)
    if p.devices:
        return {gpu_type.resource_name: str(len(p.devices))}
    return {}


def tolerations_for(node_taints: Iterable[Mapping[str, Any]], ks: KubeSettings) -> list[dict]:
    """Tolerate the node's GPU taints gpuq handles for every job (e.g.
    ``nvidia.com/gpu:NoSchedule``); other taints keep the node off limits."""
    out = []
    for t in node_taints:
        if t.get("key") in ks.tolerated_taints and t.get("effect") in ("NoSchedule", "NoExecute"):
            tol = {"key": t["key"], "effect": t["effect"]}
            if t.get("value"):
                tol.update(operator="Equal", value=t["value"])
            else:
                tol["operator"] = "Exists"
            out.append(tol)
    return out


def _split_template(template: Mapping[str, Any]) -> tuple[dict, dict]:
    t = copy.deepcopy(dict(template or {}))
    if "spec" in t or "metadata" in t:
        return dict(t.get("metadata") or {}), dict(t.get("spec") or {})
    return {}, t  # a bare PodSpec


def attempt_labels(req: BindRequest, bind_id: str) -> dict[str, str]:
    """gpuq's labels on every Pod of one bind attempt (on a workload's Pod templates
    too: app/cluster/workloads/pods.py)."""
    return {
        L.MANAGED_BY: L.MANAGED_BY_VALUE,
        L.JOB_ID: L.label_value(req.job_id),
        L.JOB_NAME: L.label_value(req.name),
        L.BIND_ID: bind_id,
        L.REPLICAS: str(len(req.placements)),
        L.TEAM: L.label_value(req.team),
        L.POOL: L.label_value(req.pool),
        L.PRIORITY: L.label_value(req.priority),
    }


def placement_annotations(req: BindRequest, p: ReplicaPlacement) -> dict[str, str]:
    """What one replica holds, on its Pod, so a restarted gpuq and the node sync know
    which devices and slices are gpuq's (empty values left out)."""
    out = {
        L.ANN_JOB_ID: req.job_id,
        L.ANN_NODE: p.node,
        L.ANN_GPU_TYPE: p.gpu_type or "",
        L.ANN_DEVICES: ",".join(str(d) for d in p.devices) if not p.mig else "",
        L.ANN_MIG: ";".join(f"{d}:{s}:{prof}" for d, s, prof in p.mig),
        L.ANN_SHARE: f"{p.share:g}" if p.share else "",
    }
    return {k: v for k, v in out.items() if v}


# On every container that the device plugin gives no card (a CPU-only job, a sidecar, an
# init container): the NVIDIA container runtime exposes every card of the node to a
# container whose image sets NVIDIA_VISIBLE_DEVICES=all (CUDA base images do), or to a
# legacy CUDA image without it, while "void" makes it act as runc: no device, no driver.
# Upstream: NVIDIA/nvidia-container-toolkit internal/config/image/cuda_image.go
# (devicesFromEnvvars: unset with a legacy image means "all") and devices.go
# (NewVisibleDevices: "void"). A template may not set the variable (app/domain/pod_policy.py,
# DEVICE_ENV), so this value is gpuq's own (OWN_DEVICE_ENV, the one the check at bind lets by).
NO_DEVICES = OWN_DEVICE_ENV


def build_pod(
    req: BindRequest,
    p: ReplicaPlacement,
    *,
    bind_id: str,
    gpu_type: GpuType | None,
    node_taints: Sequence[Mapping[str, Any]] = (),
    ks: KubeSettings,
    policy: PodPolicy | None = None,
    layer: DeviceLayer | None = None,
    bound: bool = False,
) -> dict:
    """The Pod of one replica. ``layer``: the node's device layer (how its device
    plugin names what the placement holds); :class:`UnsupportedDevice` when it has no
    exact name for it. ``bound``: created on its node (``spec.nodeName``), not bound
    after.

    Every byte of a Pod is paid many times over: the API server decodes, admits and
    stores it (with a managedFields entry per field), and sends it to every watcher
    (kwok or the kubelet, the controllers, gpuq's informer) at each change. So gpuq
    writes nothing the object already says: the job id annotation only when the label
    cannot hold the exact id, the node annotation only on a Pod bound after its create
    (a gang's, until the Binding), the node name as a value (gpuq chose the node), no
    share variable (shares are refused on Kubernetes). bench/throughput_kube.py prints
    the stored size."""
    meta, spec = _split_template(req.pod_template)
    namespace = meta.pop("namespace", None) or (
        policy.default_namespace if policy is not None else ks.namespace)
    for k in ("name", "generateName", "resourceVersion", "uid"):
        meta.pop(k, None)
    labels = {**(meta.get("labels") or {}), **req.labels}  # the job's labels over the template's
    labels.update(attempt_labels(req, bind_id))
    labels[L.REPLICA] = str(p.replica)
    annotations = dict(meta.get("annotations") or {})
    annotations.update(placement_annotations(req, p))
    if labels[L.JOB_ID] == req.job_id:  # the label holds it exactly (k8s_labels.job_id_of)
        del annotations[L.ANN_JOB_ID]
    if bound:  # spec.nodeName says it (pod_placement_key)
        del annotations[L.ANN_NODE]

    containers = spec.get("containers") or []
    if not containers:
        # A job without a template (demo, or simulated-first workflows): a
        # container that "runs" for the duration estimate and succeeds; it
        # meets the restricted Pod Security Standard like every team's Pods must.
        seconds = int(req.duration_s or 60)
        containers = [{"name": "main", "image": ks.default_image,
                       "command": ["sleep", str(seconds)],
                       "securityContext": dict(DEFAULT_SECURITY_CONTEXT)}]
    env = [
        {"name": "GPUQ_JOB_ID", "value": req.job_id},
        {"name": "GPUQ_JOB_NAME", "value": req.name},
        {"name": "GPUQ_TEAM", "value": req.team},
        {"name": "GPUQ_POOL", "value": req.pool},
        {"name": "GPUQ_PRIORITY", "value": req.priority},
        {"name": "GPUQ_GPU_TYPE", "value": p.gpu_type or ""},
        {"name": "GPUQ_GPUS", "value": str(len(p.devices) if not p.mig and not p.share else 0)},
        {"name": "GPUQ_MIG_PROFILE", "value": ",".join(sorted({m[2] for m in p.mig}))},
        {"name": "GPUQ_WORLD_SIZE", "value": str(req.world_size or len(req.placements))},
        {"name": "GPUQ_RANK", "value": str(p.replica)},
        {"name": "GPUQ_NODE_NAME", "value": p.node},
        *rendezvous_env(req, p, ks, namespace),
    ]
    ours = {e["name"] for e in env}
    accel = accelerator_resources(p, gpu_type, layer)
    out_containers = []
    for i, c in enumerate(containers):
        c = dict(c)
        c["env"] = [e for e in (c.get("env") or []) if e.get("name") not in ours] + env
        if i or not accel:
            c["env"].append(dict(NO_DEVICES))  # no card of its own: none of the node's
        if i == 0:  # the first container is the workload: it gets the devices
            res = dict(c.get("resources") or {})
            requests = dict(res.get("requests") or {})
            limits = dict(res.get("limits") or {})
            # the main container's own share of what the placement booked for the Pod
            cpu = p.cpu if req.main_cpu is None else req.main_cpu
            mem = p.memory_gb if req.main_memory_gb is None else req.main_memory_gb
            if cpu:
                requests["cpu"] = f"{cpu:g}"
            if mem:
                requests["memory"] = f"{int(mem * 1e9)}"
            requests.update(accel)
            limits.update(accel)  # extended resources: limit must equal request
            res["requests"] = requests
            if limits:
                res["limits"] = limits
            c["resources"] = res
        out_containers.append(c)
    spec["containers"] = out_containers
    if spec.get("initContainers"):
        spec["initContainers"] = [{**c, "env": [*(c.get("env") or []), dict(NO_DEVICES)]}
                                  for c in spec["initContainers"]]
    spec["schedulerName"] = ks.scheduler_name
    if is_gang(req):  # a stable DNS name per replica through the job's headless Service
        spec["hostname"] = f"{service_name(req)}-{p.replica}"
        spec["subdomain"] = service_name(req)
    spec.pop("nodeName", None)  # only gpuq's placement says where
    if bound:
        spec["nodeName"] = p.node
    # gpuq owns restarts (failure_policy, retries): a kubelet restarting an OOMKilled
    # container (OnFailure/Always) would keep the job "running" in CrashLoopBackOff
    spec["restartPolicy"] = "Never"
    if req.time_limit_s is not None:
        # a backstop for the dispatcher, which stops the run at its limit: should no
        # dispatcher lead then, the kubelet ends the Pod (DeadlineExceeded,
        # pkg/kubelet/active_deadline.go) a margin later. The deadline counts from the
        # Pod's start, before its image is pulled and the job is running: the margin is
        # the longest a Pod may take to start (start_deadline_s) and a minute, so the
        # kubelet never ends a run before its limit (app/dispatch/ingest.py reads that
        # end as the time limit). A template's own shorter deadline stays.
        deadline = math.ceil(req.time_limit_s + ks.start_deadline_s) + DEADLINE_MARGIN_S
        own = spec.get("activeDeadlineSeconds")
        spec["activeDeadlineSeconds"] = (
            min(own, deadline) if isinstance(own, int) and not isinstance(own, bool)
            and own > 0 else deadline)
    spec["priorityClassName"] = ks.priority_class_prefix + req.priority.lower()
    spec.pop("priority", None)  # admission fills it from the class
    if policy is not None and not policy.automount_token:
        # no ServiceAccount token in a job's Pod unless the team is allowed one
        spec.setdefault("automountServiceAccountToken", False)
    tolerations = list(spec.get("tolerations") or [])
    for tol in tolerations_for(node_taints, ks):
        if tol not in tolerations:
            tolerations.append(tol)
    if tolerations:
        spec["tolerations"] = tolerations
    # gpuq reads the Pod's outcome before the object may go (k8s_labels.OUTCOME_FINALIZER)
    finalizers = [f for f in meta.pop("finalizers", None) or [] if f != L.OUTCOME_FINALIZER]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **meta,
            "finalizers": [*finalizers, L.OUTCOME_FINALIZER],
            "name": pod_name(req, p.replica, bind_id),
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
    }


#: seconds past a job's time limit and the start deadline before the kubelet ends its Pod
DEADLINE_MARGIN_S = 60


def pod_failure_message(pod: Mapping[str, Any]) -> str:
    st = pod.get("status") or {}
    if st.get("reason") == "DeadlineExceeded":  # the kubelet's, not the containers' own end
        return f"DeadlineExceeded: {st.get('message') or 'past activeDeadlineSeconds'}"
    for cs in st.get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated") or {}
        if term:
            bits = [term.get("reason") or "", f"exit code {term.get('exitCode')}"
                    if term.get("exitCode") is not None else ""]
            return f"container {cs.get('name')}: " + ", ".join(b for b in bits if b)
    return st.get("reason") or st.get("message") or "pod failed"


# Any ``DisruptionTarget`` Pod condition (pkg/apis/core/types.go, PodReason*: set
# before the Pod is deleted or failed) is a disruption: kube-scheduler preemption
# (PreemptionByScheduler), the taint eviction controller (DeletionByTaintManager,
# pkg/controller/tainteviction), the Eviction API (EvictionByEvictionAPI,
# pkg/registry/core/pod/storage/eviction.go), PodGC (DeletionByPodGC,
# pkg/controller/podgc) and the kubelet itself (TerminationByKubelet).
# ``status.reason`` of a Pod the kubelet failed for the node's sake, not the workload's:
# node-pressure eviction (pkg/kubelet/eviction/eviction_manager.go, "Evicted"), critical
# Pod preemption ("Preempting"), graceful node shutdown (pkg/kubelet/nodeshutdown,
# "Terminated", "NodeShutdown"), and admission rejections
# (pkg/kubelet/lifecycle/predicate.go: "OutOf<resource>", "NodeAffinity", "NodeName",
# "NodePorts", "TaintToleration", "InvalidNodeInfo", "UnexpectedAdmissionError" (also the
# device manager's, after a lost race for devices), "UnknownReason",
# "UnexpectedPredicateFailureType"), and "NodeLost" of the old node controller.
KUBELET_DISRUPTION_REASONS = frozenset({
    "Evicted", "Preempting", "Terminated", "NodeShutdown", "NodeAffinity", "NodeName",
    "NodePorts", "TaintToleration", "InvalidNodeInfo", "UnexpectedAdmissionError",
    "UnknownReason", "UnexpectedPredicateFailureType", "NodeLost",
})
# Of those, the kubelet's admission refusals (pkg/kubelet/lifecycle/predicate.go, plus
# ``OutOf<resource>``): the same node would refuse the job again at once
ADMISSION_REJECTIONS = frozenset({
    "NodeAffinity", "NodeName", "NodePorts", "TaintToleration", "InvalidNodeInfo",
    "UnexpectedAdmissionError", "UnknownReason", "UnexpectedPredicateFailureType",
})


def rejected_on(pod: Mapping[str, Any]) -> str | None:
    """The node whose kubelet refused this Pod at admission, or None."""
    st = pod.get("status") or {}
    reason = st.get("reason") or ""
    if st.get("phase") != "Failed" or not (
            reason in ADMISSION_REJECTIONS or reason.startswith("OutOf")):
        return None
    return (pod.get("spec") or {}).get("nodeName") or None
# Container waiting reasons the kubelet keeps retrying with back-off
# (pkg/kubelet/images/types.go, pkg/kubelet/kuberuntime/kuberuntime_container.go):
# the Pod stays Pending and would hold its cards forever; gpuq fails the job with
# this reason once the Pod has waited longer than the start deadline.
STUCK_WAITING_REASONS = frozenset({
    "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
    "CreateContainerConfigError", "CreateContainerError", "RunContainerError",
})


def disruption(pod: Mapping[str, Any]) -> str | None:
    """Why the infrastructure, not the workload, ended (or is ending) this Pod; None
    when it did not.

    Since Kubernetes 1.27 every graceful deletion by a component (drain through the
    Eviction API, scheduler preemption, taint-manager NoExecute on a lost node, PodGC
    of a deleted node's Pods) first adds the ``DisruptionTarget`` condition, and the
    kubelet then reports phase Failed (exit 143) before the object goes; the Pod of
    an unreachable node keeps phase Running with a deletionTimestamp (no kubelet to
    end it). Node-pressure eviction and admission rejections are ``Failed`` with the
    kubelet's reason in ``status.reason``. None of these spend the user's retries.
    """
    st = pod.get("status") or {}
    target = next((c for c in st.get("conditions") or []
                   if c.get("type") == "DisruptionTarget" and c.get("status", "True") == "True"),
                  None)
    reason, message = st.get("reason") or "", st.get("message") or ""
    kubelet = st.get("phase") == "Failed" and (
        reason in KUBELET_DISRUPTION_REASONS or reason.startswith("OutOf"))
    parts = []
    if target is not None:
        parts.append(target.get("reason") or "DisruptionTarget")
    if kubelet:
        parts.append(reason)
    if parts:
        text = message or (target or {}).get("message") or ""
        return "; ".join(parts) + (f": {text}" if text else "")
    if (pod.get("metadata") or {}).get("deletionTimestamp") and st.get(
            "phase") != "Succeeded" and not ended_before_deletion(pod):
        # deleted by someone else without a condition (kubectl delete, a controller's
        # plain delete; gpuq's own stops are not judged): the kubelet's graceful stop then
        # ends it Failed with exit 143 (pkg/kubelet/status/status_manager.go), which is
        # not the workload's failure
        return "deleted outside gpuq"
    return None


def _stamp(ts: Any) -> float | None:
    """An RFC 3339 time (``2026-12-03T21:00:00Z``, fractions allowed) as epoch seconds."""
    if not isinstance(ts, str) or not ts:
        return None
    try:
        return dt.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def ended_before_deletion(pod: Mapping[str, Any]) -> bool:
    """A Failed Pod whose containers had all ended before anyone asked to delete it: its
    failure is the workload's own, and the deletion (PodGC of terminated Pods past the
    threshold, a user's clean-up) only removes a finished object. The deletion was asked
    at ``deletionTimestamp - deletionGracePeriodSeconds`` (the apiserver sets the stamp to
    the request time plus the grace period, pkg/registry/rest/delete.go
    BeforeDelete). Without the times to compare, False (a deletion ended it)."""
    meta, st = pod.get("metadata") or {}, pod.get("status") or {}
    deleted = _stamp(meta.get("deletionTimestamp"))
    statuses = st.get("containerStatuses") or []
    if st.get("phase") != "Failed" or deleted is None or not statuses:
        return False
    asked = deleted - float(meta.get("deletionGracePeriodSeconds") or 0)
    for cs in statuses:
        finished = _stamp(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        if finished is None or finished > asked:
            return False
    return True


def stuck_reason(pod: Mapping[str, Any]) -> str | None:
    """The kubelet's waiting reason when a container of this Pod cannot start
    (image pull, config error); None when it is not stuck that way."""
    st = pod.get("status") or {}
    for cs in (st.get("initContainerStatuses") or []) + (st.get("containerStatuses") or []):
        w = (cs.get("state") or {}).get("waiting") or {}
        if w.get("reason") in STUCK_WAITING_REASONS:
            msg = w.get("message") or ""
            return f"container {cs.get('name')}: {w['reason']}" + (f": {msg}" if msg else "")
    return None


def restarted_reason(pod: Mapping[str, Any]) -> str | None:
    """Why the kubelet restarts a container of this Pod, or None when it does not.

    gpuq's Pods say ``restartPolicy: Never`` (gpuq owns restarts: failure_policy,
    retries), but a Pod made before that, or adopted from elsewhere, may say
    ``OnFailure``/``Always``: the kubelet then restarts a failed container after a
    back-off (``CrashLoopBackOff``, pkg/kubelet/kuberuntime/kuberuntime_manager.go) and the
    Pod stays Running forever while its workload fails. Such a run has failed: the
    reason is the last exit the kubelet reports (``lastState.terminated``: OOMKilled,
    Error with its exit code)."""
    st = pod.get("status") or {}
    for cs in (st.get("initContainerStatuses") or []) + (st.get("containerStatuses") or []):
        waiting = ((cs.get("state") or {}).get("waiting") or {}).get("reason")
        last = (cs.get("lastState") or {}).get("terminated") or {}
        if waiting != "CrashLoopBackOff" and not (cs.get("restartCount") and last.get(
                "exitCode")):
            continue
        bits = [last.get("reason") or "", f"exit code {last.get('exitCode')}"
                if last.get("exitCode") is not None else ""]
        what = ", ".join(b for b in bits if b) or "failed"
        return (f"container {cs.get('name')}: {what}, restarted by the kubelet "
                f"{cs.get('restartCount', 0)} times ({waiting or 'restarting'})")
    return None


def job_phase(pods: Sequence[Mapping[str, Any]], expected: int) -> tuple[PodPhase, str]:
    """The job's phase from the Pods of one bind attempt.

    * a disrupted Pod (:func:`disruption`) -> ``gone``: requeued, no retry spent;
    * a Pod Failed for the workload's own reason (non-zero exit, OOMKilled) -> ``failed``
      with the kubelet's reason;
    * every expected Pod Succeeded -> ``succeeded``;
    * every expected Pod Running (or done) -> ``running``; a gang with one replica
      still Pending (image pull back-off, say) is not running: its peers wait on it;
    * else ``pending``. (Stuck containers fail through :func:`stuck_reason` once the
      start deadline is over: that needs a clock, the caller has it.)
    """
    for pod in pods:
        why = disruption(pod)
        if why is not None:
            name = (pod.get("metadata") or {}).get("name")
            return "gone", f"pod {name} disrupted ({why})"
    phases = [(p.get("status") or {}).get("phase", "Pending") for p in pods]
    for pod, ph in zip(pods, phases, strict=True):
        if ph == "Failed":
            name = (pod.get("metadata") or {}).get("name")
            return "failed", f"pod {name}: {pod_failure_message(pod)}"
    if pods and all(ph == "Succeeded" for ph in phases) and len(pods) >= expected:
        return "succeeded", ""
    if len(pods) >= expected and pods and all(ph in ("Running", "Succeeded") for ph in phases):
        return "running", ""
    return "pending", ""


def placement_key(p: ReplicaPlacement) -> tuple[str, str, str]:
    """What a replica holds, as its Pod's annotations write it (node, cards, slices)."""
    return (
        p.node,
        ",".join(str(d) for d in p.devices) if not p.mig else "",
        ";".join(f"{d}:{s}:{prof}" for d, s, prof in p.mig),
    )


def pod_placement_key(pod: dict) -> tuple[str, str, str]:
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    node = (pod.get("spec") or {}).get("nodeName") or ann.get(L.ANN_NODE, "")
    return (node, ann.get(L.ANN_DEVICES, ""), ann.get(L.ANN_MIG, ""))
