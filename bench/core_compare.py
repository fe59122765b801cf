"""The core's headline figures for two checkouts in one run: old (``--baseline DIR``, e.g.
``git worktree add /tmp/old main``) and new (this checkout), each in its own subprocess,
alternating old, new, old, new ... (``--rounds``), so both see the same machine, and the
median of each figure is printed with the load average.

Figures (CPU seconds of one cycle, as ``bench/core.py`` builds its data): one cycle with
10,000 pending jobs on an empty 10,000-node cluster (placements/s), the same with 100,000
pending jobs (placements/s), one cycle with 100,000 pending jobs that cannot fit (every card
busy), and the same backlog with every job past the reservation cap. Each subprocess times
each case ``--repeat`` times and reports its median. Both trees must take the same
decisions: the admissions and the reasons' digest of each case are printed and compared.

Run: ``.venv/bin/python bench/core_compare.py --baseline /tmp/old [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CODE = r'''
import hashlib, json, statistics, sys, time
sys.path.insert(0, ".")
from bench.core import cluster, jobs, snapshot, full_cluster_running
import os
if os.path.exists("app/__init__.py"):  # by the tree's files: an editable install answers for app
    from app.scheduling.engine import schedule
else:  # a tree of the time the package was named gpuq
    from gpuq.scheduling.engine import schedule
assert os.path.realpath(sys.modules[schedule.__module__].__file__).startswith(
    os.path.realpath(os.getcwd())), "the core was not imported from the tree under test"
repeat = int(sys.argv[1])
nodes = cluster(10000)
pend = jobs(10_000, seed=20_000)
many = jobs(100_000, seed=110_000)
run = full_cluster_running(nodes); big = jobs(100_000, seed=7)
cases = {"place": lambda: snapshot(nodes, pend),
         "place100k": lambda: snapshot(nodes, many),
         "nofit": lambda: snapshot(nodes, big, run),
         "old": lambda: snapshot(nodes, big, run, now=1e6)}
out = {}
for name, make in cases.items():
    times = []
    for _ in range(repeat):
        snap = make()
        c0 = time.process_time(); res = schedule(snap); times.append(time.process_time() - c0)
    digest = hashlib.sha256(json.dumps(
        [[a.job_id, [repr(p) for p in a.placements]] for a in res.admissions]
        + [res.order, sorted((k, str(v)) for k, v in res.reasons.items())]).encode()).hexdigest()
    out[name] = {"cpu_s": statistics.median(times), "admitted": len(res.admissions),
                 "replicas": sum(len(a.placements) for a in res.admissions),
                 "digest": digest[:16]}
print(json.dumps(out))
'''


def run_tree(folder: str, repeat: int) -> dict:
    out = subprocess.run([sys.executable, "-c", CODE, str(repeat)], cwd=folder,
                         capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": folder}, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{folder}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", required=True, help="a checkout of the old core")
    ap.add_argument("--rounds", type=int, default=3, help="old/new subprocess pairs")
    ap.add_argument("--repeat", type=int, default=3, help="cycles per case per subprocess")
    args = ap.parse_args()
    loads = [os.getloadavg()[0]]
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, load average {loads[0]:.1f} at start; CPU seconds "
          f"of one cycle, median of {args.rounds} rounds x {args.repeat} cycles", flush=True)
    trees = {"old": os.path.abspath(args.baseline), "new": HERE}
    got: dict[str, list[dict]] = {"old": [], "new": []}
    for _ in range(args.rounds):
        for name, folder in trees.items():
            got[name].append(run_tree(folder, args.repeat))
            loads.append(os.getloadavg()[0])
    labels = {"place": "10,000 x 10,000", "place100k": "10,000 x 100,000",
              "nofit": "100,000 that cannot fit", "old": "every job old"}
    for case, label in labels.items():
        row = []
        for name in trees:
            runs = [r[case] for r in got[name]]
            med = statistics.median(r["cpu_s"] for r in runs)
            extra = ""
            if case in ("place", "place100k"):
                extra = f", {runs[0]['replicas'] / med:,.0f} placements/s"
            row.append(f"{name} {med:.3f} s{extra}")
        same = {r[case]["digest"] for name in trees for r in got[name]}
        adm = got["new"][0][case]["admitted"]
        ratio = statistics.median(
            n[case]["cpu_s"] / o[case]["cpu_s"] for o, n in zip(got["old"], got["new"], strict=True)
        )
        print(f"{label}: {' | '.join(row)} | new/old {ratio:.2f} (median of the rounds' "
              f"ratios) | {adm} admitted | decisions "
              f"{'identical' if len(same) == 1 else 'DIFFER'}")
    print(f"load average during the run: {min(loads):.1f}-{max(loads):.1f}; "
          f"trees: old {trees['old']}, new {trees['new']}")


if __name__ == "__main__":
    main()
