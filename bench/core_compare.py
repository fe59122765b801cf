"""The core's headline figures for two checkouts in one run: old (``--baseline DIR``, e.g.
``git worktree add /tmp/old main``) and new (this checkout), each in its own subprocess,
one after the other, so both see the same machine.

Figures (CPU seconds of the cycle, as ``bench/core.py`` builds its data): one cycle with
10,000 pending jobs on an empty 10,000-node cluster (placements/s), one cycle with 100,000
pending jobs that cannot fit (every card busy), and the same backlog with every job past the
reservation cap.

Run: ``.venv/bin/python bench/core_compare.py --baseline /tmp/old``.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CODE = r'''
import sys, time
sys.path.insert(0, ".")
from bench.core import cluster, jobs, snapshot, full_cluster_running
from gpuq.scheduling.engine import schedule
nodes = cluster(10000)
pend = jobs(10_000, seed=20_000)
c0 = time.process_time(); res = schedule(snapshot(nodes, pend)); c1 = time.process_time()
reps = sum(len(a.placements) for a in res.admissions)
run = full_cluster_running(nodes); big = jobs(100_000, seed=7)
c2 = time.process_time(); r2 = schedule(snapshot(nodes, big, run)); c3 = time.process_time()
r3 = schedule(snapshot(nodes, big, run, now=1e6)); c4 = time.process_time()
assert not r2.admissions and not r3.admissions
print(f"10,000 x 10,000: {c1 - c0:.3f} s, {len(res.admissions)} admitted, "
      f"{reps / (c1 - c0):,.0f} placements/s | 100,000 that cannot fit: {c3 - c2:.3f} s | "
      f"every job old: {c4 - c3:.3f} s")
'''


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", required=True, help="a checkout of the old core")
    args = ap.parse_args()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, load average {load:.1f} at start; CPU seconds")
    for name, folder in (("old", os.path.abspath(args.baseline)), ("new", HERE)):
        out = subprocess.run([sys.executable, "-c", CODE], cwd=folder, capture_output=True,
                             text=True, env={**os.environ, "PYTHONPATH": folder}, check=False)
        print(f"{name} ({folder}): {out.stdout.strip() or out.stderr[-2000:]}")


if __name__ == "__main__":
    main()
