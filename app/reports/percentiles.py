"""Percentiles with one documented definition.

Linear interpolation between closest ranks (the ``linear`` method of
numpy, "type 7" of Hyndman and Fan): for sorted values x[0..n-1] the q-th
percentile is at rank r = q/100 * (n-1), interpolated between x[floor r]
and x[ceil r]. It is simple to compute by hand, which is what the tests
do, and it does not jump when one sample is added to a small group.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (0 <= q <= 100) of ``values``; None when there are none."""
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q must be within 0..100, got {q}")
    xs = sorted(float(v) for v in values)
    if not xs:
        return None
    rank = q / 100.0 * (len(xs) - 1)
    lo = math.floor(rank)
    hi = math.ceil(rank)
    if lo == hi:
        return xs[lo]
    return xs[lo] + (xs[hi] - xs[lo]) * (rank - lo)


def ratio(num: float | None, den: float | None) -> float | None:
    """num/den, or None when either is missing or the denominator is zero.

    A P50 of zero (most jobs started at once) makes P99/P50 undefined rather
    than infinite: the head-of-line alert then uses its absolute floor.
    """
    if num is None or den is None or den <= 0:
        return None
    return num / den
