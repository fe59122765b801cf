"""The release manifest (release/): the base, the Ingress with TLS and the job namespaces
with the operator's values (image, database Secret, job namespace, host, TLS Secret,
Ingress class) from one file, release/values/values.yaml. Rendered with `kubectl
kustomize` as an operator would, every rendered object validated against the Kubernetes
schemas of the oldest and newest supported versions, and the values followed everywhere
they belong, also after an operator changed them."""

from __future__ import annotations

import shutil
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.unit.test_manifests import KUBECTL, VERSIONS, by_kind, kustomize

ROOT = Path(__file__).resolve().parents[2]
RELEASE = ROOT / "release"


def _images(built: list[dict]) -> set[str]:
    return {c["image"] for d in built if d["kind"] in ("Deployment", "Job")
            for c in d["spec"]["template"]["spec"]["containers"]}


def _secrets(built: list[dict]) -> set[str]:
    return {v["secret"]["secretName"] for d in built if d["kind"] in ("Deployment", "Job")
            for v in d["spec"]["template"]["spec"]["volumes"] if "secret" in v}


def _env(d: dict, name: str) -> str:
    [c] = [c for c in d["spec"]["template"]["spec"]["containers"] if c["name"] == "gpuq"]
    return next(e["value"] for e in c["env"] if e["name"] == name)


@KUBECTL
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("target", ["", "migrate"])
def test_release_renders_valid_objects(target: str, version: str) -> None:
    built = kustomize(RELEASE / target)
    assert built
    for d in built:
        kubernetes_validate.validate(d, version, strict=True)
    # the values file is read, never applied
    assert not [d for d in built if d["metadata"]["name"] == "gpuq-release-values"]


@KUBECTL
def test_release_holds_the_base_and_puts_the_values_everywhere() -> None:
    base = by_kind(kustomize(ROOT / "k8s"))
    built = kustomize(RELEASE)
    got = by_kind(built)
    assert set(base) <= set(got)  # nothing of the base is lost
    values = yaml.safe_load((RELEASE / "values" / "values.yaml").read_text())["data"]
    assert _images(built) == {values["image"]} == _images(kustomize(RELEASE / "migrate"))
    assert _secrets(built) == {values["secret"]} == _secrets(kustomize(RELEASE / "migrate"))
    assert _env(got[("Deployment", "gpuq-dispatcher")], "GPUQ_K8S_NAMESPACE") == \
        values["jobNamespace"]
    ing = got[("Ingress", "gpuq")]["spec"]
    assert ing["ingressClassName"] == values["ingressClass"]
    assert ing["tls"] == [{"hosts": [values["host"]], "secretName": values["tlsSecret"]}]
    assert [r["host"] for r in ing["rules"]] == [values["host"]]
    # the extra job namespace: its Namespace (restricted), the dispatcher's Role there
    ns = [d for d in built if d["kind"] == "Namespace"]
    assert {d["metadata"]["name"] for d in ns} == {"gpuq", values["jobNamespace"], "nlp-jobs"}
    [nlp] = [d for d in ns if d["metadata"]["name"] == "nlp-jobs"]
    assert nlp["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    bindings = [d for d in built if d["kind"] == "RoleBinding"
                and d["metadata"].get("namespace") == "nlp-jobs"]
    assert [b["subjects"] for b in bindings] == [
        [{"kind": "ServiceAccount", "name": "gpuq", "namespace": "gpuq"}]]


@KUBECTL
def test_changed_values_reach_every_object(tmp_path: Path) -> None:
    """An operator's values: a private registry, its own Secret, job namespace, host, TLS
    Secret and Ingress class; a second extra namespace copied from the first. Nothing of
    the defaults is left in what is rendered."""
    shutil.copytree(ROOT / "k8s", tmp_path / "k8s")
    shutil.copytree(RELEASE, tmp_path / "release")
    rel = tmp_path / "release"
    vals = rel / "values" / "values.yaml"
    doc = yaml.safe_load(vals.read_text())
    doc["data"].update(image="harbor.corp.internal/ml/gpuq:1.4.2", secret="gpuq-prod",
                       jobNamespace="ml-jobs", host="queue.corp.internal",
                       tlsSecret="queue-tls", ingressClass="traefik")
    vals.write_text(yaml.safe_dump(doc))
    shutil.copytree(rel / "namespaces" / "nlp-jobs", rel / "namespaces" / "cv-jobs")
    k = rel / "namespaces" / "cv-jobs" / "kustomization.yaml"
    k.write_text(k.read_text().replace("namespace: nlp-jobs", "namespace: cv-jobs"))
    top = rel / "kustomization.yaml"
    top.write_text(top.read_text().replace("  - namespaces/nlp-jobs\n",
                                           "  - namespaces/nlp-jobs\n  - namespaces/cv-jobs\n"))
    built = kustomize(rel)
    job = kustomize(rel / "migrate")
    for d in built + job:
        kubernetes_validate.validate(d, VERSIONS[-1], strict=True)
    text = yaml.safe_dump_all(built + job)
    for default in ("registry.example.com", "gpuq-secrets", "gpuq-jobs", "gpuq.example.com",
                    "gpuq-tls"):
        # the Role keeps its name gpuq-jobs (what it is for), only its namespace moves
        left = [d for d in built + job if default in yaml.safe_dump(d)
                and not (default == "gpuq-jobs" and d["kind"] in ("Role", "RoleBinding"))]
        assert not left, (default, [(d["kind"], d["metadata"]["name"]) for d in left])
    assert "ml-jobs" in text
    assert _images(built) == _images(job) == {"harbor.corp.internal/ml/gpuq:1.4.2"}
    assert _secrets(built) == _secrets(job) == {"gpuq-prod"}
    got = by_kind(built)
    assert got[("Ingress", "gpuq")]["spec"]["ingressClassName"] == "traefik"
    assert _env(got[("Deployment", "gpuq-dispatcher")], "GPUQ_K8S_NAMESPACE") == "ml-jobs"
    roles = {(d["kind"], d["metadata"]["namespace"]) for d in built
             if d["kind"] in ("Role", "RoleBinding") and d["metadata"]["name"] == "gpuq-jobs"}
    assert roles == {(kind, ns) for kind in ("Role", "RoleBinding")
                     for ns in ("ml-jobs", "nlp-jobs", "cv-jobs")}
    assert {d["metadata"]["name"] for d in built if d["kind"] == "Namespace"} == {
        "gpuq", "ml-jobs", "nlp-jobs", "cv-jobs"}
