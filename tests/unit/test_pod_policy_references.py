"""The namespace is the tenant boundary: as team nlp, templates naming
recsys's Secret, PVC, a secretKeyRef and a secrets-store CSI volume all got 201 in
the namespace every team shared (later also: an ephemeral volume cloning recsys's PVC
or snapshot, and a baseline team's cephfs/rbd/iscsi/flexVolume/azureFile Secret).
References are refused unless the Pod runs in a namespace this team alone uses;
checked at submit and again at bind."""

from __future__ import annotations

import pytest

from app.domain.pod_policy import PodPolicy, check_pod, check_template
from app.store.catalog_cache import CatalogView, TeamRef
from tests.unit.test_pod_policy import SC_OK

REFS = [
    ({"volumes": [{"name": "s", "secret": {"secretName": "recsys-s3-credentials"}}]},
     "spec.volumes[0].secret"),
    ({"volumes": [{"name": "c", "persistentVolumeClaim": {"claimName": "recsys-checkpoints"}}]},
     "spec.volumes[0].persistentVolumeClaim"),
    ({"volumes": [{"name": "v", "csi": {"driver": "secrets-store.csi.k8s.io",
                                         "volumeAttributes": {"secretProviderClass": "recsys"}}}]},
     "spec.volumes[0].csi"),
    ({"volumes": [{"name": "p", "projected": {"sources": [{"secret": {"name": "recsys"}}]}}]},
     "spec.volumes[0].projected.sources[0].secret"),
    ({"env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "recsys-token",
                                                           "key": "t"}}}]},
     "containers[0].env[0].valueFrom.secretKeyRef"),
    ({"envFrom": [{"configMapRef": {"name": "recsys-conf"}}]},
     "containers[0].envFrom[0].configMapRef"),
    ({"imagePullSecrets": [{"name": "recsys-registry"}]}, "spec.imagePullSecrets"),
    # an ephemeral volume (restricted allows it) whose claim clones recsys's PVC or restores
    # its snapshot: was accepted in the shared namespace
    ({"volumes": [{"name": "e", "ephemeral": {"volumeClaimTemplate": {"spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
        "dataSource": {"kind": "PersistentVolumeClaim", "name": "recsys-checkpoints"}}}}}]},
     "spec.volumes[0].ephemeral.volumeClaimTemplate.spec.dataSource"),
    ({"volumes": [{"name": "e", "ephemeral": {"volumeClaimTemplate": {"spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
        "dataSourceRef": {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot",
                          "name": "recsys-snap"}}}}}]},
     "spec.volumes[0].ephemeral.volumeClaimTemplate.spec.dataSourceRef"),
]

# volume sources baseline allows that name a Secret of the Pod's namespace: were accepted
# in the shared namespace for a baseline team
BASELINE_SECRET_REFS = [
    ({"cephfs": {"monitors": ["10.0.0.1:6789"], "secretRef": {"name": "recsys"}}},
     "cephfs.secretRef"),
    ({"rbd": {"monitors": ["10.0.0.1"], "image": "i", "secretRef": {"name": "recsys"}}},
     "rbd.secretRef"),
    ({"iscsi": {"targetPortal": "10.0.0.1", "iqn": "iqn.x", "lun": 0,
                "secretRef": {"name": "recsys"}}}, "iscsi.secretRef"),
    ({"flexVolume": {"driver": "example.com/nfs", "secretRef": {"name": "recsys"}}},
     "flexVolume.secretRef"),
    ({"azureFile": {"secretName": "recsys", "shareName": "data"}}, "azureFile.secretName"),
]


def template(extra: dict) -> dict:
    c = {"name": "train", "image": "trainer:1", "securityContext": dict(SC_OK)}
    spec: dict = {"containers": [c]}
    for k, v in extra.items():
        (c if k in ("env", "envFrom") else spec)[k] = v
    return {"metadata": {}, "spec": spec}


def catalog(**teams: tuple[str, ...]) -> CatalogView:
    refs = {n: TeamRef(n, "p", (), "P1", namespaces=ns) for n, ns in teams.items()}
    return CatalogView(revision=1, teams=refs, pools={}, priorities={}, types={})


@pytest.mark.parametrize("extra,path", REFS)
def test_references_in_a_shared_namespace_are_refused(extra, path) -> None:
    from app.domain.pod_policy import InstallPolicy

    shared = catalog(nlp=(), recsys=()).pod_policy(
        catalog(nlp=(), recsys=()).teams["nlp"], InstallPolicy())
    got = [v.path for v in check_template(template(extra), shared)]
    assert any(p.endswith(path) for p in got), got
    # again at bind, on the finished Pod
    pod = {"metadata": {"namespace": "gpuq-jobs"}, "spec": template(extra)["spec"]}
    assert any(v.path.endswith(path) for v in check_pod(pod, shared))
    # in the team's own namespace they resolve to the team's own objects
    cat = catalog(nlp=("nlp",), recsys=())
    own = cat.pod_policy(cat.teams["nlp"], InstallPolicy())
    t = template(extra)
    t["metadata"]["namespace"] = "nlp"
    assert [v.path for v in check_template(t, own)] == []
    # ...and when the template leaves the namespace out: the Pod runs in the team's own
    # namespace by default
    assert own.default_namespace == "nlp"
    assert [v.path for v in check_template(template(extra), own)] == []
    # but naming the shared job namespace brings the refusal back
    t["metadata"]["namespace"] = "gpuq-jobs"
    assert check_template(t, own)


@pytest.mark.parametrize("source,path", BASELINE_SECRET_REFS)
def test_secrets_named_by_other_volume_sources_stay_in_the_tenant_namespace(source, path):
    from app.domain.pod_policy import InstallPolicy

    def policy(**teams: tuple[str, ...]):
        refs = {n: TeamRef(n, "p", (), "P1", namespaces=ns, pod_security="baseline")
                for n, ns in teams.items()}
        cat = CatalogView(revision=1, teams=refs, pools={}, priorities={}, types={})
        return cat.pod_policy(cat.teams["nlp"], InstallPolicy())

    t = template({"volumes": [{"name": "v", **source}]})
    shared = policy(nlp=(), recsys=())
    assert [v.path for v in check_template(t, shared)] == [f"pod_template.spec.volumes[0].{path}"]
    pod = {"metadata": {"namespace": "gpuq-jobs"}, "spec": t["spec"]}
    assert [v.path for v in check_pod(pod, shared)] == [f"spec.volumes[0].{path}"]
    assert check_template(t, policy(nlp=("nlp",), recsys=())) == []  # its own namespace


def test_a_team_with_its_own_namespace_gets_its_pods_there() -> None:
    """Before, a template without a namespace went to the shared job namespace even for
    a team with a namespace of its own."""
    from app.cluster.k8s_pods import build_pod
    from app.domain.pod_policy import InstallPolicy
    from app.scheduling.model import ReplicaPlacement
    from tests.unit.test_k8s_pods import KS, req

    cat = catalog(nlp=("nlp-jobs", "nlp-batch"), recsys=())
    p = ReplicaPlacement(0, "n", None, cpu=1, memory_gb=2)
    for team, want in (("nlp", "nlp-jobs"), ("recsys", KS.namespace)):
        policy = cat.pod_policy(cat.teams[team], InstallPolicy(job_namespace=KS.namespace))
        pod = build_pod(req([p]), p, bind_id="x1", gpu_type=None, ks=KS, policy=policy)
        assert pod["metadata"]["namespace"] == want


def test_a_namespace_two_teams_list_is_not_private() -> None:
    cat = catalog(nlp=("ml",), recsys=("ml",))
    from app.domain.pod_policy import InstallPolicy

    assert cat.pod_policy(cat.teams["nlp"], InstallPolicy()).private_namespaces == frozenset()
    assert PodPolicy().private_namespaces == frozenset()
