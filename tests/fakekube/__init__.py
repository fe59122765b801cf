"""A small fake kube-apiserver for tests (no real one can run on these machines)."""

from tests.fakekube.server import FakeKube

__all__ = ["FakeKube"]
