"""The two-worker run (``make test``: ``pytest -n 2 --dist loadfile``) keeps every module
of the real control plane in one unit, so one worker runs them and the machine has one
control plane at a time; every other module is a unit of its own (tests/conftest.py)."""

from __future__ import annotations

from tests import conftest


class _Config:
    def __init__(self, dist: str) -> None:
        self.values = {"dist": dist, "tx": ["2*popen"]}

    def getvalue(self, name: str):
        return self.values[name]


def test_real_control_plane_modules_share_one_scope_and_others_keep_their_file():
    sched = conftest.pytest_xdist_make_scheduler(_Config("loadfile"), None)
    scope = sched._split_scope
    real = {scope("tests/integration/test_k8s_fault_suite.py::test_a[1-16]"),
            scope("tests/integration/test_k8s_real_cluster.py::test_b"),
            scope("tests/integration/test_real_baselines.py::test_c[x]")}
    assert real == {conftest.REAL_CONTROL_PLANE_SCOPE}
    assert scope("tests/unit/test_ports.py::test_d") == "tests/unit/test_ports.py"
    assert scope("tests/integration/test_store_setup.py::T::test_e") == (
        "tests/integration/test_store_setup.py")


def test_other_distributions_are_left_to_xdist():
    assert conftest.pytest_xdist_make_scheduler(_Config("load"), None) is None
