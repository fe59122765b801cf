"""GPUQ_CLUSTER=kubernetes end to end: settings -> KUBECONFIG -> KubernetesCluster,
leader-elected dispatcher binding a submitted job's Pods on the fake API server."""

from __future__ import annotations

import gc

import yaml

from app.clock import utcnow
from app.cluster.kubernetes import KubernetesCluster
from app.domain.spec import JobSpec
from app.runtime import GC_YOUNG_THRESHOLD, open_services
from app.settings import Settings
from app.store.jobs import submit_job
from app.store.orm import JobRow
from tests.fakekube.objects import article_a100

CONFIG = """
gpu_types:
  - {name: a100-80g, memory_gb: 80, weight: 10, product: "NVIDIA-A100.*80GB"}
pools:
  - {name: training, gpu_types: [a100-80g]}
teams:
  - {name: nlp, pool: training}
"""


def test_gpuq_cluster_kubernetes_from_kubeconfig(kube, db_url, tmp_path, monkeypatch):
    kube.add_node(article_a100("a100-0"))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": kube.url}}],
        "users": [{"name": "gpuq", "user": {"token": "test-token"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "gpuq"}}],
    }))
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.setenv("GPUQ_K8S_WATCH_TIMEOUT_S", "2")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    settings = Settings(DATABASE_URL=db_url, GPUQ_CLUSTER="kubernetes", GPUQ_CONFIG=config,
                        GPUQ_ADMIN_TOKEN="t" * 40, GPUQ_DATA_DIR=tmp_path)
    thresholds = gc.get_threshold()
    gc.set_threshold(700, *thresholds[1:])  # CPython's default, whatever ran before
    svc = open_services(settings, with_loops=True)
    try:
        # the loops' process collects its young generation less often (tune_collector)
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, *thresholds[1:])
        assert isinstance(svc.cluster, KubernetesCluster)
        dispatcher = svc.loops[0]
        with svc.session_factory() as s:
            spec = JobSpec.model_validate({"name": "one", "team": "nlp",
                                           "resources": {"gpus": 2}})
            job_id = submit_job(s, spec, now=utcnow()).job.id
            s.commit()
        dispatcher.run_once()
        assert dispatcher.elector.is_leader
        with svc.session_factory() as s:
            assert s.get(JobRow, job_id).status == "admitted"
        (pod,) = kube.gpuq_pods()
        assert pod["spec"]["nodeName"] == "a100-0"
        assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    finally:
        gc.set_threshold(*thresholds)
        svc.loops[0].elector.release()
        svc.close()
