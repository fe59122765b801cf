"""What the filters and scores read from a node, declared once; the node
signature is derived from those declarations.

Placement scores one node per *signature* (``CapacityIndex.groups_of``) and
caches a score by it, which is right only if two nodes with equal signatures
pass the same filters and get the same score for any request. So every
filter and score declares the aspects of a node it reads (:func:`reads`),
and :func:`node_signature` is the tuple of exactly the declared aspects. A
filter that starts reading, say, a label declares ``@reads("labels")`` and
the signature follows; ``tests/unit/test_node_signature.py`` checks the
property with hypothesis.

In no signature: the node's name, rack and NVLink domain (only a gang's
topology term reads them, relative to the nodes the gang already has: the
gang walk adds that context to the signature itself) and holds
(reservations, looked up by node name before a node is filtered).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

from app.scheduling.model import Node

F = TypeVar("F", bound=Callable[..., object])


def card_states(node: Node) -> tuple:
    """The cards as a multiset of states: (wholly free, wholly taken, the rest
    sorted). Which index a card has does not change what fits or the score."""
    free = taken = 0
    other = []  # cards that are neither wholly free nor wholly taken (rare)
    for d in node.devices:
        if d.mig_layout or d.external or d.share_used:
            other.append((d.external, d.mig_layout, tuple(d.slices_used),
                          round(d.share_used, 6), round(d.share_memory_gb, 6)))
        elif d.whole_used:
            taken += 1
        else:
            free += 1
    return (free, taken, tuple(sorted(other)) if other else ())


#: Every aspect of a node a filter or score may read, as a hashable view.
ASPECTS: dict[str, Callable[[Node], Hashable]] = {
    "gpu_type": lambda n: n.gpu_type,
    "cards": card_states,
    "cpu": lambda n: (round(n.cpu_used, 6), n.cpu),
    "memory": lambda n: (round(n.memory_used_gb, 6), n.memory_gb),
    "network": lambda n: n.network,
    "taints": lambda n: n.taints,
    "schedulable": lambda n: n.schedulable,
    "labels": lambda n: tuple(sorted(n.labels.items())) if n.labels else (),
}

_DECLARED: dict[str, frozenset[str]] = {}
_views: tuple[Callable[[Node], Hashable], ...] = ()
_views_for = -1  # how many declarations _views was built from


def reads(*aspects: str) -> Callable[[F], F]:
    """Declare the node aspects a filter or score reads (see :data:`ASPECTS`)."""
    unknown = set(aspects) - set(ASPECTS)
    if unknown:
        raise ValueError(f"unknown node aspects {sorted(unknown)}; known: {sorted(ASPECTS)}")

    def mark(fn: F) -> F:
        _DECLARED[f"{fn.__module__}.{fn.__qualname__}"] = frozenset(aspects)
        return fn

    return mark


def withdraw(fn: Callable[..., object]) -> None:
    """Forget ``fn``'s declaration (a test's throw-away filter)."""
    _DECLARED.pop(f"{fn.__module__}.{fn.__qualname__}", None)


def declared() -> dict[str, frozenset[str]]:
    """Function -> the aspects it declared (for tests and docs)."""
    return dict(_DECLARED)


def signature_aspects() -> tuple[str, ...]:
    """The aspects in the signature: every declared one, in :data:`ASPECTS` order."""
    wanted = frozenset().union(*_DECLARED.values())
    return tuple(a for a in ASPECTS if a in wanted)


def node_signature(node: Node) -> tuple:
    """What every declared filter and score reads of ``node``, and nothing else."""
    global _views, _views_for
    if _views_for != len(_DECLARED):  # declarations arrive as modules import
        _views = tuple(ASPECTS[a] for a in signature_aspects())
        _views_for = len(_DECLARED)
    return tuple([view(node) for view in _views])
