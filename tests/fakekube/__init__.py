"""An in-process fake kube-apiserver, with the kubelet's and the controllers' behaviours the
tests need, for what a real control plane (tests/realkube) cannot produce on demand or only
after minutes: hung and slow answers, 410s at a chosen moment, node loss on a clock of its
own. Each behaviour names the upstream file it models."""

from tests.fakekube.server import FakeKube

__all__ = ["FakeKube"]
