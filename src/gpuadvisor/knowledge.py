"""Typed loaders for the hardware catalogs in knowledge/: GPUs (gpus.yaml) and links (links.yaml).

Parsed files are cached (functools.lru_cache): the `suggest` path calls these many times and must stay fast.
No torch here.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Literal, Optional

import yaml
from pydantic import Field, ValidationError

from .errors import UserError
from .paths import knowledge_dir
from .schemas._base import Frozen
from .schemas.hardware import LinkClass
from .safe_yaml import load_bundled_yaml


class GpuSpec(Frozen):
    """One catalog entry of knowledge/gpus.yaml (a GPU model, or the `cpu` device class)."""

    key: str = Field(description="Stable catalog key, e.g. 'a40'")
    kind: Literal["gpu", "cpu"] = "gpu"
    names: list[str] = Field(description="Names to match: NVML/nvidia-smi names first, then short forms")
    memory_gib: float = Field(description="Nominal device memory, GiB (0 for cpu: a share of host RAM)")
    ecc_reserved_fraction: float = Field(
        0.0, ge=0.0, lt=0.5, description="Share of the nominal memory that ECC takes when it is on by default "
        "(GDDR datacenter cards: 1/16, CUDA C++ Best Practices Guide; HBM keeps ECC out of band: 0)")
    tflops_bf16: float = Field(description="Dense bf16/fp16 tensor peak with fp32 accumulate, TFLOP/s")
    tflops_fp32: float = Field(description="Dense fp32 non-tensor peak, TFLOP/s")
    tflops_fp8: float = Field(0.0, ge=0.0, description="Dense FP8 tensor peak with fp32 accumulate, TFLOP/s "
                              "(Ada, Hopper, Blackwell); 0: no FP8 tensor cores")
    memory_bandwidth_gb_per_s: float
    nvlink_gb_per_s: float = Field(0.0, description="Total bidirectional NVLink bandwidth per GPU, 0 if none")
    nvlink_links: int = Field(0, description="NVLink links per GPU")
    pcie_gen: Optional[int] = None
    p2p_default: bool = Field(True, description="CUDA P2P over PCIe works with the stock driver")
    bf16_supported: bool = True
    compute_capability: Optional[str] = None
    host_copy_gb_per_s: Optional[float] = Field(
        None, gt=0.0, description="Pinned host<->device copy rate, GB/s, the slower direction, for a GPU whose host "
        "link is not a PCIe slot (GH200's NVLink-C2C); None: priced from the PCIe generation")
    source: str
    notes: str = ""

    @property
    def nvlink_per_link_one_way_gb_per_s(self) -> float:
        """One-direction rate of a single NVLink of this GPU (0 without NVLink)."""
        return self.nvlink_gb_per_s / 2 / self.nvlink_links if self.nvlink_links else 0.0

    @property
    def usable_memory_gib(self) -> float:
        """What the driver reports and a process can allocate: nominal memory less the ECC reservation."""
        return self.memory_gib * (1.0 - self.ecc_reserved_fraction)

    @property
    def display_name(self) -> str:
        """The name nvidia-smi prints (first of `names`)."""
        return self.names[0]


class PcieClass(Frozen):
    """Efficiency of one PCIe path class relative to the wire rate."""

    p2p: bool = False
    efficiency: float
    latency_us: float
    source: str


class PcieCatalog(Frozen):
    wire_gb_per_s_per_lane: dict[int, float]
    wire_source: str
    classes: dict[str, PcieClass]
    no_p2p: PcieClass
    latency_source: str


class NvlinkGeneration(Frozen):
    gen: int
    gpu: str
    per_link_one_way_gb_per_s: float
    source: str


class NvlinkCatalog(Frozen):
    efficiency: float
    efficiency_source: str
    latency_us: float
    latency_source: str
    generations: list[NvlinkGeneration]


class NetworkLink(Frozen):
    """An inter-node network entry (or shm/loopback)."""

    key: str
    protocol: Literal["tcp", "roce", "ib", "efa", "unknown"]
    link_speed_gbit_per_s: Optional[float] = None
    bandwidth_gb_per_s: float
    latency_us: float
    source: str


class ShmLink(Frozen):
    key: str = "shm"
    bandwidth_gb_per_s: float
    latency_us: float
    source: str


class LinkCatalog(Frozen):
    """knowledge/links.yaml as a typed object."""

    pcie: PcieCatalog
    nvlink: NvlinkCatalog
    shm: ShmLink
    network: list[NetworkLink]

    def network_keys(self) -> list[str]:
        return [n.key for n in self.network]


class LinkSpec(Frozen):
    """Resolved effective rates of one link, with the source of the numbers."""

    key: str
    kind: Literal["pcie", "nvlink", "shm", "network"]
    link_class: LinkClass
    protocol: Literal["tcp", "roce", "ib", "efa", "unknown"] = "unknown"
    p2p: Optional[bool] = None
    bandwidth_gb_per_s: float = Field(description="Effective bus bandwidth for collectives (busbw), GB/s")
    latency_us: float = Field(description="Alpha per ring step, microseconds")
    wire_gb_per_s: Optional[float] = Field(None, description="Nominal one-way wire rate, GB/s")
    link_speed_gbit_per_s: Optional[float] = None
    source: str


def _read_yaml(path: Path) -> dict:
    """safe_load a knowledge file, as a one-line UserError when broken."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = load_bundled_yaml(fh)
    except (OSError, yaml.YAMLError) as exc:
        raise UserError(f"cannot read {path}: {' '.join(str(exc).split())}; fix or reinstall gpuadvisor") from exc
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping at the top level; fix or reinstall gpuadvisor")
    return data


@functools.lru_cache(maxsize=None)
def load_gpus() -> tuple[GpuSpec, ...]:
    """All entries of knowledge/gpus.yaml (cached)."""
    path = knowledge_dir() / "gpus.yaml"
    data = _read_yaml(path)
    try:
        specs = tuple(GpuSpec.model_validate(e) for e in data.get("gpus", []))
    except ValidationError as exc:
        raise UserError(f"{path}: {' '.join(str(exc).split())}") from exc
    keys = [s.key for s in specs]
    if len(set(keys)) != len(keys):
        raise UserError(f"{path}: duplicate GPU keys; make every key unique")
    return specs


@functools.lru_cache(maxsize=None)
def load_links() -> LinkCatalog:
    """knowledge/links.yaml as a LinkCatalog (cached)."""
    path = knowledge_dir() / "links.yaml"
    try:
        return LinkCatalog.model_validate(_read_yaml(path))
    except ValidationError as exc:
        raise UserError(f"{path}: {' '.join(str(exc).split())}") from exc


def _norm(name: str) -> str:
    """Normalise a GPU name for matching: lower case, vendor words and punctuation dropped."""
    s = name.lower()
    for word in ("nvidia", "tesla", "geforce", "quadro"):
        s = s.replace(word, "")
    return re.sub(r"[^a-z0-9]", "", s)


@functools.lru_cache(maxsize=None)
def _name_index() -> dict[str, str]:
    index: dict[str, str] = {}
    for spec in load_gpus():
        for n in (spec.key, *spec.names):
            index.setdefault(_norm(n), spec.key)
    return index


def gpu_keys() -> list[str]:
    """Catalog keys, in file order."""
    return [s.key for s in load_gpus()]


def find_gpu(name_or_key: str) -> Optional[GpuSpec]:
    """The catalog entry for an NVML name, short name or key, or None when unknown or ambiguous.

    Exact (normalised) matches win; otherwise a unique entry whose name's words are among the query's (NVML
    suffixes such as ' MIG 1g.5gb'), or whose name holds the query's words, is returned: 'A100' is ambiguous, not
    the A10, and 'L40' is unknown, not the L40S.
    """
    cands = _gpu_candidates(name_or_key)
    return cands[0] if len(cands) == 1 else None


def _tokens(name: str) -> tuple[str, ...]:
    """A GPU name's words (lower case, split at punctuation and spaces, vendor words dropped): what a partial match
    compares, so that 'A10' is not inside 'A100' nor 'L40' inside 'L40S'."""
    vendor = ("nvidia", "tesla", "geforce", "quadro")
    return tuple(w for w in re.findall(r"[a-z0-9]+", name.lower()) if w not in vendor)


def _within(part: tuple[str, ...], whole: tuple[str, ...]) -> bool:
    """Whether the words `part` occur in `whole`, in a row."""
    n = len(part)
    return 0 < n <= len(whole) and any(whole[i:i + n] == part for i in range(len(whole) - n + 1))


@functools.lru_cache(maxsize=512)
def _gpu_candidates(name_or_key: str) -> tuple[GpuSpec, ...]:
    """Entries matching a name: exact (normalised), else the longest name whose words are inside the query's (NVML
    suffixes such as ' MIG 1g.5gb'), else the names holding the query's words."""
    specs = load_gpus()
    q = _norm(name_or_key)
    if not q:
        return ()
    index = _name_index()
    if q in index:
        return tuple(s for s in specs if s.key == index[q])
    words = _tokens(name_or_key)
    names = {s.key: [t for t in map(_tokens, (s.key, *s.names)) if len("".join(t)) >= 3] for s in specs}
    inside = {k: max((len("".join(t)) for t in ts if _within(t, words)), default=0) for k, ts in names.items()}
    best = max(inside.values())
    if best:
        return tuple(s for s in specs if inside[s.key] == best)
    return tuple(s for s in specs if any(_within(words, t) for t in names[s.key]))


def gpu_spec(name_or_key: str) -> GpuSpec:
    """The catalog entry for an NVML/nvidia-smi name ('NVIDIA A40'), short name ('A6000') or key.

    Raises UserError naming the known GPUs when the name is unknown or matches several entries.
    """
    cands = _gpu_candidates(name_or_key)
    if len(cands) == 1:
        return cands[0]
    if cands:
        raise UserError(
            f"ambiguous GPU '{name_or_key}': matches {', '.join(c.key for c in cands)}; "
            "write the full name or a catalog key"
        )
    raise UserError(
        f"unknown GPU '{name_or_key}': add it to knowledge/gpus.yaml (knowledge/README.md) or name the nearest "
        "known GPU and override its rates with device_rates in a cluster file; "
        f"known: {', '.join(gpu_keys())}"
    )


_PCIE_KEY = re.compile(r"^pcie(?P<gen>[345])(?:-x(?P<width>\d+))?-(?P<cls>[a-z]+)$")
_NV_TOKEN = re.compile(r"^nv(?:link)?(?P<count>\d*)$")


def link_spec(
    name: str,
    *,
    pcie_gen: Optional[int] = None,
    pcie_width: Optional[int] = None,
    p2p: Optional[bool] = None,
    gpu: Optional[str] = None,
    nvlink_count: Optional[int] = None,
) -> LinkSpec:
    """Effective collective rates of a link, from knowledge/links.yaml.

    `name` is a network key ('1gbe', '25gbe', 'ib-hdr', ...), 'shm', an intra-node class as nvidia-smi
    prints it ('PIX', 'PXB', 'PHB', 'NODE', 'SYS', 'NV4', 'NV12'), or 'pcie{gen}-x{width}-{class}'
    ('pcie4-x16-pxb'). PCIe rates scale with gen x width (default gen 4, x16); p2p=False forces the
    host-memory bounce. NVLink rates use the per-link rate of `gpu` (a name or key; default 25 GB/s one way,
    the NVLink2-4 rate) times the bonded count.
    """
    cat = load_links()
    raw = name.strip()
    low = raw.lower()
    if low in ("shm", "x"):
        s = cat.shm
        return LinkSpec(key="shm", kind="shm", link_class=LinkClass.SHM, protocol="tcp",
                        bandwidth_gb_per_s=s.bandwidth_gb_per_s, latency_us=s.latency_us, source=s.source)
    for net in cat.network:
        if net.key == low:
            return LinkSpec(key=net.key, kind="network", link_class=LinkClass.UNKNOWN, protocol=net.protocol,
                            bandwidth_gb_per_s=net.bandwidth_gb_per_s, latency_us=net.latency_us,
                            link_speed_gbit_per_s=net.link_speed_gbit_per_s,
                            wire_gb_per_s=net.link_speed_gbit_per_s / 8 if net.link_speed_gbit_per_s else None,
                            source=net.source)
    m = _NV_TOKEN.match(low)
    if m:
        count = nvlink_count if nvlink_count is not None else int(m.group("count") or 1)
        return _nvlink_spec(count, gpu)
    m = _PCIE_KEY.match(low)
    if m:
        return _pcie_spec(m.group("cls"), int(m.group("gen")), int(m.group("width") or pcie_width or 16), p2p)
    cls = "SYS" if low == "soc" else raw.upper() if low != "unknown" else "unknown"
    if cls in cat.pcie.classes:
        return _pcie_spec(cls, pcie_gen or 4, pcie_width or 16, p2p)
    known = ", ".join(["shm", *cat.network_keys(), *cat.pcie.classes, "NV#", "pcie4-x16-pxb"])
    raise UserError(f"unknown link '{name}': use one of {known}, or give bandwidth_gb_per_s and latency_us")


def _pcie_spec(cls: str, gen: int, width: int, p2p: Optional[bool]) -> LinkSpec:
    """PCIe path class -> effective rates (wire x efficiency; no P2P bounces through host memory)."""
    cat = load_links().pcie
    cls_key = cls.upper() if cls.lower() != "unknown" else "unknown"
    if cls_key == "SOC":
        cls_key = "SYS"
    if cls_key not in cat.classes:
        raise UserError(f"unknown PCIe path class '{cls}': use one of {', '.join(cat.classes)}")
    if gen not in cat.wire_gb_per_s_per_lane:
        raise UserError(f"unsupported PCIe generation {gen}: use one of {sorted(cat.wire_gb_per_s_per_lane)}")
    entry = cat.classes[cls_key]
    use_p2p = entry.p2p and p2p is not False
    eff = entry if use_p2p else cat.no_p2p
    wire = cat.wire_gb_per_s_per_lane[gen] * width
    return LinkSpec(
        key=f"pcie{gen}-x{width}-{cls_key.lower()}" + ("" if use_p2p else "-nop2p"),
        kind="pcie", link_class=LinkClass(cls_key), p2p=use_p2p,
        bandwidth_gb_per_s=round(wire * eff.efficiency, 3), latency_us=eff.latency_us, wire_gb_per_s=round(wire, 3),
        source=f"{cat.wire_source}; efficiency {eff.efficiency}: {eff.source}",
    )


def _nvlink_spec(count: int, gpu: Optional[str]) -> LinkSpec:
    """NV# -> effective rates: efficiency x count x the GPU's one-way per-link rate."""
    cat = load_links().nvlink
    per_link = 25.0
    src_gpu = "default 25 GB/s one way per link (NVLink2-4)"
    if gpu:
        spec = gpu_spec(gpu)
        if spec.nvlink_per_link_one_way_gb_per_s:
            per_link = spec.nvlink_per_link_one_way_gb_per_s
            src_gpu = f"{spec.key}: {spec.nvlink_gb_per_s} GB/s over {spec.nvlink_links} links ({spec.source.split(';')[0]})"
    wire = per_link * max(count, 1)
    return LinkSpec(
        key=f"nvlink-x{count}", kind="nvlink", link_class=LinkClass.NVLINK, p2p=True,
        bandwidth_gb_per_s=round(wire * cat.efficiency, 3), latency_us=cat.latency_us, wire_gb_per_s=round(wire, 3),
        source=f"{src_gpu}; efficiency {cat.efficiency}: {cat.efficiency_source}",
    )
