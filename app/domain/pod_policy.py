"""What a team's ``pod_template`` may ask of the cluster.

Checked at submit (a 422 naming the field path, nothing written) and again
on the finished Pod just before it is created (defence in depth: the team's
policy may have been tightened since the job was queued). Pure: dicts in,
:class:`Violation` values out; the callers decide what a violation costs.

Four groups of rules:

1. **Schema**: the template must be a valid ``PodTemplateSpec`` (or a bare
   ``PodSpec``) of the targeted Kubernetes version, checked with the
   OpenAPI-derived JSON schemas shipped by ``kubernetes-validate`` (strict:
   unknown fields are errors). No hand-written schema.
2. **Access**: the namespace must be one the team is allowed (default: the
   install's job namespace); the ServiceAccount must be on the team's
   allowlist (default ``default``); ``automountServiceAccountToken: true``
   only when the team is allowed it.
3. **Pod Security Standards**: every control of the upstream document
   (https://kubernetes.io/docs/concepts/security/pod-security-standards/)
   for the team's level, ``restricted`` by default. One function per
   control, named after it, in the document's order.
4. **gpuq-owned fields**: what gpuq writes on every Pod (scheduler, node,
   priority class, accelerator resources, its labels, annotations, env vars
   and the tolerations it adds) is refused in a template, never silently
   overwritten.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

PssLevel = Literal["restricted", "baseline", "privileged"]
PSS_LEVELS: tuple[str, ...] = ("restricted", "baseline", "privileged")

#: Kubernetes version whose schemas validate templates unless configured.
DEFAULT_KUBERNETES_VERSION = "1.30"

#: Label/annotation keys gpuq writes on its Pods (app/cluster/k8s_labels.py):
#: everything under ``gpuq.io/`` plus the standard managed-by label.
OWNED_KEY_PREFIX = "gpuq.io/"
OWNED_LABELS = frozenset({"app.kubernetes.io/managed-by"})
#: Env vars gpuq sets in every container (GPU type, world size, rank, ...).
OWNED_ENV_PREFIX = "GPUQ_"

CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")

# -- PSS allowed values (upstream document, baseline and restricted) --------
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
        "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
    }
)
RESTRICTED_ADD_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t",
                           "container_engine_t"})
APPARMOR_TYPES = frozenset({"RuntimeDefault", "Localhost"})
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
SECCOMP_TYPES = frozenset({"RuntimeDefault", "Localhost"})
RESTRICTED_VOLUME_TYPES = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
     "projected", "secret"}
)
STANDARD_RESOURCES = ("cpu", "memory", "ephemeral-storage", "hugepages-")


@dataclass(frozen=True)
class Violation:
    """One refused field: ``path`` is where it is, relative to the job body."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass(frozen=True)
class InstallPolicy:
    """What the install decides for every team (from ``GPUQ_K8S_*``)."""

    job_namespace: str = "gpuq-jobs"
    # taint keys gpuq tolerates on behalf of every job: a template may not add them
    tolerated_taints: tuple[str, ...] = ("nvidia.com/gpu",)
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
    # RuntimeClasses a template may name (GPUQ_K8S_RUNTIME_CLASSES); empty: none. The
    # `nvidia` class alone hands a container every card of the node.
    runtime_classes: tuple[str, ...] = ()
    # extended resources a template may ask for besides the GPU types'
    # (GPUQ_K8S_EXTENDED_RESOURCES), e.g. an RDMA device plugin's rdma/hca_shared_devices_a
    # for InfiniBand teams; none by default
    extended_resources: tuple[str, ...] = ()


@dataclass(frozen=True)
class PodPolicy:
    """One team's rules (its row in ``teams``) plus the install's."""

    level: str = "restricted"
    namespaces: tuple[str, ...] = ()  # empty: the install's job namespace only
    service_accounts: tuple[str, ...] = ("default",)
    automount_token: bool = False
    install: InstallPolicy = field(default_factory=InstallPolicy)
    # accelerator resource names of the catalog's GPU types (nvidia.com/gpu, ...)
    gpu_resources: frozenset[str] = frozenset({"nvidia.com/gpu"})
    # the team's namespaces no other team may use: only there may a template name
    # Secrets, ConfigMaps, PVCs or CSI volumes (the namespace is the tenant boundary)
    private_namespaces: frozenset[str] = frozenset()

    @property
    def allowed_namespaces(self) -> tuple[str, ...]:
        return self.namespaces or (self.install.job_namespace,)

    @property
    def default_namespace(self) -> str:
        """Where a Pod whose template names no namespace runs: the team's first own
        namespace, else the install's job namespace (the namespace is the tenant
        boundary, so a team that has one works there by default)."""
        return self.namespaces[0] if self.namespaces else self.install.job_namespace


# -- entry points -----------------------------------------------------------


def check_template(
    template: Mapping[str, Any], policy: PodPolicy, where: str = "pod_template"
) -> list[Violation]:
    """Every violation of a job's ``pod_template`` (empty: accepted).

    Schema errors come first and stop there: the other rules read fields
    whose types they can then trust.
    """
    if not template:
        return []  # gpuq's default container (restricted-compliant) runs
    meta, spec, base = split_template(template, where)
    errors = schema_violations(template, policy.install.kubernetes_version, where)
    if errors:
        return errors
    out = metadata_violations(meta, base)
    out += owned_field_violations(meta, spec, policy, base)
    out += device_violations(meta, spec, policy, base, template=True)
    out += access_violations(meta, spec, policy, base)
    out += reference_violations(meta, spec, policy, base)
    out += pss_violations(meta, spec, policy.level, base)
    return out


def check_pod(pod: Mapping[str, Any], policy: PodPolicy) -> list[Violation]:
    """The rules a finished Pod (gpuq's fields included) must still meet at bind."""
    meta = dict(pod.get("metadata") or {})
    spec = dict(pod.get("spec") or {})
    base = {"meta": "metadata", "spec": "spec"}
    return (
        access_violations(meta, spec, policy, base)
        + reference_violations(meta, spec, policy, base)
        + device_violations(meta, spec, policy, base, template=False)
        + pss_violations(meta, spec, policy.level, base)
    )


def token_violations(template: Mapping[str, Any], policy: PodPolicy,
                     where: str = "pod_template") -> list[Violation]:
    """A Pod gpuq does not build (a workload's, made by its controller) gets its service
    account's token mounted unless its spec says ``automountServiceAccountToken:
    false`` (kubernetes ``plugin/pkg/admission/serviceaccount/admission.go``,
    ``shouldAutomount``: the Pod's field, else the ServiceAccount's, else true); gpuq
    sets the field on its own Pods (``app.cluster.k8s_pods``). So a team that may not
    mount a token must say false in such a template, or its Pods are refused at bind."""
    if policy.automount_token:
        return []
    _meta, spec, base = split_template(template, where)
    if spec.get("automountServiceAccountToken") is False:
        return []
    return [Violation(f"{base['spec']}.automountServiceAccountToken",
                      "must be false: this team may not mount a service account token, "
                      "and a Pod that leaves it unset gets one")]


def split_template(
    template: Mapping[str, Any], where: str = "pod_template"
) -> tuple[dict, dict, dict[str, str]]:
    """(metadata, spec, path prefixes) of a PodTemplateSpec or a bare PodSpec."""
    if "spec" in template or "metadata" in template:
        return (
            dict(template.get("metadata") or {}),
            dict(template.get("spec") or {}),
            {"meta": f"{where}.metadata", "spec": f"{where}.spec"},
        )
    return {}, dict(template), {"meta": f"{where}.metadata", "spec": where}


# -- 1. schema ----------------------------------------------------------------

_validators: dict[str, Any] = {}
_validators_lock = threading.Lock()


def _validator(version: str) -> Any:
    """A JSON-schema validator for PodTemplateSpec of ``version`` (built once)."""
    with _validators_lock:
        v = _validators.get(version)
        if v is not None:
            return v
        import jsonschema
        from kubernetes_validate import utils
        from referencing import Registry, Resource

        want = utils.major_minor(version)
        known = [x for x in utils.all_versions() if utils.major_minor(x) <= want]
        if not known:
            raise ValueError(f"kubernetes-validate has no schemas for Kubernetes {version}")
        folder = f"kubernetes-json-schema/v{known[-1]}-local-strict"
        schema = utils.schema_contents(f"{folder}/podtemplatespec-v1.json", version)
        defs = utils.schema_contents(f"{folder}/_definitions.json", version)
        registry = Resource.from_contents(defs) @ (Resource.from_contents(schema) @ Registry())
        v = jsonschema.validators.Draft202012Validator(schema, registry=registry)
        _validators[version] = v
        return v


def schema_violations(
    template: Mapping[str, Any], version: str, where: str = "pod_template"
) -> list[Violation]:
    """Schema errors of the template, each at its field path (at most 10)."""
    bare = not ("spec" in template or "metadata" in template)
    doc: dict[str, Any] = {"spec": dict(template)} if bare else dict(template)
    body = doc.get("spec")
    if isinstance(body, dict) and "containers" not in body:
        # no containers: gpuq runs its default one (see app/cluster/k8s_pods.py)
        doc = {**doc, "spec": {**body, "containers": [{"name": "main"}]}}
    out = []
    for err in sorted(_validator(version).iter_errors(doc), key=lambda e: list(e.absolute_path)):
        parts = list(err.absolute_path)
        if bare and parts and parts[0] == "spec":
            parts = parts[1:]
        out.append(Violation(_path(where, parts), _short(err.message)))
        if len(out) >= 10:
            break
    return out


def _path(where: str, parts: Iterable[Any]) -> str:
    s = where
    for p in parts:
        s += f"[{p}]" if isinstance(p, int) else f".{p}"
    return s


def _short(message: str) -> str:
    return message if len(message) <= 200 else message[:197] + "..."


# Kubernetes' cap on the size of an object's annotations, keys and values together
# (apimachinery ValidateAnnotationsSize, TotalAnnotationSizeLimitB)
MAX_ANNOTATIONS_BYTES = 256 * 1024


def metadata_violations(meta: Mapping[str, Any], base: dict[str, str]) -> list[Violation]:
    """Label keys and values and annotation keys the API server refuses on the Pod
    (``IsQualifiedName``, ``IsValidLabelValue``), and annotations over 256 KiB. The
    schema types them as plain strings: such a template passed submit and its Pods
    failed to be created, at bind."""
    from app.domain.spec import is_label_key, is_label_value

    out = []
    for k, v in (meta.get("labels") or {}).items():
        if not is_label_key(k):
            out.append(Violation(f"{base['meta']}.labels.{k}", "not a Kubernetes label key "
                                 "([prefix/]name, the name 1-63 letters, digits, '-', '_', '.', "
                                 "starting and ending with a letter or digit)"))
        elif not is_label_value(v):
            out.append(Violation(f"{base['meta']}.labels.{k}", f"value {v!r} is not a "
                                 "Kubernetes label value (empty, or 1-63 letters, digits, "
                                 "'-', '_', '.', starting and ending with a letter or digit)"))
    annotations = meta.get("annotations") or {}
    for k in annotations:
        if not is_label_key(k):
            out.append(Violation(f"{base['meta']}.annotations.{k}",
                                 "not a Kubernetes annotation key ([prefix/]name, as a label key)"))
    size = sum(len(k.encode()) + len(str(v).encode()) for k, v in annotations.items())
    if size > MAX_ANNOTATIONS_BYTES:
        out.append(Violation(f"{base['meta']}.annotations",
                             f"{size} bytes, over Kubernetes' {MAX_ANNOTATIONS_BYTES}"))
    return out


# -- helpers over containers ----------------------------------------------------


def containers(spec: Mapping[str, Any], base: str) -> Iterator[tuple[str, dict]]:
    """(path, container) for init, app and ephemeral containers."""
    for kind in CONTAINER_LISTS:
        for i, c in enumerate(spec.get(kind) or []):
            if isinstance(c, dict):
                yield f"{base}.{kind}[{i}]", c


def _sc(obj: Mapping[str, Any]) -> dict:
    sc = obj.get("securityContext")
    return sc if isinstance(sc, dict) else {}


# -- 2. access: namespace, service account, token -------------------------------


def access_violations(
    meta: Mapping[str, Any], spec: Mapping[str, Any], policy: PodPolicy, base: dict[str, str]
) -> list[Violation]:
    out = []
    ns = meta.get("namespace")
    if ns is not None and ns not in policy.allowed_namespaces:
        out.append(
            Violation(
                f"{base['meta']}.namespace",
                f"namespace {ns!r} is not allowed for this team "
                f"(allowed: {', '.join(policy.allowed_namespaces)})",
            )
        )
    for key in ("serviceAccountName", "serviceAccount"):
        sa = spec.get(key)
        if sa is not None and sa not in policy.service_accounts:
            out.append(
                Violation(
                    f"{base['spec']}.{key}",
                    f"service account {sa!r} is not allowed for this team "
                    f"(allowed: {', '.join(policy.service_accounts) or 'none'})",
                )
            )
    if not spec.get("serviceAccountName") and not spec.get("serviceAccount") and (
        "default" not in policy.service_accounts
    ):
        out.append(
            Violation(
                f"{base['spec']}.serviceAccountName",
                "must name one of this team's service accounts "
                f"({', '.join(policy.service_accounts) or 'none'}); 'default' is not allowed",
            )
        )
    if spec.get("automountServiceAccountToken") is True and not policy.automount_token:
        out.append(
            Violation(
                f"{base['spec']}.automountServiceAccountToken",
                "this team may not mount a service account token (must be false or unset)",
            )
        )
    return out


# -- 3. Pod Security Standards ---------------------------------------------------

Check = Callable[[Mapping[str, Any], Mapping[str, Any], dict[str, str]], list[Violation]]


def baseline_host_process(meta, spec, base) -> list[Violation]:
    """HostProcess: windowsOptions.hostProcess must be unset or false."""
    out = []
    if (_sc(spec).get("windowsOptions") or {}).get("hostProcess"):
        out.append(Violation(f"{base['spec']}.securityContext.windowsOptions.hostProcess",
                             "HostProcess containers are not allowed"))
    for path, c in containers(spec, base["spec"]):
        if (_sc(c).get("windowsOptions") or {}).get("hostProcess"):
            out.append(Violation(f"{path}.securityContext.windowsOptions.hostProcess",
                                 "HostProcess containers are not allowed"))
    return out


def baseline_host_namespaces(meta, spec, base) -> list[Violation]:
    """Host namespaces: hostNetwork, hostPID, hostIPC must be unset or false."""
    return [
        Violation(f"{base['spec']}.{k}", "sharing the host's namespaces is not allowed")
        for k in ("hostNetwork", "hostPID", "hostIPC")
        if spec.get(k)
    ]


def baseline_privileged(meta, spec, base) -> list[Violation]:
    """Privileged containers: securityContext.privileged must be unset or false."""
    return [
        Violation(f"{path}.securityContext.privileged", "privileged containers are not allowed")
        for path, c in containers(spec, base["spec"])
        if _sc(c).get("privileged")
    ]


def baseline_capabilities(meta, spec, base) -> list[Violation]:
    """Capabilities: only the baseline set may be added."""
    out = []
    for path, c in containers(spec, base["spec"]):
        for i, cap in enumerate((_sc(c).get("capabilities") or {}).get("add") or []):
            if cap not in BASELINE_CAPABILITIES:
                out.append(Violation(f"{path}.securityContext.capabilities.add[{i}]",
                                     f"capability {cap!r} may not be added"))
    return out


def baseline_host_path(meta, spec, base) -> list[Violation]:
    """HostPath volumes are forbidden."""
    return [
        Violation(f"{base['spec']}.volumes[{i}].hostPath", "hostPath volumes are not allowed")
        for i, v in enumerate(spec.get("volumes") or [])
        if isinstance(v, dict) and v.get("hostPath") is not None
    ]


def baseline_host_ports(meta, spec, base) -> list[Violation]:
    """Host ports: unset or 0."""
    out = []
    for path, c in containers(spec, base["spec"]):
        for i, port in enumerate(c.get("ports") or []):
            if isinstance(port, dict) and port.get("hostPort"):
                out.append(Violation(f"{path}.ports[{i}].hostPort", "host ports are not allowed"))
    return out


def baseline_apparmor(meta, spec, base) -> list[Violation]:
    """AppArmor: only RuntimeDefault or Localhost profiles (field and annotation)."""
    out = []
    t = (_sc(spec).get("appArmorProfile") or {}).get("type")
    if t is not None and t not in APPARMOR_TYPES:
        out.append(Violation(f"{base['spec']}.securityContext.appArmorProfile.type",
                             f"AppArmor profile {t!r} is not allowed"))
    for path, c in containers(spec, base["spec"]):
        t = (_sc(c).get("appArmorProfile") or {}).get("type")
        if t is not None and t not in APPARMOR_TYPES:
            out.append(Violation(f"{path}.securityContext.appArmorProfile.type",
                                 f"AppArmor profile {t!r} is not allowed"))
    for k, v in (meta.get("annotations") or {}).items():
        if k.startswith(APPARMOR_ANNOTATION) and not (
            v == "runtime/default" or str(v).startswith("localhost/")
        ):
            out.append(Violation(f"{base['meta']}.annotations.{k}",
                                 f"AppArmor profile {v!r} is not allowed"))
    return out


def baseline_selinux(meta, spec, base) -> list[Violation]:
    """SELinux: only the container types; user and role must be unset."""
    out = []
    targets = [(f"{base['spec']}.securityContext", _sc(spec))] + [
        (f"{path}.securityContext", _sc(c)) for path, c in containers(spec, base["spec"])
    ]
    for path, sc in targets:
        opts = sc.get("seLinuxOptions") or {}
        if opts.get("type", "") not in SELINUX_TYPES:
            out.append(Violation(f"{path}.seLinuxOptions.type",
                                 f"SELinux type {opts['type']!r} is not allowed"))
        for k in ("user", "role"):
            if opts.get(k):
                out.append(Violation(f"{path}.seLinuxOptions.{k}",
                                     f"setting the SELinux {k} is not allowed"))
    return out


def baseline_proc_mount(meta, spec, base) -> list[Violation]:
    """/proc mount type: Default or unset."""
    return [
        Violation(f"{path}.securityContext.procMount", "only the Default /proc mount is allowed")
        for path, c in containers(spec, base["spec"])
        if _sc(c).get("procMount") not in (None, "Default")
    ]


def baseline_seccomp(meta, spec, base) -> list[Violation]:
    """Seccomp: never Unconfined."""
    out = []
    if (_sc(spec).get("seccompProfile") or {}).get("type") == "Unconfined":
        out.append(Violation(f"{base['spec']}.securityContext.seccompProfile.type",
                             "seccomp profile Unconfined is not allowed"))
    for path, c in containers(spec, base["spec"]):
        if (_sc(c).get("seccompProfile") or {}).get("type") == "Unconfined":
            out.append(Violation(f"{path}.securityContext.seccompProfile.type",
                                 "seccomp profile Unconfined is not allowed"))
    return out


def baseline_sysctls(meta, spec, base) -> list[Violation]:
    """Sysctls: only the safe, namespaced set."""
    return [
        Violation(f"{base['spec']}.securityContext.sysctls[{i}].name",
                  f"sysctl {s.get('name')!r} is not in the safe set")
        for i, s in enumerate(_sc(spec).get("sysctls") or [])
        if isinstance(s, dict) and s.get("name") not in SAFE_SYSCTLS
    ]


def restricted_volume_types(meta, spec, base) -> list[Violation]:
    """Volume types: only the core, non-host types."""
    out = []
    for i, v in enumerate(spec.get("volumes") or []):
        if not isinstance(v, dict):
            continue
        kinds = [k for k in v if k != "name"]
        for k in kinds:
            if k not in RESTRICTED_VOLUME_TYPES and k != "hostPath":  # hostPath: baseline
                out.append(Violation(f"{base['spec']}.volumes[{i}].{k}",
                                     f"volume type {k!r} is not allowed at level restricted"))
    return out


def restricted_privilege_escalation(meta, spec, base) -> list[Violation]:
    """Privilege escalation: allowPrivilegeEscalation must be false in every container."""
    if _windows(spec):
        return []
    return [
        Violation(f"{path}.securityContext.allowPrivilegeEscalation", "must be false")
        for path, c in containers(spec, base["spec"])
        if _sc(c).get("allowPrivilegeEscalation") is not False
    ]


def restricted_run_as_non_root(meta, spec, base) -> list[Violation]:
    """Running as non-root: runAsNonRoot true on the Pod or on every container,
    and false nowhere."""
    out = []
    pod_value = _sc(spec).get("runAsNonRoot")
    if pod_value is False:
        out.append(Violation(f"{base['spec']}.securityContext.runAsNonRoot", "must be true"))
    for path, c in containers(spec, base["spec"]):
        v = _sc(c).get("runAsNonRoot")
        if v is False or (v is None and pod_value is not True):
            out.append(Violation(
                f"{path}.securityContext.runAsNonRoot",
                "must be true (here or in the Pod's securityContext)",
            ))
    return out


def restricted_run_as_user(meta, spec, base) -> list[Violation]:
    """Running as non-root user: runAsUser must not be 0."""
    out = []
    if _sc(spec).get("runAsUser") == 0:
        out.append(Violation(f"{base['spec']}.securityContext.runAsUser", "must not be 0"))
    for path, c in containers(spec, base["spec"]):
        if _sc(c).get("runAsUser") == 0:
            out.append(Violation(f"{path}.securityContext.runAsUser", "must not be 0"))
    return out


def restricted_seccomp(meta, spec, base) -> list[Violation]:
    """Seccomp: RuntimeDefault or Localhost on the Pod or on every container."""
    if _windows(spec):
        return []
    pod_type = (_sc(spec).get("seccompProfile") or {}).get("type")
    out = []
    for path, c in containers(spec, base["spec"]):
        t = (_sc(c).get("seccompProfile") or {}).get("type")
        if t is None and pod_type in SECCOMP_TYPES:
            continue
        if t not in SECCOMP_TYPES:
            out.append(Violation(
                f"{path}.securityContext.seccompProfile.type",
                "must be RuntimeDefault or Localhost (here or in the Pod's securityContext)",
            ))
    return out


def restricted_capabilities(meta, spec, base) -> list[Violation]:
    """Capabilities: drop ALL; add at most NET_BIND_SERVICE."""
    if _windows(spec):
        return []
    out = []
    for path, c in containers(spec, base["spec"]):
        caps = _sc(c).get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(Violation(f"{path}.securityContext.capabilities.drop",
                                 "must include ALL"))
        for i, cap in enumerate(caps.get("add") or []):
            if cap not in RESTRICTED_ADD_CAPABILITIES:
                out.append(Violation(f"{path}.securityContext.capabilities.add[{i}]",
                                     f"only NET_BIND_SERVICE may be added, not {cap!r}"))
    return out


def _windows(spec: Mapping[str, Any]) -> bool:
    """Some restricted controls do not apply to Windows Pods (spec.os.name)."""
    return (spec.get("os") or {}).get("name") == "windows"


BASELINE: tuple[Check, ...] = (
    baseline_host_process,
    baseline_host_namespaces,
    baseline_privileged,
    baseline_capabilities,
    baseline_host_path,
    baseline_host_ports,
    baseline_apparmor,
    baseline_selinux,
    baseline_proc_mount,
    baseline_seccomp,
    baseline_sysctls,
)
RESTRICTED: tuple[Check, ...] = BASELINE + (
    restricted_volume_types,
    restricted_privilege_escalation,
    restricted_run_as_non_root,
    restricted_run_as_user,
    restricted_seccomp,
    restricted_capabilities,
)
CONTROLS: dict[str, tuple[Check, ...]] = {
    "privileged": (),
    "baseline": BASELINE,
    "restricted": RESTRICTED,
}


def pss_violations(
    meta: Mapping[str, Any], spec: Mapping[str, Any], level: str, base: dict[str, str]
) -> list[Violation]:
    out: list[Violation] = []
    for check in CONTROLS[level]:
        out += check(meta, spec, base)
    if level == "restricted":
        # the baseline capability rule is subsumed by the stricter restricted one
        out = _dedupe(out)
    return out


def _dedupe(vs: list[Violation]) -> list[Violation]:
    seen: set[str] = set()
    out = []
    for v in vs:
        if v.path not in seen:
            seen.add(v.path)
            out.append(v)
    return out


# -- 4. fields gpuq owns ----------------------------------------------------------

OWNED_SPEC_FIELDS = {
    "schedulerName": "gpuq schedules its Pods itself",
    "nodeName": "gpuq binds the Pod to the node it placed it on",
    "priorityClassName": "gpuq sets it from the job's priority",
    "priority": "gpuq sets it from the job's priority",
}
OWNED_META_FIELDS = {
    "name": "gpuq names each replica's Pod",
    "generateName": "gpuq names each replica's Pod",
}


def owned_field_violations(
    meta: Mapping[str, Any], spec: Mapping[str, Any], policy: PodPolicy, base: dict[str, str]
) -> list[Violation]:
    out = []
    for k, why in OWNED_META_FIELDS.items():
        if k in meta:
            out.append(Violation(f"{base['meta']}.{k}", f"owned by gpuq ({why})"))
    for k in meta.get("labels") or {}:
        if k.startswith(OWNED_KEY_PREFIX) or k in OWNED_LABELS:
            out.append(Violation(f"{base['meta']}.labels.{k}", "label owned by gpuq"))
    for k in meta.get("annotations") or {}:
        if k.startswith(OWNED_KEY_PREFIX):
            out.append(Violation(f"{base['meta']}.annotations.{k}", "annotation owned by gpuq"))
    for k, why in OWNED_SPEC_FIELDS.items():
        if k in spec:
            out.append(Violation(f"{base['spec']}.{k}", f"owned by gpuq ({why})"))
    for i, t in enumerate(spec.get("tolerations") or []):
        if isinstance(t, dict) and t.get("key") in policy.install.tolerated_taints:
            out.append(Violation(
                f"{base['spec']}.tolerations[{i}]",
                f"gpuq adds the toleration for {t.get('key')!r} on the nodes it places on",
            ))
        elif (isinstance(t, dict) and not t.get("key") and t.get("operator") == "Exists"
              and policy.install.tolerated_taints):
            # Kubernetes: an empty key with Exists tolerates every taint, gpuq's included
            out.append(Violation(
                f"{base['spec']}.tolerations[{i}]",
                "a toleration without a key tolerates every taint, those gpuq tolerates "
                f"itself ({', '.join(policy.install.tolerated_taints)}) included; name the "
                "taint's key",
            ))
    for path, c in containers(spec, base["spec"]):
        res = c.get("resources") or {}
        for part in ("requests", "limits"):
            for name in res.get(part) or {}:
                if _is_accelerator(name, policy.gpu_resources):
                    out.append(Violation(
                        f"{path}.resources.{part}.{name}",
                        "accelerator resources come from the job's resources, not the template",
                    ))
        for i, e in enumerate(c.get("env") or []):
            if isinstance(e, dict) and str(e.get("name", "")).startswith(OWNED_ENV_PREFIX):
                out.append(Violation(f"{path}.env[{i}].name",
                                     f"{OWNED_ENV_PREFIX}* variables are set by gpuq"))
    return out


def _is_accelerator(name: str, gpu_resources: frozenset[str]) -> bool:
    """A GPU type's resource name, or any resource of the same vendor domain
    (MIG slices ``nvidia.com/mig-3g.40gb``, vGPU ``nvidia.com/gpumem``)."""
    if name in gpu_resources:
        return True
    if "/" not in name or name.startswith(STANDARD_RESOURCES):
        return False
    domain = name.split("/", 1)[0]
    return any(r.split("/", 1)[0] == domain for r in gpu_resources if "/" in r)


# -- 6. references stay inside the tenant's namespace ------------------------------------

_VOLUME_REFS = {"secret": "Secret", "configMap": "ConfigMap",
                "persistentVolumeClaim": "PersistentVolumeClaim", "csi": "CSI volume"}
# where the other volume sources name a Secret (cephfs, rbd, iscsi, flexVolume, scaleIO,
# storageos: secretRef; azureFile: secretName)
_SECRET_FIELDS = ("secretRef", "secretName")


def reference_violations(
    meta: Mapping[str, Any], spec: Mapping[str, Any], policy: PodPolicy, base: dict[str, str]
) -> list[Violation]:
    """Secrets, ConfigMaps, PVCs and CSI volumes a template names, unless the Pod runs
    in a namespace this team alone uses.

    gpuq's ServiceAccount creates every Pod, so the API server never checks the tenant's
    own rights: in a namespace two teams share, team nlp could mount recsys's Secret or
    PVC by name. Kubernetes resolves these names in the Pod's namespace only,
    so a namespace of the team's own confines them (the tenant boundary Kubernetes draws:
    kubernetes/kubernetes plugin/pkg/admission/serviceaccount -- a Pod's references
    resolve in its own namespace)."""
    named = meta.get("namespace")
    if named is not None and named not in policy.allowed_namespaces:
        return []  # refused already by its namespace
    ns = named or policy.default_namespace  # where the Pod is created without one
    if ns in policy.private_namespaces:
        return []
    why = (f"namespace {ns!r} is shared with other teams: a template may name "
           "{kind}s only in a namespace this team alone uses (the team's `namespaces`)")
    out = []
    sp = base["spec"]
    for i, v in enumerate(spec.get("volumes") or []):
        v = v or {}
        for key, kind in _VOLUME_REFS.items():
            if key in v:
                out.append(Violation(f"{sp}.volumes[{i}].{key}", why.format(kind=kind)))
        for key, source in v.items():  # cephfs, rbd, iscsi, flexVolume, azureFile, ...
            for name in _SECRET_FIELDS:
                if key not in _VOLUME_REFS and isinstance(source, dict) and name in source:
                    out.append(Violation(f"{sp}.volumes[{i}].{key}.{name}",
                                         why.format(kind="Secret")))
        claim = (((v.get("ephemeral") or {}).get("volumeClaimTemplate") or {}).get("spec")
                 or {})
        for name in ("dataSource", "dataSourceRef"):  # a clone of a PVC or a snapshot
            if claim.get(name):
                out.append(Violation(f"{sp}.volumes[{i}].ephemeral.volumeClaimTemplate.spec.{name}",
                                     why.format(kind="volume data source")))
        for j, src in enumerate(((v.get("projected") or {}).get("sources")) or []):
            for key in ("secret", "configMap"):
                if isinstance(src, dict) and key in src:
                    out.append(Violation(f"{sp}.volumes[{i}].projected.sources[{j}].{key}",
                                         why.format(kind=_VOLUME_REFS[key])))
    if spec.get("imagePullSecrets"):
        out.append(Violation(f"{sp}.imagePullSecrets", why.format(kind="Secret")))
    for path, c in containers(spec, sp):
        for k, e in enumerate(c.get("env") or []):
            ref = (e or {}).get("valueFrom") or {}
            for key, kind in (("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")):
                if key in ref:
                    out.append(Violation(f"{path}.env[{k}].valueFrom.{key}",
                                         why.format(kind=kind)))
        for k, e in enumerate(c.get("envFrom") or []):
            for key, kind in (("secretRef", "Secret"), ("configMapRef", "ConfigMap")):
                if key in (e or {}):
                    out.append(Violation(f"{path}.envFrom[{k}].{key}", why.format(kind=kind)))
    return out


# -- 5. GPUs only through gpuq ----------------------------------------------------------

# Variables the container runtimes read to pick devices: the NVIDIA container toolkit
# (NVIDIA_VISIBLE_DEVICES=all exposes every card of the node when the Pod runs under the
# nvidia runtime), CUDA, ROCm/HIP, Habana, Ascend, Intel Level Zero. A template naming one
# reached cards gpuq never accounted. Upstream: NVIDIA/nvidia-container-toolkit
# internal/config/image/cuda_image.go (envNVVisibleDevices), ROCm/k8s-device-plugin.
DEVICE_ENV = frozenset({
    "NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "NVIDIA_MIG_CONFIG_DEVICES",
    "NVIDIA_MIG_MONITOR_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "HABANA_VISIBLE_DEVICES",
    "HABANA_VISIBLE_MODULES", "ASCEND_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES",
    "ZE_AFFINITY_MASK", "NEURON_RT_VISIBLE_CORES",
})


# what gpuq itself sets on a container the device plugin gives no card (the Pod at bind)
OWN_DEVICE_ENV = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}


def device_violations(
    meta: Mapping[str, Any], spec: Mapping[str, Any], policy: PodPolicy, base: dict[str, str],
    *, template: bool,
) -> list[Violation]:
    """Every way a template could reach a device around gpuq's accounting: device
    env vars, a RuntimeClass outside the install's allowlist, DRA claims, extended
    resources of vendors no GPU type configures (gpuq's own are refused as owned), and
    a projected ServiceAccount token while the team may not mount one. At bind
    (``template=False``) the Pod's resources are gpuq's own and are not re-read."""
    out = []
    rc = spec.get("runtimeClassName")
    if rc is not None and rc not in policy.install.runtime_classes:
        allowed = ", ".join(policy.install.runtime_classes) or "none"
        out.append(Violation(f"{base['spec']}.runtimeClassName",
                             f"runtime class {rc!r} is not allowed (allowed: {allowed})"))
    if spec.get("resourceClaims"):
        out.append(Violation(f"{base['spec']}.resourceClaims",
                             "devices come from the job's resources, not DRA claims"))
    for path, c in containers(spec, base["spec"]):
        for i, e in enumerate(c.get("env") or []):
            if not template and e == OWN_DEVICE_ENV:
                continue  # gpuq's own "no device" on a container without a card (k8s_pods)
            if isinstance(e, dict) and str(e.get("name", "")) in DEVICE_ENV:
                out.append(Violation(f"{path}.env[{i}].name",
                                     f"{e['name']} selects devices; gpuq assigns them"))
        res = c.get("resources") or {}
        if res.get("claims"):
            out.append(Violation(f"{path}.resources.claims",
                                 "devices come from the job's resources, not DRA claims"))
        if not template:
            continue
        for part in ("requests", "limits"):
            for name in res.get(part) or {}:
                if "/" in name and not name.startswith(STANDARD_RESOURCES) and (
                    not _is_accelerator(name, policy.gpu_resources)
                ) and name not in policy.install.extended_resources:
                    out.append(Violation(
                        f"{path}.resources.{part}.{name}",
                        "extended (device) resources are not allowed in a template; "
                        "only the GPU types gpuq is configured with, through the job's resources",
                    ))
    if not policy.automount_token:
        for i, v in enumerate(spec.get("volumes") or []):
            sources = ((v or {}).get("projected") or {}).get("sources") or []
            for j, src in enumerate(sources):
                if isinstance(src, dict) and "serviceAccountToken" in src:
                    out.append(Violation(
                        f"{base['spec']}.volumes[{i}].projected.sources[{j}].serviceAccountToken",
                        "this team may not mount a service account token",
                    ))
    return out


def describe(violations: list[Violation], limit: int = 3) -> str:
    """'a: ...; b: ...' for a 422 ``detail`` (the first few, and how many more)."""
    head = "; ".join(str(v) for v in violations[:limit])
    more = len(violations) - limit
    return head + (f" (and {more} more)" if more > 0 else "")
