"""GPUs only through gpuq: device env vars, runtime classes outside the
install's allowlist, DRA claims, unconfigured vendors' device resources and a projected
ServiceAccount token (with automount off) were all accepted and passed to the Pod."""

from __future__ import annotations

import pytest

from app.domain.pod_policy import InstallPolicy, check_pod
from tests.unit.test_pod_policy import _apply, c0, paths, policy

CASES = [
    (lambda t: c0(t).update(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]),
     "containers[0].env[0].name"),
    (lambda t: c0(t).update(env=[{"name": "CUDA_VISIBLE_DEVICES", "value": "0,1"}]),
     "containers[0].env[0].name"),
    (lambda t: t["spec"].update(runtimeClassName="nvidia"), "spec.runtimeClassName"),
    (lambda t: c0(t).update(resources={"limits": {"amd.com/gpu": "1"}}),
     "containers[0].resources.limits.amd.com/gpu"),
    (lambda t: c0(t).update(resources={"limits": {"habana.ai/gaudi": "8"}}),
     "containers[0].resources.limits.habana.ai/gaudi"),
    (lambda t: t["spec"].update(
        resourceClaims=[{"name": "gpu", "source": {"resourceClaimName": "g"}}]),
     "spec.resourceClaims"),
    (lambda t: t["spec"].update(volumes=[{"name": "tok", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token"}}]}}]),
     "spec.volumes[0].projected.sources[0].serviceAccountToken"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[1] if isinstance(c, str) else None)
def test_device_access_around_gpuq_is_refused_at_every_level(case) -> None:
    mutate, path = case
    for level in ("restricted", "privileged"):
        got = paths(_apply(mutate), policy(level))
        assert any(p.endswith(path) for p in got), (path, got)


def test_allowed_runtime_class_and_automount_team_pass() -> None:
    t = _apply(lambda t: t["spec"].update(runtimeClassName="gvisor"))
    assert paths(t, policy(install=InstallPolicy(runtime_classes=("gvisor",)))) == []
    t = _apply(CASES[-1][0])
    assert paths(t, policy(automount_token=True)) == []
    t = _apply(lambda t: c0(t).update(env=[{"name": "MY_DEVICES", "value": "x"}]))
    assert paths(t) == []


def test_device_env_is_refused_again_at_bind() -> None:
    t = _apply(CASES[0][0])
    pod = {"metadata": {"namespace": "gpuq-jobs"}, **{"spec": t["spec"]}}
    assert any(v.path.endswith("env[0].name") for v in check_pod(pod, policy()))
