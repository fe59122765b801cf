"""Request examples of the main routes, shown in /docs and docs/api.md.

They name objects of the shipped demo config (app/config/demo.yaml), so each one
works as-is against ``gpuq serve`` with the demo; the OpenAPI fuzz test sends
them too, so an example the server would refuse fails the tests.
"""

from __future__ import annotations

from typing import Any

WHOLE_GPUS = {
    "name": "bert-large",
    "team": "nlp",
    "priority": "P1",
    "replicas": 2,
    "resources": {"gpus": 4, "gpu_types": ["a100-80g"], "cpu": 16, "memory_gb": 128},
    "topology": "same_rack",
    "duration_estimate_s": 7200,
    "labels": {"project": "search"},
}
GPU_UNITS = {
    "name": "sweep-17",
    "team": "research",
    "resources": {"gpu_units": 20},
    "duration_estimate_s": 1800,
}
MIG_SLICE = {
    "name": "notebook",
    "team": "recsys",
    "pool": "mixed",
    "resources": {"mig": "2g.20gb", "gpu_types": ["a100-80g"]},
}
SHARE = {
    "name": "embed-serve",
    "team": "recsys",
    "resources": {"gpu_share": 0.25, "gpu_types": ["rtx4090-24g"]},
    "failure_policy": {"action": "restart", "max_restarts": 5},
}

JOB: dict[str, Any] = {
    "gpus": {"summary": "a gang of 2 replicas with 4 whole A100s each",
             "value": WHOLE_GPUS},
    "gpu_units": {"summary": "20 compute units on any GPU types", "value": GPU_UNITS},
    "mig": {"summary": "one MIG slice", "value": MIG_SLICE},
    "gpu_share": {"summary": "a quarter of a shareable card", "value": SHARE},
}
BATCH: dict[str, Any] = {
    "two": {"summary": "two jobs, all or nothing", "value": {"jobs": [GPU_UNITS, SHARE]}},
}
TEAM: dict[str, Any] = {
    "team": {
        "summary": "a team on the training pool with a quota",
        "value": {"name": "vision", "pool": "training", "allowed_pools": ["mixed"],
                  "quota_units": 120, "quota_by_type": {"a100-80g": 80}, "weight": 2,
                  "default_priority": "P1"},
    },
}
POOL: dict[str, Any] = {
    "pool": {
        "summary": "a pool guaranteed 40 CU of A100 that lends at most 20",
        "value": {"name": "batch", "gpu_types": ["a100-80g", "v100-16g"],
                  "guaranteed": {"a100-80g": 40}, "lend_limit": {"a100-80g": 20},
                  "borrow_limit": 16, "max_borrow_seconds": 3600, "reclaim": "when_needed",
                  "placement": "spread", "weight": 1},
    },
}
