"""The expected job mix (for the fragmentation score), from the pending queue.

FGD scores a placement against the workload it expects next; in a live
queue the best predictor we have is what is waiting. Identical shapes
are merged with their count as weight, so 100,000 pending jobs give a mix
of a few dozen entries.
"""

from __future__ import annotations

from collections.abc import Iterable

from app.scheduling.fragmentation import MixEntry, WorkloadMix
from app.scheduling.model import JobRequest
from app.scheduling.modes import mode_of

MAX_ENTRIES = 32
SAMPLE = 2000  # a huge backlog is sampled with a fixed stride (deterministic)


def mix_from_jobs(jobs: Iterable[JobRequest]) -> WorkloadMix:
    seq = list(jobs)
    stride = max(1, len(seq) // SAMPLE)
    counts: dict[tuple, int] = {}
    for j in seq[::stride]:
        gpus, share = mode_of(j).card_shape(j)  # a slice as 0.3 card, gpu_units as 1
        key = (gpus, share, j.cpu, j.memory_gb, j.gpu_types, j.min_gpu_memory_gb)
        counts[key] = counts.get(key, 0) + max(1, j.replicas)
    top = sorted(counts.items(), key=lambda kv: -kv[1])[:MAX_ENTRIES]
    return WorkloadMix(
        tuple(
            MixEntry(gpus=k[0], gpu_share=k[1], cpu=k[2], memory_gb=k[3], gpu_types=k[4],
                     min_gpu_memory_gb=k[5], weight=float(n))
            for k, n in top
        )
    )
