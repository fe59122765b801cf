"""Percentiles: the one implementation the simulator, the reports, the
dashboard, the alerts and the tuner's what-if all use (the
simulator's P99 used to be nearest-rank with q in 0..1 while the API's was
interpolated with q in 0..100, so the same waits gave two P99s).

The definition is the standard library's ``statistics.quantiles(method=
"inclusive")``: linear interpolation between closest ranks (numpy's
``linear``, "type 7" of Hyndman and Fan). For sorted values x[0..n-1] the
q-th percentile lies at rank r = q/100 * (n-1), between x[floor r] and
x[ceil r]. It is easy to check by hand and does not jump when one sample
is added to a small group. ``q`` is a whole percent, 0..100.

Lives in ``app.domain`` (not ``app.reports``) because the simulator may
import only the core and the domain.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (q a whole number, 0 <= q <= 100) of ``values``;
    None when there are none."""
    if isinstance(q, bool) or not 0 <= q <= 100 or q != int(q):
        raise ValueError(f"percentile q must be a whole number within 0..100, got {q!r}")
    return percentile_of_sorted(sorted(float(v) for v in values), int(q))


def percentile_of_sorted(xs: list[float], q: int) -> float | None:
    """:func:`percentile` of floats already sorted (a report asks several of one list)."""
    if not xs:
        return None
    if q == 0 or len(xs) == 1:
        return xs[0]
    if q == 100:
        return xs[-1]
    return statistics.quantiles(xs, n=100, method="inclusive")[q - 1]


def ratio(num: float | None, den: float | None) -> float | None:
    """num/den, or None when either is missing or the denominator is zero.

    A P50 of zero (most jobs started at once) makes P99/P50 undefined rather
    than infinite: the head-of-line alert then uses its absolute floor.
    """
    if num is None or den is None or den <= 0:
        return None
    return num / den
