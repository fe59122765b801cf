"""Every manifest under k8s/ against the Kubernetes OpenAPI schemas (offline,
kubernetes-validate), plus the properties the install relies on; and the
kustomization built with `kubectl kustomize` when kubectl is installed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from app.cluster.k8s_settings import KubeSettings
from app.domain.config import DEFAULT_PRIORITY_CLASSES, load_config_text
from app.domain.pod_policy import PodPolicy, check_template

K8S = Path(__file__).resolve().parents[2] / "k8s"
# Oldest and newest Kubernetes versions gpuq's manifests must be valid for.
VERSIONS = ["1.27.0", kubernetes_validate.utils.latest_version()]
# k8s/grafana belongs to the observability piece (CRDs such as ServiceMonitor
# have no built-in schema); it is checked by its own tests.
SKIP_DIRS = {"grafana"}


# k8s/config.yaml is the gpuq config file the base turns into a ConfigMap, not an object
NOT_OBJECTS = {"kustomization.yaml", "config.yaml"}
CONFIG = K8S / "config.yaml"


def manifest_files() -> list[Path]:
    return sorted(
        p
        for p in K8S.rglob("*.yaml")
        if p.name not in NOT_OBJECTS and not SKIP_DIRS & set(p.relative_to(K8S).parts)
    )


def docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def all_objects() -> dict[tuple[str, str], dict]:
    """The base's objects by (kind, name) (examples and overlays left out)."""
    out = {}
    for p in manifest_files():
        if {"examples", "overlays"} & set(p.relative_to(K8S).parts):
            continue
        for d in docs(p):
            out[(d["kind"], d["metadata"]["name"])] = d
    return out


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path", manifest_files(), ids=lambda p: str(p.relative_to(K8S)))
def test_manifest_is_valid_against_the_openapi_schema(path: Path, version: str) -> None:
    if path.name == "job-pod-template.yaml":
        # a gpuq job spec, not a Kubernetes object: its pod_template must be valid,
        # and accepted by the default team Pod policy (restricted)
        spec = yaml.safe_load(path.read_text())
        pod = {"apiVersion": "v1", "kind": "Pod", **spec["pod_template"]}
        pod["metadata"] = {**pod.get("metadata", {}), "name": "x"}
        kubernetes_validate.validate(pod, version, strict=True)
        assert check_template(spec["pod_template"], PodPolicy()) == []
        return
    for d in docs(path):
        if d["kind"] == "JobSet":
            # a CRD: no built-in schema; its replicated jobs are batch/v1 Jobs, checked as such
            for rj in d["spec"]["replicatedJobs"]:
                kubernetes_validate.validate(
                    {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": rj["name"]},
                     "spec": rj["template"]["spec"]}, version, strict=True)
            continue
        if d["kind"] == "PyTorchJob":
            # a CRD too: each replica type's template is a Pod template
            for rs in d["spec"]["pytorchReplicaSpecs"].values():
                kubernetes_validate.validate(
                    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
                     "spec": rs["template"]["spec"]}, version, strict=True)
            continue
        kubernetes_validate.validate(d, version, strict=True)


def test_invalid_manifest_is_rejected() -> None:
    """The validator does catch mistakes (so the test above can fail)."""
    bad = docs(K8S / "deployment-api.yaml")[0]
    bad["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, VERSIONS[-1], strict=True)


def test_kustomization_lists_existing_files() -> None:
    for k in K8S.rglob("kustomization.yaml"):
        if SKIP_DIRS & set(k.relative_to(K8S).parts):
            continue
        for r in yaml.safe_load(k.read_text()).get("resources", []):
            assert (k.parent / r).exists(), f"{k}: {r} missing"
    listed = set(yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"])
    top = {p.name for p in K8S.glob("*.yaml") if p.name not in NOT_OBJECTS}
    assert listed == top, "every top-level manifest is part of the base"


def _rules(role: dict) -> set[tuple[str, str]]:
    assert all(r["apiGroups"] == [""] for r in role["rules"])
    return {(res, verb) for r in role["rules"] for res in r["resources"] for verb in r["verbs"]}


GPUQ_SA = [{"kind": "ServiceAccount", "name": "gpuq", "namespace": "gpuq"}]
JOB_RIGHTS = {
    ("pods", "create"), ("pods", "delete"), ("pods", "get"), ("pods", "list"),
    ("pods", "watch"), ("pods/binding", "create"), ("pods/eviction", "create"),
    ("pods", "patch"),  # gpuq's outcome finalizer comes off (gpuq.io/outcome)
    # the headless Service of a multi-replica job (rendezvous hostnames)
    ("services", "create"), ("services", "delete"), ("services", "get"), ("services", "list"),
    ("events", "create"),  # Events on the job Pods
}


def test_rbac_is_least_privilege() -> None:
    objs = all_objects()
    # cluster-wide: read nodes, pods and services; no write to anything
    assert _rules(objs[("ClusterRole", "gpuq-scheduler")]) == {
        ("nodes", "get"), ("nodes", "list"), ("nodes", "watch"),
        ("pods", "get"), ("pods", "list"), ("pods", "watch"),
        ("services", "get"), ("services", "list"), ("services", "watch"),
    }
    # Node events: created in `default` only (namespaced, not cluster-wide)
    node_events = objs[("Role", "gpuq-node-events")]
    assert node_events["metadata"]["namespace"] == "default"
    assert _rules(node_events) == {("events", "create")}
    assert objs[("RoleBinding", "gpuq-node-events")]["subjects"] == GPUQ_SA
    assert objs[("ClusterRoleBinding", "gpuq-scheduler")]["subjects"] == GPUQ_SA
    # Pods/Binding/Eviction rights only in the job namespace
    role = objs[("Role", "gpuq-jobs")]
    assert role["metadata"]["namespace"] == "gpuq-jobs"
    assert _rules(role) == JOB_RIGHTS
    binding = objs[("RoleBinding", "gpuq-jobs")]
    assert binding["metadata"]["namespace"] == "gpuq-jobs"
    assert binding["roleRef"]["name"] == "gpuq-jobs" and binding["subjects"] == GPUQ_SA
    # nothing grants secrets, configmaps or a wildcard
    for (kind, _name), o in objs.items():
        if kind in ("ClusterRole", "Role"):
            for r in o["rules"]:
                assert "*" not in r["verbs"] and "*" not in r["resources"]
                assert not {"secrets", "configmaps"} & set(r["resources"])


def test_overlay_adds_the_same_rights_in_another_namespace() -> None:
    overlay = K8S / "overlays" / "extra-job-namespace"
    objs = {(d["kind"], d["metadata"]["name"]): d
            for p in sorted(overlay.glob("*.yaml")) if p.name != "kustomization.yaml"
            for d in docs(p)}
    ns = objs[("Namespace", "nlp-jobs")]
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    role = objs[("Role", "gpuq-jobs")]
    assert role["metadata"]["namespace"] == "nlp-jobs" and _rules(role) == JOB_RIGHTS
    assert objs[("RoleBinding", "gpuq-jobs")]["subjects"] == GPUQ_SA


def test_job_namespace_enforces_pod_security() -> None:
    labels = all_objects()[("Namespace", "gpuq-jobs")]["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert KubeSettings().namespace == "gpuq-jobs"


def test_no_secret_in_any_manifest() -> None:
    """No default credentials ship: the install steps create the Secrets."""
    for p in K8S.rglob("*.yaml"):
        for d in docs(p):
            assert not (isinstance(d, dict) and d.get("kind") == "Secret"), p
        assert "change-me" not in p.read_text(), p


def test_deployments_replicas_probes_non_root() -> None:
    objs = all_objects()
    for name, args in (("gpuq-api", ["api"]), ("gpuq-dispatcher", ["serve"])):
        d = objs[("Deployment", name)]
        pod = d["spec"]["template"]["spec"]
        c = pod["containers"][0]
        assert d["spec"]["replicas"] == 2 and c["args"] == args
        assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert pod["securityContext"]["runAsNonRoot"] is True
        env = {e["name"]: e for e in c["env"]}
        assert env["DATABASE_URL_FILE"]["value"] == "/etc/gpuq/secrets/database-url"
    disp = objs[("Deployment", "gpuq-dispatcher")]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in disp["containers"][0]["env"]}
    assert env["GPUQ_CLUSTER"] == "kubernetes"
    api = objs[("Deployment", "gpuq-api")]["spec"]["template"]["spec"]
    assert api["automountServiceAccountToken"] is False  # the API never calls Kubernetes
    job = objs[("Job", "gpuq-db-upgrade")]["spec"]["template"]["spec"]
    assert job["containers"][0]["args"] == ["db", "upgrade"]
    assert job["automountServiceAccountToken"] is False
    svc = objs[("Service", "gpuq")]
    assert svc["spec"]["selector"]["app.kubernetes.io/component"] == "api"


def test_priority_classes_match_what_pods_ask_for() -> None:
    prefix = KubeSettings().priority_class_prefix
    objs = all_objects()
    values = []
    for p in DEFAULT_PRIORITY_CLASSES:
        pc = objs[("PriorityClass", prefix + p.name.lower())]
        values.append(pc["value"])
        assert pc["preemptionPolicy"] == "Never"  # gpuq preempts, not kube-scheduler
    assert values == sorted(values, reverse=True)


def test_configmap_is_a_valid_gpuq_config() -> None:
    cfg = load_config_text(CONFIG.read_text())
    assert {t.name for t in cfg.gpu_types} >= {"a100-80g", "v100-16g", "rtx4090-24g"}
    assert cfg.nodes == []  # nodes come from the cluster


def test_node_label_examples_are_read_by_node_sync() -> None:
    from app.cluster.k8s_nodes import node_view

    types = load_config_text(CONFIG.read_text()).gpu_types
    got = {}
    for n in docs(K8S / "examples" / "node-labels.yaml"):
        n["status"] = {"allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"},
                       "conditions": [{"type": "Ready", "status": "True"}]}
        v = node_view(n, [], types, KubeSettings())
        got[n["metadata"]["name"]] = (v.node.gpu_type, v.node.rack, v.node.network)
    assert got == {
        "gpu-a100-01": ("a100-80g", "r1", "ib"),
        "gpu-v100-01": ("v100-16g", "rack-2", "roce"),
        "gpu-4090-01": ("rtx4090-24g", "r3", "eth"),
    }


KUBECTL = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")


def kustomize(target: Path) -> list[dict]:
    out = subprocess.run(
        ["kubectl", "kustomize", str(target)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def by_kind(built: list[dict]) -> dict[tuple[str, str], dict]:
    return {(d["kind"], d["metadata"]["name"]): d for d in built}


def generated(target: Path) -> int:
    k = yaml.safe_load((target / "kustomization.yaml").read_text())
    return len(k.get("configMapGenerator", []))


@KUBECTL
@pytest.mark.parametrize("target", ["", "migrate", "postgres", "overlays/extra-job-namespace",
                                    "overlays/ingress-tls", "overlays/rdma-jobs"])
def test_kubectl_kustomize_builds(target: str) -> None:
    built = kustomize(K8S / target)
    expected = generated(K8S / target) + sum(
        len(docs(K8S / target / r))
        for r in yaml.safe_load((K8S / target / "kustomization.yaml").read_text())["resources"]
    )
    assert len(built) == expected
    for d in built:
        kubernetes_validate.validate(d, VERSIONS[-1], strict=True)
    if target in ("", "migrate"):
        images = {c["image"] for d in built if d["kind"] in ("Deployment", "Job")
                  for c in d["spec"]["template"]["spec"]["containers"]}
        assert images == {"gpuq:0.1.0"}  # one pin (k8s/image) for the Job and the pods


@KUBECTL
def test_migration_job_is_applied_apart_from_the_rollout() -> None:
    """The Job runs (and is waited for) before the Deployments change
    (docs/upgrading.md): it is not in the base, and the base holds no Job."""
    base = kustomize(K8S)
    assert not [d for d in base if d["kind"] == "Job"]
    (job,) = kustomize(K8S / "migrate")
    assert job["kind"] == "Job" and job["metadata"]["namespace"] == "gpuq"
    pod = job["spec"]["template"]["spec"]
    # runs before k8s/ made the gpuq ServiceAccount on a first install
    assert "serviceAccountName" not in pod and pod["automountServiceAccountToken"] is False


def _config_refs(built: list[dict]) -> dict[str, set[str]]:
    return {
        d["metadata"]["name"]: {v["configMap"]["name"]
                                for v in d["spec"]["template"]["spec"]["volumes"]
                                if "configMap" in v}
        for d in built if d["kind"] == "Deployment"
    }


@KUBECTL
def test_a_config_change_rolls_the_pods(tmp_path: Path) -> None:
    """The ConfigMap is generated with a hash of the config in its name, and the
    Deployments mount that name: editing config.yaml changes their pod template
    (a rollout); an unchanged file builds the same template (no rollout)."""
    before = kustomize(K8S)
    (cm,) = [d for d in before if d["kind"] == "ConfigMap"]
    assert cm["metadata"]["name"].startswith("gpuq-config-")
    assert load_config_text(cm["data"]["config.yaml"]) == load_config_text(CONFIG.read_text())
    refs = _config_refs(before)
    assert refs == {"gpuq-api": {cm["metadata"]["name"]},
                    "gpuq-dispatcher": {cm["metadata"]["name"]}}

    copy = tmp_path / "k8s"
    shutil.copytree(K8S, copy)
    assert _config_refs(kustomize(copy)) == refs  # same content, same name
    (copy / "config.yaml").write_text(
        CONFIG.read_text().replace("quota_units: 200", "quota_units: 250")
    )
    after = by_kind(kustomize(copy))
    new_refs = _config_refs(list(after.values()))
    assert new_refs["gpuq-api"].isdisjoint(refs["gpuq-api"])
    for name in ("gpuq-api", "gpuq-dispatcher"):
        old_t = by_kind(before)[("Deployment", name)]["spec"]["template"]
        assert after[("Deployment", name)]["spec"]["template"] != old_t


def _selects(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@KUBECTL
@pytest.mark.parametrize(
    ("target", "release"),
    [("grafana", "kube-prometheus-stack"), ("overlays/prometheus-release", "monitoring")],
)
def test_servicemonitor_labels_for_the_prometheus_selector(target: str, release: str) -> None:
    """kube-prometheus-stack's default serviceMonitorSelector is `release: <helm
    release>`: the default build carries the chart's documented release name, the
    overlay sets another; either way it still selects gpuq's metrics Services."""
    built = by_kind(kustomize(K8S / target))
    sm = built[("ServiceMonitor", "gpuq")]
    assert sm["metadata"]["labels"]["release"] == release
    assert sm["metadata"]["namespace"] == "gpuq"
    assert built[("ConfigMap", "gpuq-grafana-dashboard")]["metadata"]["labels"] == {
        "grafana_dashboard": "1"}
    services = [d for d in kustomize(K8S) if d["kind"] == "Service"]
    selected = {s["metadata"]["name"] for s in services
                if s["metadata"]["namespace"] in sm["spec"]["namespaceSelector"]["matchNames"]
                and _selects(sm["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])}
    assert selected == {"gpuq", "gpuq-dispatcher"}
    ports = {p["name"] for s in services for p in s["spec"]["ports"]}
    assert {e["port"] for e in sm["spec"]["endpoints"]} <= ports
    # /metrics takes a bearer token: every endpoint sends the `metrics` token from the
    # Secret the docs tell the operator to create (without it every scrape is a 401)
    for endpoint in sm["spec"]["endpoints"]:
        assert endpoint["authorization"] == {
            "type": "Bearer", "credentials": {"name": "gpuq-metrics-token", "key": "token"}}
        assert "bearerTokenSecret" not in endpoint and "bearerTokenFile" not in endpoint


def test_front_door_rbac_is_exactly_what_the_integrations_use() -> None:
    """The workload kinds' rights: read and patch (suspend, resume, template labels),
    Pod labels before a Binding, Events; never create or delete a workload."""
    role = all_objects()[("ClusterRole", "gpuq-workloads")]
    rights = {(g, res, verb) for r in role["rules"] for g in r["apiGroups"]
              for res in r["resources"] for verb in r["verbs"]}
    read_patch = {"get", "list", "watch", "patch"}
    from app.cluster.workloads import ADAPTORS

    assert rights == {(a.group, a.plural, v) for a in ADAPTORS.values() for v in read_patch} | {
        ("", "pods", "patch"), ("", "events", "create")}
    assert {a.kind for a in ADAPTORS.values()} == {"Job", "JobSet", "PyTorchJob"}
    binding = all_objects()[("ClusterRoleBinding", "gpuq-workloads")]
    assert binding["subjects"] == GPUQ_SA


@KUBECTL
def test_ingress_overlay_reaches_the_api_over_tls_only() -> None:
    """The Ingress example routes its TLS host to the API Service's named port (a port
    name the Service does not have would answer 503 at the edge), and redirects HTTP."""
    built = by_kind(kustomize(K8S / "overlays" / "ingress-tls"))
    ing = built[("Ingress", "gpuq")]
    for version in VERSIONS:
        kubernetes_validate.validate(ing, version, strict=True)
    tls_hosts = {h for t in ing["spec"]["tls"] for h in t["hosts"]}
    assert {r["host"] for r in ing["spec"]["rules"]} <= tls_hosts
    assert ing["metadata"]["annotations"]["nginx.ingress.kubernetes.io/force-ssl-redirect"] \
        == "true"
    services = {(d["metadata"]["namespace"], d["metadata"]["name"]): d
                for d in kustomize(K8S) if d["kind"] == "Service"}
    for rule in ing["spec"]["rules"]:
        for path in rule["http"]["paths"]:
            svc = services[(ing["metadata"]["namespace"], path["backend"]["service"]["name"])]
            assert svc["metadata"]["labels"]["app.kubernetes.io/component"] == "api"
            assert path["backend"]["service"]["port"]["name"] in {
                p["name"] for p in svc["spec"]["ports"]}


def test_compose_keeps_the_database_and_the_data_folder() -> None:
    """``docker compose down`` / ``up`` must not lose the jobs nor the generated admin
    token: the database's and GPUQ_DATA_DIR's folders are named volumes."""
    root = K8S.parent
    compose = yaml.safe_load((root / "docker-compose.yml").read_text())
    data_dir = re.search(r"GPUQ_DATA_DIR=(\S+)", (root / "Dockerfile").read_text()).group(1)
    mounts = {svc: {v.split(":")[1] for v in spec.get("volumes", [])}
              for svc, spec in compose["services"].items()}
    assert "/var/lib/postgresql/data" in mounts["postgres"]
    assert data_dir in mounts["gpuq"]
    named = {v.split(":")[0] for spec in compose["services"].values()
             for v in spec.get("volumes", [])}
    assert named <= set(compose["volumes"])


COMPOSE_SPEC = Path(__file__).parent / "compose_spec" / "compose-spec.json"
_COMPOSE_VAR = re.compile(r"\$(?:\$|\{(\w+)(?:(:?[-?])([^}]*))?\}|(\w+))")


def _compose_interpolate(value, env: dict[str, str]):
    """Compose's variable interpolation ($$, $VAR, ${VAR}, ${VAR:-default},
    ${VAR-default}, ${VAR:?error}) over every string of the file, as `docker compose
    config` renders it."""
    if isinstance(value, dict):
        return {k: _compose_interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [_compose_interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def sub(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name, op, arg = m.group(1) or m.group(4), m.group(2), m.group(3)
        have = env.get(name)
        if op in (":-", "-"):
            return have if (have if op == ":-" else have is not None) else arg
        if op in (":?", "?") and not have:
            raise ValueError(f"required variable {name} is missing: {arg}")
        return have or ""

    return _COMPOSE_VAR.sub(sub, value)


def _compose_problems(doc: dict) -> list[str]:
    import jsonschema

    schema = json.loads(COMPOSE_SPEC.read_text())
    rendered = _compose_interpolate(doc, {})
    problems = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
                for e in jsonschema.Draft7Validator(schema).iter_errors(rendered)]
    services = rendered.get("services", {})
    built = {spec.get("image") for spec in services.values() if "build" in spec}
    for name, spec in services.items():
        for dep in spec.get("depends_on") or {}:
            if dep not in services:
                problems.append(f"services/{name}/depends_on: no service {dep!r}")
        if "build" not in spec and spec.get("image") not in built \
                and not str(spec.get("image", "")).startswith("postgres:"):
            problems.append(f"services/{name}/image: {spec.get('image')!r} is neither built "
                            "here nor a public image")
    return problems


def test_compose_file_renders_against_the_compose_spec() -> None:
    """docker-compose.yml as `docker compose config` would render it (variables
    interpolated with none set) is valid against the Compose Specification's JSON Schema
    (tests/unit/compose_spec, vendored), every depends_on names a service, and gpuq's
    image is the one the migrate service builds."""
    doc = yaml.safe_load((K8S.parent / "docker-compose.yml").read_text())
    assert _compose_problems(doc) == []
    # the check can fail: a misspelt key, a port as a number, an unknown dependency
    bad = yaml.safe_load((K8S.parent / "docker-compose.yml").read_text())
    bad["services"]["gpuq"]["volume"] = bad["services"]["gpuq"].pop("volumes")
    bad["services"]["gpuq"]["ports"] = 8000
    bad["services"]["gpuq"]["depends_on"] = {"migrations": {"condition": "service_started"}}
    problems = _compose_problems(bad)
    assert "services/gpuq: 'volume' does not match any of the regexes: '^x-'" in problems
    assert any(p.startswith("services/gpuq/ports") for p in problems), problems
    assert "services/gpuq/depends_on: no service 'migrations'" in problems
    assert _compose_interpolate("${A:-x} ${B-y} $$C ${D}", {"B": ""}) == "x  $C "


def test_the_image_carries_the_plots_extra() -> None:
    """`gpuq simulate --report` in the image draws its figures: the Dockerfile builds and
    installs gpuq with the plots extra, and that extra is pyproject's (matplotlib)."""
    import tomllib

    root = K8S.parent
    docker = (root / "Dockerfile").read_text()
    assert re.search(r"pip wheel [^\n]*'\.\[plots\]'", docker), "the wheel lacks plots"
    assert re.search(r"pip install [^\n]*'gpuq\[plots\]'", docker), "the install lacks plots"
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert any(d.startswith("matplotlib") for d in extras["plots"])


# --- what a cluster admin checks before applying (security section of docs/operations.md)


def _pod_specs(built: list[dict]) -> dict[str, dict]:
    return {d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in built
            if d["kind"] in ("Deployment", "StatefulSet", "Job")}


def _selects_pod(selector: dict, labels: dict) -> bool:
    """A LabelSelector (matchLabels and In/NotIn/Exists/DoesNotExist) against labels."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        k, op, vals = e["key"], e["operator"], e.get("values") or []
        ok = {"In": labels.get(k) in vals, "NotIn": labels.get(k) not in vals,
              "Exists": k in labels, "DoesNotExist": k not in labels}[op]
        if not ok:
            return False
    return True


def _may_reach(policies: list[dict], pod_labels: dict, port: int, ns_labels: dict,
               peer_labels: dict, same_namespace: bool) -> bool:
    """Whether NetworkPolicy lets a Pod (peer_labels, in a namespace with ns_labels) reach
    ``port`` of a Pod with ``pod_labels`` in the gpuq namespace."""
    selecting = [p for p in policies if _selects_pod(p["spec"]["podSelector"], pod_labels)
                 and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])]
    if not selecting:
        return True
    for p in selecting:
        for rule in p["spec"].get("ingress") or []:
            if rule.get("ports") and port not in [x["port"] for x in rule["ports"]]:
                continue
            for peer in rule.get("from") or [{}]:
                ns_sel, pod_sel = peer.get("namespaceSelector"), peer.get("podSelector")
                ns_ok = _selects_pod(ns_sel, ns_labels) if ns_sel is not None else same_namespace
                pod_ok = pod_sel is None or _selects_pod(pod_sel, peer_labels)
                if ns_ok and pod_ok:
                    return True
    return False


@KUBECTL
def test_job_namespaces_cannot_reach_gpuq_or_its_database() -> None:
    base, pg = kustomize(K8S), kustomize(K8S / "postgres")
    policies = [d for d in base + pg if d["kind"] == "NetworkPolicy"]
    assert all(p["metadata"]["namespace"] == "gpuq" for p in policies)
    api = {"app.kubernetes.io/name": "gpuq", "app.kubernetes.io/component": "api"}
    disp = {**api, "app.kubernetes.io/component": "dispatcher"}
    db = {**api, "app.kubernetes.io/component": "postgres"}
    namespaces = {d["metadata"]["name"]: d["metadata"]["labels"] for d in
                  base + kustomize(K8S / "overlays" / "extra-job-namespace")
                  + kustomize(K8S / "overlays" / "rdma-jobs") if d["kind"] == "Namespace"}
    job_pod = {"app.kubernetes.io/managed-by": "gpuq", "gpuq.io/job-id": "1"}
    for ns in ("gpuq-jobs", "nlp-jobs", "ib-jobs"):
        for target, port in ((api, 8000), (disp, 8000), (db, 5432)):
            assert not _may_reach(policies, target, port, namespaces[ns], job_pod, False), (
                ns, target)
    ingress_ns = {"kubernetes.io/metadata.name": "ingress-nginx"}
    assert _may_reach(policies, api, 8000, ingress_ns, {}, False)  # the Ingress still can
    assert _may_reach(policies, disp, 8000, {"kubernetes.io/metadata.name": "monitoring"},
                      {}, False)  # Prometheus scrapes /metrics
    assert not _may_reach(policies, db, 5432, ingress_ns, {}, False)
    for comp in ("api", "dispatcher", "migrate"):  # gpuq itself reaches its database
        assert _may_reach(policies, db, 5432, namespaces["gpuq"],
                          {**api, "app.kubernetes.io/component": comp}, True)
    # every namespace gpuq puts jobs in is a job namespace for the policy
    for ns in ("gpuq-jobs", "nlp-jobs", "ib-jobs"):
        assert namespaces[ns]["app.kubernetes.io/component"] == "jobs"


@KUBECTL
def test_disruption_budgets_and_spread() -> None:
    base = kustomize(K8S)
    objs = by_kind(base)
    deployments = [d for d in base if d["kind"] == "Deployment"]
    pdbs = [d for d in base + kustomize(K8S / "postgres")
            if d["kind"] == "PodDisruptionBudget"]
    for d in deployments:
        labels = d["spec"]["template"]["metadata"]["labels"]
        (pdb,) = [p for p in pdbs if _selects_pod(p["spec"]["selector"], labels)]
        assert pdb["spec"]["minAvailable"] == 1 < d["spec"]["replicas"]
        spread = {c["topologyKey"]: c for c in
                  d["spec"]["template"]["spec"]["topologySpreadConstraints"]}
        # never both replicas on one node; zones where there are zones
        assert spread["kubernetes.io/hostname"]["whenUnsatisfiable"] == "DoNotSchedule"
        assert "topology.kubernetes.io/zone" in spread
        for c in spread.values():
            assert _selects_pod(c["labelSelector"], labels)
    pg_labels = {"app.kubernetes.io/name": "gpuq", "app.kubernetes.io/component": "postgres"}
    assert any(_selects_pod(p["spec"]["selector"], pg_labels) for p in pdbs)
    assert ("PodDisruptionBudget", "gpuq-api") in objs


@KUBECTL
def test_secrets_come_from_mounted_files_never_the_environment() -> None:
    built = kustomize(K8S) + kustomize(K8S / "migrate") + kustomize(K8S / "postgres")
    for name, pod in _pod_specs(built).items():
        c = pod["containers"][0]
        for e in c.get("env") or []:
            assert "secretKeyRef" not in (e.get("valueFrom") or {}), (name, e["name"])
        assert not any("secretRef" in f for f in c.get("envFrom") or []), name
        secrets = {v["name"]: v["secret"] for v in pod.get("volumes") or [] if "secret" in v}
        assert secrets, name
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        for vol, sec in secrets.items():
            assert mounts[vol]["readOnly"] is True
            assert sec["defaultMode"] & 0o007 == 0  # not world-readable
        files = {e["name"]: e.get("value", "") for e in c.get("env") or []
                 if e["name"].endswith("_FILE")}
        assert files and all(v.startswith(mounts[next(iter(secrets))]["mountPath"])
                             for v in files.values()), name


@KUBECTL
def test_migration_job_is_gitops_friendly_and_postgres_pinned() -> None:
    (job,) = kustomize(K8S / "migrate")
    ann = job["metadata"]["annotations"]
    assert ann["argocd.argoproj.io/hook"] == "PreSync"
    assert ann["argocd.argoproj.io/hook-delete-policy"] == "BeforeHookCreation"
    assert ann["kustomize.toolkit.fluxcd.io/force"] == "enabled"
    (pg,) = [d for d in kustomize(K8S / "postgres") if d["kind"] == "StatefulSet"]
    image = pg["spec"]["template"]["spec"]["containers"][0]["image"]
    assert re.fullmatch(r"postgres:\d+\.\d+[-\w.]*(@sha256:[0-9a-f]{64})?", image), image


@KUBECTL
def test_rdma_overlay_allows_ipc_lock_and_nothing_quieter() -> None:
    built = by_kind(kustomize(K8S / "overlays" / "rdma-jobs"))
    labels = built[("Namespace", "ib-jobs")]["metadata"]["labels"]
    # IPC_LOCK is outside baseline: privileged enforced, baseline warned and audited
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert labels["pod-security.kubernetes.io/warn"] == "baseline"
    assert labels["pod-security.kubernetes.io/audit"] == "baseline"
    assert _rules(built[("Role", "gpuq-jobs")]) == JOB_RIGHTS
    # an IB template passes a privileged team's policy with the RDMA resource allowed ...
    sc = {"capabilities": {"add": ["IPC_LOCK"], "drop": ["ALL"]}}
    template = {"metadata": {"namespace": "ib-jobs"}, "spec": {"containers": [
        {"name": "train", "image": "trainer:1", "securityContext": sc,
         "resources": {"limits": {"rdma/rdma_shared_device_a": "1"}}}]}}
    install = KubeSettings(extended_resources="rdma/rdma_shared_device_a").install_policy()
    ok = PodPolicy(level="privileged", namespaces=("ib-jobs",), install=install)
    assert check_template(template, ok) == []
    # ... and neither without the setting nor for a restricted team
    assert check_template(template, PodPolicy(level="privileged", namespaces=("ib-jobs",)))
    assert check_template(template, PodPolicy(namespaces=("ib-jobs",), install=install))
