"""Fairness and utilization as numbers: pure functions over plain records.

Nothing here reads a clock, a database or the network; the API routes,
the metrics loop and the weight tuner feed these functions rows they
loaded, so the same figures come out everywhere and tests can compute
them by hand.
"""
