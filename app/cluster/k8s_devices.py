"""What a node's device layer does with its GPUs, read from its labels, annotations and
allocatable (pure).

On a real node the kubelet's device manager and the vendor's device plugin decide what a
container gets; gpuq's bookkeeping must match what they enforce, or the node refuses the
Pods gpuq binds. One mode per sharing mechanism, each either driven exactly or refused
(its GPUs are then not offered, and the reason is shown in ``GET /v1/nodes``):

``exclusive``
    The NVIDIA device plugin (or another vendor's) with whole cards: ``<resource>: N``
    gives N cards. *Which* cards is the kubelet's choice (it asks the plugin's
    GetPreferredAllocation, pkg/kubelet/cm/devicemanager/manager.go), so the device
    indices gpuq books are its own accounting, not the physical card.
``mig-mixed``
    MIG with ``--mig-strategy=mixed``: one resource per profile,
    ``nvidia.com/mig-<profile>`` (k8s-device-plugin internal/lm/mig-strategy.go,
    ``newMigStrategyMixedLabeler``); a Pod asks ``nvidia.com/mig-3g.40gb: 1``.
``mig-single``
    MIG with ``--mig-strategy=single``: every card cut into the same profile, advertised
    as ``nvidia.com/gpu`` (one per slice); GPU Feature Discovery labels the node
    ``nvidia.com/mig.strategy=single`` and ``nvidia.com/gpu.product=<model>-MIG-<profile>``
    (``newMigStrategySingleLabeler``, ``NewMIGResourceLabeler``). A Pod asks
    ``nvidia.com/gpu: 1`` for one slice. ``<model>-MIG-INVALID`` (mixed layouts under
    the single strategy) offers nothing.
``time-slicing`` / ``mps``
    Replicas (``sharing.timeSlicing`` / ``sharing.mps`` in the plugin's config): the
    plugin advertises cards x replicas; GFD labels ``nvidia.com/gpu.replicas=<R>``,
    ``nvidia.com/gpu.sharing-strategy=time-slicing|mps`` and appends ``-SHARED`` to the
    product unless the resource is renamed (internal/lm/resource.go, ``baseLabeler``,
    ``getProductName``). ``nvidia.com/gpu: 1`` is then one replica of some card, never
    an exclusive card, and time-slicing caps neither memory nor compute: gpuq's whole-card
    and share accounting would both be wrong. Refused: the node's GPUs are not offered.
``hami``
    HAMi's vGPU device plugin registers the cards in the node annotation
    ``hami.io/node-nvidia-register`` and advertises cards x ``deviceSplitCount``. Its
    ``Allocate`` serves only a Pod its own scheduler annotated
    (``hami.io/vgpu-devices-to-allocate``, ``hami.io/vgpu-node``, ``hami.io/bind-phase``,
    ``hami.io/bind-time`` and a node lock; HAMi pkg/util/util.go ``GetPendingPod``,
    pkg/device-plugin/nvidiadevice/nvinternal/plugin/server.go ``Allocate``); a Pod gpuq
    binds has none, so admission fails. Refused.
``dra``
    GPUs present (``nvidia.com/gpu.present=true``) but no device-plugin resource: the
    cards are published as resource.k8s.io ResourceSlices (the NVIDIA DRA driver) or
    the device plugin is not running. gpuq does not allocate ResourceClaims (a template
    naming one is refused at submit by the Pod policy). Nothing offered.

Nothing here reads a clock or the network: the node sync calls :func:`device_layer`
per node.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from app.cluster import k8s_labels as L
from app.domain.devices import SHARE_UNSUPPORTED

EXCLUSIVE = "exclusive"
MIG_MIXED = "mig-mixed"
MIG_SINGLE = "mig-single"
TIME_SLICING = "time-slicing"
MPS = "mps"
HAMI = "hami"
DRA = "dra"
#: modes whose cards gpuq books and binds exactly
OFFERED = frozenset({EXCLUSIVE, MIG_MIXED, MIG_SINGLE})

_MIG_SUFFIX = re.compile(r"-MIG-(?P<profile>[0-9]+g\.[0-9]+gb(?:\+me)?|INVALID)$", re.IGNORECASE)
_SHARED_SUFFIX = "-SHARED"


@dataclass(frozen=True, slots=True)
class DeviceLayer:
    """How one node's device plugin hands out its GPUs."""

    mode: str = EXCLUSIVE
    replicas: int = 1  # time-slicing / MPS replicas per card, HAMi's split count
    cards: int | None = None  # physical cards, when the node says
    mig_profile: str | None = None  # the one profile of the single strategy
    product: str | None = None  # the product label without GFD's -SHARED / -MIG-... suffix
    detail: str = ""  # why the GPUs are not offered (empty when they are)

    @property
    def offered(self) -> bool:
        return self.mode in OFFERED and not self.detail

    def as_dict(self) -> dict[str, object]:
        """What ``GET /v1/nodes`` shows as ``sharing``."""
        out: dict[str, object] = {
            "mode": self.mode,
            "offered": self.offered,
            # the kubelet and the device plugin pick the physical card (or slice) of
            # every container; gpuq's device indices are its own accounting
            "device_choice": "node",
        }
        if self.replicas > 1:
            out["replicas"] = self.replicas
        if self.cards is not None:
            out["cards"] = self.cards
        if self.mig_profile:
            out["mig_profile"] = self.mig_profile
        if self.detail:
            out["detail"] = self.detail
        return out


def _int(v: object) -> int | None:
    try:
        return int(Decimal(str(v))) if v is not None and str(v).strip() else None
    except (InvalidOperation, ValueError):
        return None


def hami_cards(annotations: Mapping[str, str]) -> int | None:
    """Cards HAMi registered (``uuid,split,mem,cores,type,numa,health:`` per card)."""
    reg = annotations.get(L.HAMI_REGISTER)
    if reg is None:
        return None
    return len([c for c in reg.split(":") if c.strip()])


def device_layer(
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    allocatable: Mapping[str, object],
    resource_name: str = "nvidia.com/gpu",
) -> DeviceLayer:
    """The node's device layer (see the module docstring for each mode)."""
    product = labels.get(L.GFD_PRODUCT)
    base = product
    profile = None
    if product:
        m = _MIG_SUFFIX.search(product)
        if m:
            base, profile = product[: m.start()], m.group("profile")
        elif product.upper().endswith(_SHARED_SUFFIX):
            base = product[: -len(_SHARED_SUFFIX)]
    count = _int(labels.get(L.GFD_COUNT))
    replicas = _int(labels.get(L.GFD_REPLICAS)) or 1
    strategy = (labels.get(L.GFD_SHARING_STRATEGY) or "").lower()
    domain = resource_name.split("/", 1)[0]
    has_resource = any(
        (r == resource_name or r.startswith(resource_name + ".") or r.startswith(domain + "/mig-"))
        and (_int(q) or 0) > 0
        for r, q in allocatable.items()
    )

    if L.HAMI_REGISTER in annotations:
        cards = hami_cards(annotations)
        whole = _int(allocatable.get(resource_name)) or 0
        split = whole // cards if cards else 1
        return DeviceLayer(
            HAMI, replicas=max(split, 1), cards=cards, product=base,
            detail=("HAMi vGPU device plugin: its Allocate serves only Pods HAMi's own "
                    "scheduler annotated (hami.io/vgpu-devices-to-allocate, "
                    "hami.io/bind-phase), so a Pod gpuq binds would fail admission; "
                    "run the NVIDIA device plugin on nodes gpuq schedules"))
    if replicas > 1 or strategy in (TIME_SLICING, MPS):
        mode = MPS if strategy == MPS else TIME_SLICING
        return DeviceLayer(
            mode, replicas=replicas, cards=count, product=base,
            detail=(f"{mode} with {replicas} replicas per card: {resource_name}: 1 is one "
                    "replica of a card the device plugin picks, not an exclusive card"
                    + (", and time-slicing caps neither memory nor compute"
                       if mode == TIME_SLICING else "")
                    + "; gpuq books whole cards, MIG slices or capped shares, so it does not "
                    "offer this node's GPUs (set replicas: 1 for it, or use MIG)"))
    if (labels.get(L.GFD_MIG_STRATEGY) or "").lower() == "single" and profile:
        if profile.upper() == "INVALID":
            return DeviceLayer(
                MIG_SINGLE, product=base,
                detail=("GPU Feature Discovery reports an invalid MIG layout for the single "
                        "strategy (mixed profiles, or MIG and non-MIG cards): one profile "
                        "on every card, or the mixed strategy"))
        return DeviceLayer(MIG_SINGLE, cards=None, mig_profile=profile, product=base)
    if any(r.startswith(domain + "/mig-") and (_int(q) or 0) > 0 for r, q in allocatable.items()):
        return DeviceLayer(MIG_MIXED, cards=count, product=base)
    if not has_resource and (labels.get(L.GFD_PRESENT) or "").lower() == "true":
        return DeviceLayer(
            DRA, cards=count, product=base,
            detail=(f"GPUs present but no {resource_name} allocatable: the device plugin is "
                    "not running, or the GPUs are published only as DRA ResourceSlices, "
                    "which gpuq does not allocate"))
    return DeviceLayer(EXCLUSIVE, cards=count, product=base)


def node_layer(node: Mapping, resource_name: str = "nvidia.com/gpu") -> DeviceLayer:
    """:func:`device_layer` of a Node object as the API returns it."""
    meta = node.get("metadata") or {}
    status = node.get("status") or {}
    return device_layer(meta.get("labels") or {}, meta.get("annotations") or {},
                        status.get("allocatable") or status.get("capacity") or {},
                        resource_name)


__all__ = ["SHARE_UNSUPPORTED", "DeviceLayer", "UnsupportedDevice", "device_layer",
           "node_layer"]


class UnsupportedDevice(ValueError):
    """A placement this node's device layer cannot give exactly (the Pod would be
    refused by the kubelet, or get something other than what gpuq booked)."""
