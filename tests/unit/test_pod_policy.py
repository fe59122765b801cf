"""The Pod policy of a team's templates (app/domain/pod_policy.py), rule by rule.

Every Pod Security Standards control (baseline and restricted) is tried with
an accepted and a refused template; then the namespace and ServiceAccount
allowlists, the fields gpuq owns, and schema errors named by path.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable

import pytest

from app.domain.pod_policy import (
    BASELINE,
    RESTRICTED,
    InstallPolicy,
    PodPolicy,
    check_pod,
    check_template,
)

SC_OK = {
    "runAsNonRoot": True,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def restricted_ok() -> dict:
    """A template that meets the restricted level (what teams get by default)."""
    return {
        "metadata": {"labels": {"app": "train"}},
        "spec": {
            "containers": [
                {"name": "train", "image": "trainer:1", "securityContext": copy.deepcopy(SC_OK)}
            ],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        },
    }


def policy(level: str = "restricted", **kw) -> PodPolicy:
    # a team with the job namespace to itself (references allowed there); the shared
    # case is tests/unit/test_pod_policy_references.py
    pol = PodPolicy(level=level, **kw)
    if "private_namespaces" in kw:
        return pol
    return dataclasses.replace(pol, private_namespaces=frozenset(pol.allowed_namespaces))


def paths(template: dict, pol: PodPolicy | None = None) -> list[str]:
    return [v.path for v in check_template(template, pol or policy())]


def c0(t: dict) -> dict:
    return t["spec"]["containers"][0]


def sc0(t: dict) -> dict:
    return c0(t)["securityContext"]


Mutation = Callable[[dict], object]

# (control, refused mutation, the path named, accepted mutation of the same field)
BASELINE_CASES: list[tuple[str, Mutation, str, Mutation]] = [
    ("host_process",
     lambda t: sc0(t).update(windowsOptions={"hostProcess": True}),
     "containers[0].securityContext.windowsOptions.hostProcess",
     lambda t: sc0(t).update(windowsOptions={"hostProcess": False})),
    ("host_namespaces",
     lambda t: t["spec"].update(hostNetwork=True),
     "spec.hostNetwork",
     lambda t: t["spec"].update(hostNetwork=False, hostPID=False, hostIPC=False)),
    ("host_pid",
     lambda t: t["spec"].update(hostPID=True),
     "spec.hostPID",
     lambda t: t["spec"].update(hostPID=False)),
    ("privileged",
     lambda t: sc0(t).update(privileged=True),
     "containers[0].securityContext.privileged",
     lambda t: sc0(t).update(privileged=False)),
    ("host_path",
     lambda t: t["spec"]["volumes"].append({"name": "root", "hostPath": {"path": "/"}}),
     "spec.volumes[1].hostPath",
     lambda t: t["spec"]["volumes"].append({"name": "tmp", "emptyDir": {}})),
    ("host_ports",
     lambda t: c0(t).update(ports=[{"containerPort": 80, "hostPort": 80}]),
     "containers[0].ports[0].hostPort",
     lambda t: c0(t).update(ports=[{"containerPort": 80, "hostPort": 0}])),
    ("apparmor",
     lambda t: sc0(t).update(appArmorProfile={"type": "Unconfined"}),
     "containers[0].securityContext.appArmorProfile.type",
     lambda t: sc0(t).update(appArmorProfile={"type": "RuntimeDefault"})),
    ("apparmor_annotation",
     lambda t: t["metadata"].update(
         annotations={"container.apparmor.security.beta.kubernetes.io/train": "unconfined"}),
     "metadata.annotations.container.apparmor.security.beta.kubernetes.io/train",
     lambda t: t["metadata"].update(
         annotations={"container.apparmor.security.beta.kubernetes.io/train": "runtime/default"})),
    ("selinux_type",
     lambda t: sc0(t).update(seLinuxOptions={"type": "spc_t"}),
     "containers[0].securityContext.seLinuxOptions.type",
     lambda t: sc0(t).update(seLinuxOptions={"type": "container_t"})),
    ("selinux_user",
     lambda t: t["spec"].update(securityContext={"seLinuxOptions": {"user": "root"}}),
     "spec.securityContext.seLinuxOptions.user",
     lambda t: t["spec"].update(securityContext={"seLinuxOptions": {"level": "s0:c1"}})),
    ("proc_mount",
     lambda t: sc0(t).update(procMount="Unmasked"),
     "containers[0].securityContext.procMount",
     lambda t: sc0(t).update(procMount="Default")),
    ("seccomp_unconfined",
     lambda t: t["spec"].update(securityContext={"seccompProfile": {"type": "Unconfined"}}),
     "spec.securityContext.seccompProfile.type",
     lambda t: t["spec"].update(securityContext={"seccompProfile": {"type": "RuntimeDefault"}})),
    ("sysctls",
     lambda t: t["spec"].update(
         securityContext={"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}),
     "spec.securityContext.sysctls[0].name",
     lambda t: t["spec"].update(
         securityContext={"sysctls": [{"name": "net.ipv4.tcp_syncookies", "value": "1"}]})),
]

# init containers are checked like the others
BASELINE_CASES.append(
    ("privileged_init",
     lambda t: t["spec"].update(initContainers=[
         {"name": "init", "image": "x", "securityContext": {**SC_OK, "privileged": True}}]),
     "initContainers[0].securityContext.privileged",
     lambda t: t["spec"].update(initContainers=[
         {"name": "init", "image": "x", "securityContext": dict(SC_OK)}])),
)

RESTRICTED_CASES: list[tuple[str, Mutation, str, Mutation]] = [
    ("volume_types",
     lambda t: t["spec"]["volumes"].append({"name": "n", "nfs": {"server": "s", "path": "/"}}),
     "spec.volumes[1].nfs",
     lambda t: t["spec"]["volumes"].append({"name": "c", "configMap": {"name": "cfg"}})),
    ("privilege_escalation",
     lambda t: sc0(t).pop("allowPrivilegeEscalation"),
     "containers[0].securityContext.allowPrivilegeEscalation",
     lambda t: sc0(t).update(allowPrivilegeEscalation=False)),
    ("run_as_non_root",
     lambda t: sc0(t).update(runAsNonRoot=False),
     "containers[0].securityContext.runAsNonRoot",
     # set on the Pod instead of the container
     lambda t: (sc0(t).pop("runAsNonRoot"),
                t["spec"].update(securityContext={"runAsNonRoot": True}))),
    ("run_as_user",
     lambda t: sc0(t).update(runAsUser=0),
     "containers[0].securityContext.runAsUser",
     lambda t: sc0(t).update(runAsUser=1000)),
    ("seccomp",
     lambda t: sc0(t).pop("seccompProfile"),
     "containers[0].securityContext.seccompProfile.type",
     lambda t: (sc0(t).pop("seccompProfile"),
                t["spec"].update(securityContext={"seccompProfile": {"type": "Localhost",
                                                                     "localhostProfile": "p"}}))),
    ("capabilities_drop",
     lambda t: sc0(t).update(capabilities={}),
     "containers[0].securityContext.capabilities.drop",
     lambda t: sc0(t).update(capabilities={"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]})),
    ("capabilities_add",
     lambda t: sc0(t).update(capabilities={"drop": ["ALL"], "add": ["CHOWN"]}),
     "containers[0].securityContext.capabilities.add[0]",
     lambda t: sc0(t).update(capabilities={"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]})),
]


def _apply(m: Mutation) -> dict:
    t = restricted_ok()
    m(t)
    return t


def test_the_compliant_template_passes_every_level() -> None:
    for level in ("restricted", "baseline", "privileged"):
        assert check_template(restricted_ok(), policy(level)) == []


@pytest.mark.parametrize("level", ["baseline", "restricted"])
@pytest.mark.parametrize("case", BASELINE_CASES, ids=lambda c: c[0])
def test_baseline_controls(case, level) -> None:
    _name, refuse, path, accept = case
    assert any(p.endswith(path) for p in paths(_apply(refuse), policy(level))), path
    assert paths(_apply(accept), policy(level)) == []
    # privileged: anything goes
    assert paths(_apply(refuse), policy("privileged")) == []


@pytest.mark.parametrize("case", RESTRICTED_CASES, ids=lambda c: c[0])
def test_restricted_controls(case) -> None:
    _name, refuse, path, accept = case
    assert any(p.endswith(path) for p in paths(_apply(refuse))), path
    assert paths(_apply(accept)) == []
    # baseline does not ask for these
    assert paths(_apply(refuse), policy("baseline")) == []


def test_baseline_capabilities_allowed_set() -> None:
    t = restricted_ok()
    sc0(t)["capabilities"] = {"add": ["CHOWN", "NET_BIND_SERVICE"]}
    assert paths(t, policy("baseline")) == []
    sc0(t)["capabilities"] = {"add": ["SYS_ADMIN"]}
    assert paths(t, policy("baseline")) == [
        "pod_template.spec.containers[0].securityContext.capabilities.add[0]"
    ]


def test_every_control_of_the_document_is_covered() -> None:
    """One test case per control function (a new control needs a new case)."""
    covered = {c[0].split("_init")[0] for c in BASELINE_CASES + RESTRICTED_CASES}
    names = {f.__name__.split("_", 1)[1] for f in BASELINE + RESTRICTED}
    for n in names:
        assert any(c.startswith(n.split("_")[0]) for c in covered), n


def test_a_bare_container_is_refused_by_restricted_and_accepted_by_baseline() -> None:
    t = {"spec": {"containers": [{"name": "main", "image": "x"}]}}
    got = paths(t)
    assert "pod_template.spec.containers[0].securityContext.runAsNonRoot" in got
    assert "pod_template.spec.containers[0].securityContext.capabilities.drop" in got
    assert paths(t, policy("baseline")) == []


def test_bare_podspec_paths() -> None:
    t = {"containers": [{"name": "main", "image": "x", "securityContext": {"privileged": True}}]}
    got = paths(t, policy("baseline"))
    assert got == ["pod_template.containers[0].securityContext.privileged"]


# -- namespaces, service accounts, token -----------------------------------------


def test_namespace_allowlist_defaults_to_the_install_namespace() -> None:
    install = InstallPolicy(job_namespace="gpuq-jobs")
    t = restricted_ok()
    t["metadata"]["namespace"] = "gpuq-jobs"
    assert paths(t, policy(install=install)) == []
    t["metadata"]["namespace"] = "kube-system"
    assert paths(t, policy(install=install)) == ["pod_template.metadata.namespace"]
    pol = policy(install=install, namespaces=("nlp", "nlp-batch"))
    assert paths(t, pol) == ["pod_template.metadata.namespace"]
    t["metadata"]["namespace"] = "nlp-batch"
    assert paths(t, pol) == []
    t["metadata"]["namespace"] = "gpuq-jobs"  # a team with its own list loses the default
    assert paths(t, pol) == ["pod_template.metadata.namespace"]


def test_service_account_allowlist() -> None:
    t = restricted_ok()
    assert paths(t) == []  # unset = default, allowed by default
    t["spec"]["serviceAccountName"] = "default"
    assert paths(t) == []
    t["spec"]["serviceAccountName"] = "cluster-admin-sa"
    assert paths(t) == ["pod_template.spec.serviceAccountName"]
    assert paths(t, policy(service_accounts=("default", "cluster-admin-sa"))) == []
    t["spec"].pop("serviceAccountName")
    t["spec"]["serviceAccount"] = "builder"  # the deprecated alias is checked too
    assert paths(t) == ["pod_template.spec.serviceAccount"]
    t["spec"].pop("serviceAccount")
    # a team whose list leaves out "default" must name one
    assert paths(t, policy(service_accounts=("trainer",))) == [
        "pod_template.spec.serviceAccountName"
    ]


def test_service_account_token_off_unless_allowed() -> None:
    t = restricted_ok()
    t["spec"]["automountServiceAccountToken"] = True
    assert paths(t) == ["pod_template.spec.automountServiceAccountToken"]
    assert paths(t, policy(automount_token=True)) == []
    t["spec"]["automountServiceAccountToken"] = False
    assert paths(t) == []


# -- fields gpuq owns ------------------------------------------------------------------

OWNED: list[tuple[Mutation, str]] = [
    (lambda t: t["spec"].update(schedulerName="default-scheduler"), "spec.schedulerName"),
    (lambda t: t["spec"].update(nodeName="a100-0"), "spec.nodeName"),
    (lambda t: t["spec"].update(priorityClassName="system-node-critical"),
     "spec.priorityClassName"),
    (lambda t: t["spec"].update(priority=1000000), "spec.priority"),
    (lambda t: t["metadata"].update(name="mine"), "metadata.name"),
    (lambda t: t["metadata"]["labels"].update({"gpuq.io/team": "other"}),
     "metadata.labels.gpuq.io/team"),
    (lambda t: t["metadata"]["labels"].update({"app.kubernetes.io/managed-by": "me"}),
     "metadata.labels.app.kubernetes.io/managed-by"),
    (lambda t: t["metadata"].update(annotations={"gpuq.io/devices": "0,1,2,3"}),
     "metadata.annotations.gpuq.io/devices"),
    (lambda t: c0(t).update(resources={"limits": {"nvidia.com/gpu": "8"}}),
     "containers[0].resources.limits.nvidia.com/gpu"),
    (lambda t: c0(t).update(resources={"requests": {"nvidia.com/mig-3g.40gb": "1"}}),
     "containers[0].resources.requests.nvidia.com/mig-3g.40gb"),
    (lambda t: t["spec"].update(
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]),
     "spec.tolerations[0]"),
    # no key: tolerates every taint, nvidia.com/gpu included (was accepted)
    (lambda t: t["spec"].update(tolerations=[{"key": "team", "operator": "Exists"},
                                             {"operator": "Exists"}]),
     "spec.tolerations[1]"),
    (lambda t: t["spec"].update(tolerations=[{"operator": "Exists", "effect": "NoSchedule"}]),
     "spec.tolerations[0]"),
    (lambda t: c0(t).update(env=[{"name": "GPUQ_RANK", "value": "0"}]),
     "containers[0].env[0].name"),
]


@pytest.mark.parametrize("case", OWNED, ids=lambda c: c[1] if isinstance(c, str) else None)
def test_owned_fields_are_refused_at_every_level(case) -> None:
    mutate, path = case
    for level in ("restricted", "privileged"):
        got = paths(_apply(mutate), policy(level))
        assert any(p.endswith(path) for p in got), (path, got)


def test_non_owned_neighbours_are_accepted() -> None:
    t = restricted_ok()
    c0(t)["resources"] = {"limits": {"cpu": "4", "memory": "8Gi"}}
    c0(t)["env"] = [{"name": "MY_VAR", "value": "1"}]
    t["spec"]["tolerations"] = [{"key": "team", "operator": "Exists"}]
    t["metadata"]["labels"]["example.com/owner"] = "nlp"
    assert paths(t) == []


def test_other_vendors_resources_are_owned_too() -> None:
    t = restricted_ok()
    c0(t)["resources"] = {"limits": {"huawei.com/Ascend910": "1"}}
    pol = policy(gpu_resources=frozenset({"nvidia.com/gpu", "huawei.com/Ascend910"}))
    assert paths(t, pol) == [
        "pod_template.spec.containers[0].resources.limits.huawei.com/Ascend910"
    ]


# -- schema ---------------------------------------------------------------------------


def test_schema_errors_are_named_by_path() -> None:
    assert paths({"spec": {"containers": "oops"}}) == ["pod_template.spec.containers"]
    t = restricted_ok()
    sc0(t)["privileged"] = "yes"
    assert paths(t) == ["pod_template.spec.containers[0].securityContext.privileged"]
    t = restricted_ok()
    t["spec"]["hostNetwrok"] = True  # a typo is not silently ignored (strict schema)
    got = check_template(t, policy())
    assert [v.path for v in got] == ["pod_template.spec"] and "hostNetwrok" in got[0].message
    t = restricted_ok()
    del c0(t)["name"]
    got = check_template(t, policy())
    assert [v.path for v in got] == ["pod_template.spec.containers[0]"]
    assert "name" in got[0].message


def test_labels_and_annotations_as_the_api_server_checks_them() -> None:
    """The schema types them as plain strings: these were accepted at submit, and the
    API server refused the Pod at bind."""
    def meta_paths(labels=None, annotations=None) -> list[str]:
        t = restricted_ok()
        t["metadata"]["labels"].update(labels or {})
        t["metadata"]["annotations"] = annotations or {}
        return paths(t)

    assert meta_paths({"bad key!": "x"}) == ["pod_template.metadata.labels.bad key!"]
    assert meta_paths({"example.com/team": "x" * 64}) == [
        "pod_template.metadata.labels.example.com/team"]
    assert meta_paths({"tier": "a b"}) == ["pod_template.metadata.labels.tier"]
    assert meta_paths({"tier": "x\n"}) == ["pod_template.metadata.labels.tier"]
    assert meta_paths({"/tier": "x"}) == ["pod_template.metadata.labels./tier"]
    assert meta_paths(annotations={"Not A Key": "x"}) == [
        "pod_template.metadata.annotations.Not A Key"]
    assert meta_paths(annotations={"example.com/notes": "x" * 300_000}) == [
        "pod_template.metadata.annotations"]
    # what the API server takes
    assert meta_paths({"example.com/team": "nlp", "tier": "", "A.b_c-1": "Z.9"},
                      {"example.com/notes": "free text: any value, spaces included"}) == []


def test_schema_of_a_bare_podspec_and_an_empty_template() -> None:
    assert paths({"containers": [{"name": 1}]}) == ["pod_template.containers[0].name"]
    assert check_template({}, policy()) == []
    # no containers: gpuq's own default container runs (schema still checks the rest)
    assert paths({"spec": {"restartPolicy": 5}}) == ["pod_template.spec.restartPolicy"]
    assert paths({"spec": {"restartPolicy": "Never"}}) == []


def test_check_pod_rechecks_the_finished_pod() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", **restricted_ok()}
    pod["metadata"]["namespace"] = "gpuq-jobs"
    pod["spec"]["schedulerName"] = "gpuq"  # gpuq's own fields are fine on its Pod
    assert check_pod(pod, policy()) == []
    pod["metadata"]["namespace"] = "kube-system"
    sc0(pod)["privileged"] = True
    assert {v.path for v in check_pod(pod, policy())} == {
        "metadata.namespace", "spec.containers[0].securityContext.privileged"}
