"""Catalog lookups that build schema objects: a Device from a GPU spec, a DeviceLink from a link class,
a Network from a link key, a Nic (one rail) from a link key. Shared by cluster files, presets and the probe path."""
from __future__ import annotations

import re
from typing import Optional

from ..knowledge import GpuSpec, gpu_spec, link_spec, load_links
from ..schemas.hardware import Device, DeviceLink, LinkClass, Network, Nic, RateSource

GIB = 1024**3

_NV = re.compile(r"^NV(\d+)$", re.IGNORECASE)


def parse_link_token(token: str) -> tuple[LinkClass, int]:
    """An nvidia-smi matrix token ('NV4', 'PXB', 'SOC', 'X', 'SHM') -> (LinkClass, nvlink count).

    Raises ValueError for tokens that are not link classes.
    """
    tok = token.strip().upper()
    m = _NV.match(tok)
    if m:
        return LinkClass.NVLINK, int(m.group(1))
    if tok == "SOC":
        return LinkClass.SYS, 0
    if tok == "UNKNOWN":
        return LinkClass.UNKNOWN, 0
    try:
        return LinkClass(tok), 0
    except ValueError:
        raise ValueError(
            f"unknown link class '{token}'; use NV#, PIX, PXB, PHB, NODE, SYS, SHM or unknown"
        ) from None


def device_from_spec(
    spec: GpuSpec,
    index: int,
    *,
    memory_bytes: Optional[int] = None,
    pcie_gen: Optional[int] = None,
    pcie_width: Optional[int] = None,
    rate_source: RateSource = "catalog",
    **extra,
) -> Device:
    """A Device with the catalog's rates for `spec`; memory from the catalog unless given; the host copy rate of a GPU
    whose host link is not PCIe (GpuSpec.host_copy_gb_per_s) unless a measured one is given."""
    mem = memory_bytes if memory_bytes is not None else int(spec.usable_memory_gib * GIB)
    return Device(
        index=index,
        kind=spec.kind,
        name=spec.display_name,
        spec_key=spec.key,
        memory_bytes=mem,
        compute_capability=extra.pop("compute_capability", None) or spec.compute_capability,
        peak_tflops_bf16=spec.tflops_bf16,
        peak_tflops_fp32=spec.tflops_fp32,
        peak_tflops_fp8=spec.tflops_fp8,
        memory_bandwidth_gb_per_s=spec.memory_bandwidth_gb_per_s,
        rate_source=rate_source,
        pcie_gen=pcie_gen if pcie_gen is not None else (spec.pcie_gen if spec.kind == "gpu" else None),
        pcie_width=pcie_width if pcie_width is not None else (16 if spec.kind == "gpu" else None),
        host_copy_gb_per_s=extra.pop("host_copy_gb_per_s", None) or spec.host_copy_gb_per_s,
        **extra,
    )


def _p2p_for(cls: LinkClass, a: Device, b: Device, p2p: Optional[bool]) -> Optional[bool]:
    """P2P for a pair: explicit value, else NVLink=yes, else both GPUs' catalog default."""
    if p2p is not None:
        return p2p
    if cls == LinkClass.NVLINK:
        return True
    if cls == LinkClass.SHM or a.kind == "cpu":
        return None
    defaults = []
    for d in (a, b):
        try:
            defaults.append(gpu_spec(d.spec_key or d.name).p2p_default)
        except ValueError:
            defaults.append(False)
    return all(defaults)


def device_link(
    a: Device,
    b: Device,
    token: str | LinkClass,
    *,
    nvlink_count: Optional[int] = None,
    p2p: Optional[bool] = None,
    bandwidth_gb_per_s: Optional[float] = None,
    latency_us: Optional[float] = None,
    rate_source: RateSource = "catalog",
) -> DeviceLink:
    """The DeviceLink between devices a and b for a topology token, rates from knowledge/links.yaml.

    PCIe rates use the slower end's gen x width; without P2P the host-memory bounce rate applies. Explicit
    bandwidth/latency override the catalog (and should come with rate_source 'user' or 'measured').
    """
    if isinstance(token, LinkClass):
        cls, count = token, nvlink_count or 0
    else:
        cls, count = parse_link_token(token)
    if nvlink_count is not None:
        count = nvlink_count
    pp = _p2p_for(cls, a, b, p2p)
    if cls == LinkClass.SHM or (a.kind == "cpu" and b.kind == "cpu"):
        spec = link_spec("shm")
        cls = LinkClass.SHM
    elif cls == LinkClass.NVLINK:
        spec = link_spec(f"NV{max(count, 1)}", gpu=a.spec_key)
    elif cls == LinkClass.SELF:
        raise ValueError(f"devices {a.index} and {b.index}: 'X' (self) is only valid on the diagonal")
    else:
        # the max link the device+slot can train to: NVML's current gen drops at idle to save power
        gens = [g for g in (d.pcie_gen_max or d.pcie_gen for d in (a, b)) if g]
        widths = [w for w in (d.pcie_width_max or d.pcie_width for d in (a, b)) if w]
        spec = link_spec(cls.value, pcie_gen=min(gens) if gens else None,
                         pcie_width=min(widths) if widths else None, p2p=pp)
    lo, hi = sorted((a.index, b.index))
    return DeviceLink(
        a=lo,
        b=hi,
        link_class=cls,
        nvlink_count=count if cls == LinkClass.NVLINK else 0,
        p2p_supported=pp,
        bandwidth_gb_per_s=bandwidth_gb_per_s if bandwidth_gb_per_s is not None else spec.bandwidth_gb_per_s,
        latency_us=latency_us if latency_us is not None else spec.latency_us,
        rate_source=rate_source,
    )


def network_from_key(
    key: str,
    *,
    nic: Optional[str] = None,
    bandwidth_gb_per_s: Optional[float] = None,
    latency_us: Optional[float] = None,
    rate_source: RateSource = "catalog",
) -> Network:
    """A Network for a links.yaml network key ('1gbe', 'ib-hdr', ...), optional explicit overrides."""
    spec = link_spec(key)
    if spec.kind not in ("network", "shm"):
        raise ValueError(f"'{key}' is an intra-node link, not a network; use e.g. 1gbe, 25gbe, ib-hdr")
    return Network(
        bandwidth_gb_per_s=bandwidth_gb_per_s if bandwidth_gb_per_s is not None else spec.bandwidth_gb_per_s,
        latency_us=latency_us if latency_us is not None else spec.latency_us,
        protocol=spec.protocol,
        link_speed_gbit_per_s=spec.link_speed_gbit_per_s,
        nic=nic,
        rate_source=rate_source,
    )


# Nic.kind -> links.yaml protocol of the transport NCCL runs over it (RDMA verbs, AWS's libfabric plugin over EFA,
# or TCP sockets)
NIC_PROTOCOL = {"infiniband": "ib", "roce": "roce", "efa": "efa", "ethernet": "tcp"}
_NIC_KIND = {"ib": "infiniband", "roce": "roce", "efa": "efa", "tcp": "ethernet"}
RAIL_SUFFIX = "-rail"


def rail_key(key: str) -> str:
    """The links.yaml class that rates one port of network class `key` used as a rail: `<key>-rail` if the
    catalog has it (RDMA ports driven by their own GPU), else `key` itself (Ethernet sockets).

    Raises ValueError for keys that are not network classes.
    """
    low = key.strip().lower()
    keys = load_links().network_keys()
    if low not in keys or low == "loopback":
        net = [k for k in keys if k != "loopback" and not k.endswith(RAIL_SUFFIX)]
        raise ValueError(f"unknown network class '{key}'; use one of {', '.join(net)}")
    if low.endswith(RAIL_SUFFIX):
        return low
    return low + RAIL_SUFFIX if low + RAIL_SUFFIX in keys else low


def rail_key_for(kind: str, speed_gbit_per_s: Optional[float]) -> Optional[str]:
    """The rail class of a port from its kind and speed (same protocol and speed; NCCL transports only,
    gloo entries excluded), or None when the catalog has none."""
    proto = NIC_PROTOCOL.get(kind)
    if proto is None or not speed_gbit_per_s:
        return None
    same = [n.key for n in load_links().network
            if n.protocol == proto and n.link_speed_gbit_per_s and not n.key.endswith("-gloo")
            and float(n.link_speed_gbit_per_s) == float(speed_gbit_per_s)]
    rails = [k for k in same if k.endswith(RAIL_SUFFIX)]
    best = rails or same
    return best[0] if best else None


def nic_from_key(key: str, name: str, closest_devices: Optional[list[int]] = None) -> Nic:
    """One port of network class `key` rated as a rail (rail_key), e.g. nic_from_key('ib-hdr', 'rail0', [0])."""
    spec = link_spec(rail_key(key))
    return Nic(name=name, kind=_NIC_KIND.get(spec.protocol, "unknown"),  # type: ignore[arg-type]
               speed_gbit_per_s=spec.link_speed_gbit_per_s, closest_devices=list(closest_devices or []),
               link=spec.key, bandwidth_gb_per_s=spec.bandwidth_gb_per_s, latency_us=spec.latency_us)


def rate_nic(nic: Nic) -> Nic:
    """`nic` with its rail rate filled in from the catalog: from its `link` class, else from its kind and speed.

    An explicit bandwidth or latency is kept (its `link` still fills kind and speed); a NIC the catalog cannot
    rate stays unrated (not a rail).
    Raises ValueError for an unknown `link`.
    """
    if nic.bandwidth_gb_per_s is not None and not nic.link:
        return nic
    key = rail_key(nic.link) if nic.link else rail_key_for(nic.kind, nic.speed_gbit_per_s)
    if key is None:
        return nic
    spec = link_spec(key)
    upd: dict = {"link": spec.key, "latency_us": spec.latency_us if nic.latency_us is None else nic.latency_us}
    if nic.bandwidth_gb_per_s is None:
        upd["bandwidth_gb_per_s"] = spec.bandwidth_gb_per_s
    if nic.speed_gbit_per_s is None:
        upd["speed_gbit_per_s"] = spec.link_speed_gbit_per_s
    if nic.link and nic.kind == "ethernet" and spec.protocol != "tcp":
        upd["kind"] = _NIC_KIND[spec.protocol]
    return nic.model_copy(update=upd)
