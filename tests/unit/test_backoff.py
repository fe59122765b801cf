"""Exponential backoff with jitter (app/domain/backoff.py): client-go's shape."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from app.domain.backoff import Backoff


def test_delays_double_up_to_the_cap_and_reset():
    b = Backoff(initial_s=0.8, cap_s=30.0, jitter=0.0)
    assert [b.next() for _ in range(8)] == [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0]
    b.reset()
    assert b.next() == 0.8


@given(st.integers(0, 2**32 - 1), st.integers(1, 40))
def test_jitter_stays_within_its_fraction(seed, n):
    b = Backoff(jitter=1.0, rng=random.Random(seed))
    for i in range(1, n + 1):
        d = b.next()
        assert b.base(i) <= d <= 2 * b.base(i)


def test_two_clients_do_not_retry_in_step():
    """The point of the jitter: clients that failed together come back apart."""
    a, b = Backoff(rng=random.Random(1)), Backoff(rng=random.Random(2))
    assert [a.next() for _ in range(5)] != [b.next() for _ in range(5)]
