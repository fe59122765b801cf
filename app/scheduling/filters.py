"""Filters: may this job use this GPU type, this node, these devices?

Filters only read. Each answers yes/no (device pickers return what they
would take, or None), so "where is memory fit decided" has one answer:
``allowed_types`` (card memory) and ``pick_*`` (slice and share memory).
Each node filter declares what it reads of the node (:func:`reads`): the
node signature placement groups and caches by is derived from that.
"""

from __future__ import annotations

from collections.abc import Mapping

from app.scheduling.model import GpuType, JobRequest, Node, PoolInfo
from app.scheduling.node_reads import reads

EPS = 1e-9
FAST_NETWORKS = frozenset({"ib", "roce"})


def allowed_type_names(
    job: JobRequest, gpu_types: Mapping[str, GpuType], pools: Mapping[str, PoolInfo]
) -> list[str]:
    """Type names a job may use before memory fit: its list within its pool's, minus avoided.

    Order is the pool's preference order when the pool lists types.
    """
    pool = pools.get(job.pool)
    pool_types = list(pool.gpu_types) if pool and pool.gpu_types else []
    if pool_types:
        names = [n for n in pool_types if not job.gpu_types or n in job.gpu_types]
    elif job.gpu_types:
        names = list(job.gpu_types)
    else:
        names = list(gpu_types)
    return [n for n in names if n in gpu_types and n not in job.avoid_gpu_types]


def allowed_types(
    job: JobRequest, gpu_types: Mapping[str, GpuType], pools: Mapping[str, PoolInfo]
) -> list[GpuType]:
    """Allowed types whose whole card has at least the job's GPU memory."""
    out = []
    for n in allowed_type_names(job, gpu_types, pools):
        t = gpu_types[n]
        if t.memory_gb + EPS >= job.min_gpu_memory_gb:
            out.append(t)
    return out


@reads("taints")
def tolerates(job: JobRequest, node: Node) -> bool:
    """Kubernetes-style taints: NoSchedule/NoExecute need a matching toleration (an
    empty key, value or effect in a toleration matches any: ``operator: Exists``)."""
    for key, value, effect in node.taints:
        if effect == "PreferNoSchedule":
            continue
        ok = False
        for tk, tv, te in job.tolerations:
            if (tk in ("", key)) and (tv in ("", value)) and (te in ("", effect)):
                ok = True
                break
        if not ok:
            return False
    return True


#: A node selection (:attr:`JobRequest.node_selector`): terms, any of which will do, each
#: (label key, allowed values) requirements that must all hold
Selection = tuple[tuple[tuple[str, tuple[str, ...]], ...], ...]
#: A selection no node meets (a required node affinity whose every term is empty: an
#: empty term matches no node)
NO_NODE: Selection = ((("", ()),),)


def labels_selected(selection: Selection, labels: Mapping[str, str]) -> bool:
    """Do ``labels`` meet ``selection`` (:attr:`JobRequest.node_selector`): some term
    whose every requirement holds, as the kubelet's NodeAffinity admission evaluates a
    Pod's required terms (kubernetes ``component-helpers/scheduling/corev1/nodeaffinity/
    nodeaffinity.go``). No selection: every node."""
    if not selection:
        return True
    for term in selection:
        for key, values in term:
            if labels.get(key) not in values:
                break
        else:
            return True
    return False


def selection_keys(selection: Selection) -> list[str]:
    """The label keys ``selection`` reads, sorted (for a reason that shows what a node
    has of them)."""
    return sorted({k for term in selection for k, _ in term if k})


def selection_text(selection: Selection) -> str:
    """``selection`` for a reason: ``key in (a, b) and ...`` per term, terms joined by or."""
    return " or ".join(
        " and ".join(f"{k} in ({', '.join(v)})" for k, v in term) for term in selection
    )


@reads("labels")
def selects(job: JobRequest, node: Node) -> bool:
    """The job's node selection (:func:`labels_selected`): a node it does not select
    would have its Pods refused by the kubelet, so placement never picks it."""
    return labels_selected(job.node_selector, node.labels)


@reads("schedulable", "cpu", "memory")
def node_fits_host(node: Node, cpu: float, memory_gb: float) -> bool:
    return (
        node.schedulable
        and node.cpu - node.cpu_used + EPS >= cpu
        and node.memory_gb - node.memory_used_gb + EPS >= memory_gb
    )


@reads("cards")
def pick_whole(node: Node, count: int) -> tuple[int, ...] | None:
    """``count`` free whole cards, lowest indices first (keeps NVLink neighbours together)."""
    out = []
    for d in node.devices:
        if d.is_free_whole:
            out.append(d.index)
            if len(out) == count:
                return tuple(out)
    return None


@reads("cards")
def pick_mig(node: Node, profile: str) -> tuple[int, int] | None:
    """A free slice of ``profile``; on the card with the most slices in use (fills cards)."""
    best: tuple[int, int] | None = None
    best_used = -1
    for d in node.devices:
        if not d.mig_layout or d.external:
            continue
        used = sum(d.slices_used)
        if used <= best_used:
            continue
        for i, p in enumerate(d.mig_layout):
            if p == profile and not d.slices_used[i]:
                best, best_used = (d.index, i), used
                break
    return best


@reads("cards")
def pick_share(node: Node, gpu_type: GpuType, share: float, memory_gb: float) -> int | None:
    """The card whose free share fits ``share`` most tightly (partly used cards first).

    Shares on one card never sum above 1 and their memory never above the card's.
    """
    best: int | None = None
    best_free = 2.0
    for d in node.devices:
        if d.mig_layout or d.whole_used or d.external:
            continue
        free = 1.0 - d.share_used
        if free + EPS < share:
            continue
        if d.share_memory_gb + memory_gb > gpu_type.memory_gb + EPS:
            continue
        if free < best_free:
            best, best_free = d.index, free
    return best
