"""``kube`` for tests that run on the fake API server and on the real control plane.

A test module imports ``kube`` from here (overriding tests/fakekube's fixture for that
module) and marks a test ``@BOTH``: it then runs twice, ``[fake]`` and ``[real]``.
Unmarked tests of the module keep the fake.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.fakekube.server import FakeKube

#: Run a test on the fake API server and on the real control plane.
BOTH = pytest.mark.parametrize("kube", ["fake", "real"], indirect=True)


def real_xfail(reason: str) -> pytest.MarkDecorator:
    """Parametrize like BOTH, with the real run an expected failure (strict: it must
    fail now, and turns the suite red once the defect ``reason`` names is fixed, so the
    mark is removed with it)."""
    return pytest.mark.parametrize("kube", [
        "fake", pytest.param("real", marks=pytest.mark.xfail(strict=True, reason=reason))],
        indirect=True)


@pytest.fixture
def kube(request: pytest.FixtureRequest) -> Iterator[Any]:
    if getattr(request, "param", "fake") == "real":
        yield request.getfixturevalue("real_kube")
        return
    k = FakeKube(watch_timeout_s=2)
    k.start()
    yield k
    k.stop()
