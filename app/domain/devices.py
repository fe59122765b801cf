"""What the Kubernetes backend can and cannot give a job's Pod, in words both the API
(submit-time refusals) and the cluster layer (bind) use.

Why here: the API refuses at submit what the node sync learnt the cluster lacks, and
the bind refuses the same thing for a job queued before; one text, one reason."""

from __future__ import annotations

#: why a fraction of a card (gpu_share) is refused on Kubernetes, at submit and at bind
SHARE_UNSUPPORTED = (
    "gpu_share is not available on this cluster: its nodes come from Kubernetes, where a "
    "fraction of a card needs a GPU-sharing device plugin gpuq can drive, and none "
    "qualifies (HAMi's device plugin allocates only Pods its own scheduler annotated; "
    "NVIDIA time-slicing and MPS replicas are not pinned to the card gpuq books, and "
    "time-slicing caps no memory); ask for gpus: 1 or a MIG slice (mig: <profile>), see "
    "docs/operations.md, Devices")
