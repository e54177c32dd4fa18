"""Cluster files: a concise hand-written YAML/JSON description of a cluster, expanded into the full Cluster.

The concise format (docs/cluster-file.md, knowledge/cluster.schema.json) says `gpus: 4x A6000`,
`topology: PXB`, `network: 1gbe`; `load_cluster` fills in the rates from knowledge/gpus.yaml and
knowledge/links.yaml. A file in the full form (nodes with `devices:`, as `save_cluster` writes) is read as is.
Errors name the file, the line and the field: `cluster.yaml line 7: nodes[1].gpus: unknown GPU 'A7000'; ...`.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal, Optional, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import UserError
from ..knowledge import gpu_spec, link_spec
from ..safe_yaml import load_user_yaml_node, read_user_text
from ..schemas.bounds import (MAX_CPU_RANKS, MAX_DEVICES, MAX_DEVICES_PER_NODE, MAX_NODES, Count, Index, Latency,
                              LinkBandwidth, LinkSpeed, MemBandwidth, MemoryGiB, PcieGen, PcieWidth, RamGiB, TFlops)
from ..schemas.hardware import Cluster, CpuInfo, Device, DeviceLink, Network, Nic, Node, NodeAccess
from .catalog import (GIB, device_from_spec, device_link, network_from_key, nic_from_key, rail_key,
                      rate_nic)

Loc = tuple[Union[str, int], ...]


class _Spec(BaseModel):
    """Base of the concise-format models: unknown keys are errors (typos fail loudly)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class GpuEntry(_Spec):
    """One GPU written out, when the shorthand `4x A6000` is not enough."""

    gpu: str = Field(description="GPU name or catalog key, e.g. 'A6000', 'NVIDIA A40', 'a100-sxm-40gb'")
    memory_gib: Optional[MemoryGiB] = Field(None, description="Override the catalog memory, GiB")
    pcie_gen: Optional[PcieGen] = None
    pcie_width: Optional[PcieWidth] = None
    numa_node: Optional[Index] = None


class PcieSpec(_Spec):
    gen: Optional[PcieGen] = Field(None, description="PCIe generation of the GPU slots (default: the GPU's)")
    width: Optional[PcieWidth] = Field(None, description="Lanes per GPU slot (default 16)")
    devices_per_switch: Optional[Count] = Field(
        None, description="GPUs behind each PCIe switch, in index order, sharing its uplink to the host (DGX A100: 2; "
                          "default: what the topology shows, else none)")


class TopologySpec(_Spec):
    """How the devices of a node connect: one class for all pairs, exceptions per pair, or a capture file."""

    link: Optional[str] = Field(None, description="Class for every pair: NV#, PIX, PXB, PHB, NODE, SYS, SHM")
    pairs: dict[str, str] = Field(default_factory=dict, description="Per pair, e.g. {'2-3': PIX}")
    matrix: Optional[list[list[str]]] = Field(None, description="nvidia-smi style matrix rows, 'X' on the diagonal")
    file: Optional[str] = Field(None, description="Saved `nvidia-smi topo -m` output (relative to this file)")
    p2p: Optional[bool] = Field(None, description="Override CUDA P2P for every pair (default: from the GPU catalog)")
    bandwidth_gb_per_s: Optional[LinkBandwidth] = Field(None, description="Measured bus bandwidth for every pair")
    latency_us: Optional[Latency] = Field(None, description="Measured latency for every pair")
    rate_source: Literal["user", "measured"] = Field("user", description="Where explicit rates come from")


class DeviceRates(_Spec):
    """Rates that replace the catalog's for every device of the node (e.g. measured on it)."""

    tflops_bf16: Optional[TFlops] = Field(None, description="Dense bf16/fp16 peak, TFLOP/s")
    tflops_fp32: Optional[TFlops] = Field(None, description="Dense fp32 peak, TFLOP/s")
    achieved_tflops: Optional[TFlops] = Field(None, description="Measured large-GEMM rate, TFLOP/s")
    memory_bandwidth_gb_per_s: Optional[MemBandwidth] = None
    host_copy_gb_per_s: Optional[LinkBandwidth] = Field(
        None, description="Pinned host<->device copy rate of one device alone, GB/s (probes/hostcopy.py)")
    rate_source: Literal["user", "measured"] = "user"


class CpuSpec(_Spec):
    model: Optional[str] = None
    sockets: Count = 1
    cores: Count = Field(1, description="Physical cores in total")
    threads: Optional[Count] = Field(None, description="Logical CPUs (default: cores)")
    numa_nodes: Count = 1
    ram_gib: RamGiB = Field(0, description="Host RAM, GiB")


class AccessSpec(_Spec):
    """How gpuadvisor reaches the node: ssh (`ssh: user@host:port` or host/user/port) or a command prefix."""

    method: Optional[Literal["local", "ssh", "slurm", "prefix"]] = None
    ssh: Optional[str] = Field(None, description="user@host:port shorthand")
    host: Optional[str] = None
    user: Optional[str] = None
    port: Optional[int] = Field(None, ge=1, le=65535)
    identity_file: Optional[str] = None
    prefix: list[str] = Field(default_factory=list, description="e.g. [ip, netns, exec, n0]")
    address: Optional[str] = Field(None, description="Address other nodes use for rendezvous")
    ifname: Optional[str] = Field(None, description="NCCL/GLOO_SOCKET_IFNAME")


class NodeSpec(_Spec):
    """One node (or `count` identical nodes) in the concise format."""

    name: Optional[str] = Field(None, description="Node name (default node<i>); with count>1 a suffix is added")
    count: int = Field(1, ge=1, le=MAX_NODES, description="Number of identical nodes this entry stands for")
    gpus: Optional[Union[str, list[Union[str, GpuEntry]]]] = Field(
        None, description="'4x A6000', 'A40', or a list of names / {gpu: ...} entries")
    cpu_ranks: Optional[int] = Field(None, ge=1, le=MAX_CPU_RANKS,
                                     description="GPU-less node: number of CPU (gloo) ranks")
    topology: Optional[Union[str, list[list[str]], TopologySpec]] = Field(
        None, description="Link class for all pairs ('PXB', 'NV4'), a matrix, or a topology mapping")
    pcie: Optional[PcieSpec] = None
    device_rates: Optional[DeviceRates] = Field(None, description="Replace the catalog rates of the devices")
    nics: Optional[Union[str, list[Nic]]] = Field(
        None, description="'8x ib-hdr' (count x links.yaml network class: one rail per GPU in order) or a list of NICs")
    cpu: Optional[CpuSpec] = None
    access: Optional[Union[str, AccessSpec]] = Field(None, description="'user@host:port' or a mapping")


class NetworkSpec(_Spec):
    """The inter-node network: a links.yaml key, and/or explicit rates."""

    link: Optional[str] = Field(None, description="1gbe, 10gbe, 25gbe, 100gbe, roce-100g, ib-hdr, ib-ndr, ...")
    bandwidth_gb_per_s: Optional[LinkBandwidth] = None
    latency_us: Optional[Latency] = None
    protocol: Optional[Literal["tcp", "roce", "ib", "efa", "unknown"]] = None
    link_speed_gbit_per_s: Optional[LinkSpeed] = None
    nic: Optional[str] = Field(None, description="The one interface the job uses between nodes (no rails)")
    nics: Optional[Union[str, list[Nic]]] = Field(
        None, description="Every node's NICs unless it lists its own: '8x ib-hdr' or a list (rails, "
                          "docs/cluster-file.md)")
    rate_source: Literal["user", "measured"] = Field("user", description="Where explicit rates come from")


class ClusterFile(_Spec):
    """The concise cluster file."""

    model_config = ConfigDict(extra="forbid", title="gpuadvisor cluster file (concise form)")

    name: Optional[str] = Field(None, description="Cluster name (default: the file name)")
    source: Optional[str] = Field(None, description="Where the description comes from (datasheet, paper, capture)")
    notes: list[str] = Field(default_factory=list)
    defaults: Optional[NodeSpec] = Field(None, description="Fields every node inherits unless it sets them")
    nodes: list[NodeSpec] = Field(min_length=1)
    network: Optional[Union[str, NetworkSpec]] = Field(None, description="Required with more than one node")


class _FieldError(Exception):
    """An error at a location of the document (turned into 'file line N: path: msg')."""

    def __init__(self, loc: Loc, msg: str):
        super().__init__(msg)
        self.loc, self.msg = loc, msg


# ---------------------------------------------------------------- reading, with line numbers


def _line_map(node: yaml.Node, path: Loc = (), out: Optional[dict] = None) -> dict[Loc, int]:
    """Map every path in a composed YAML tree to its 1-based line."""
    out = {} if out is None else out
    out[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            key = k.value
            out[path + (key,)] = k.start_mark.line + 1
            if isinstance(v, (yaml.MappingNode, yaml.SequenceNode)):
                _line_map(v, path + (key,), out)
            else:
                out[path + (key,)] = v.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            _line_map(v, path + (i,), out)
    return out


def _fmt_loc(loc: Loc) -> str:
    s = ""
    for part in loc:
        s += f"[{part}]" if isinstance(part, int) else (f".{part}" if s else str(part))
    return s or "(top level)"


def _resolve(loc: Loc, lines: dict[Loc, int]) -> tuple[Loc, Optional[int]]:
    """The longest prefix of loc that names a place in the document, and its line."""
    clean: list = []
    best: tuple[Loc, Optional[int]] = ((), lines.get(()))
    for part in loc:
        cand = tuple(clean) + (part,)
        if cand in lines:
            clean.append(part)
            best = (cand, lines[cand])
        elif isinstance(part, str) and (part in ("str", "list", "int") or "[" in part or part[:1].isupper()
                                         or part.startswith("function")):
            continue  # pydantic union-branch labels
        else:
            clean.append(part)
            best = (tuple(clean), best[1])
    return best


def _user_error(fname: str, loc: Loc, msg: str, lines: dict[Loc, int]) -> UserError:
    path, line = _resolve(loc, lines)
    where = f"{fname} line {line}" if line else fname
    return UserError(f"{where}: {_fmt_loc(path)}: {msg}")


def _pydantic_error(fname: str, exc: ValidationError, lines: dict[Loc, int], base: Loc = ()) -> UserError:
    """The first (most specific) validation error as one line."""
    errs = exc.errors()
    # union errors come once per branch; prefer the one whose location resolves deepest
    # a typo (unknown field) explains a "missing" sibling: report it first
    err = max(errs, key=lambda e: (e["type"] == "extra_forbidden", len(_resolve(base + tuple(e["loc"]), lines)[0])))
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        msg = "unknown field; check the spelling (see docs/cluster-file.md)"
    elif err["type"] == "missing":
        msg = "required field is missing"
    elif err["type"] in ("greater_than", "greater_than_equal", "less_than_equal", "less_than", "finite_number"):
        msg = f"{msg} (got {err.get('input')!r}); give a real positive rate/size (units in docs/cluster-file.md)"
    return _user_error(fname, base + tuple(err["loc"]), msg, lines)


def _read(path: Path) -> tuple[Any, dict[Loc, int]]:
    """Parse YAML or JSON (bounded: size, aliases, duplicate keys; see safe_yaml), with its line map."""
    text = read_user_text(path, "cluster file")
    data, node = load_user_yaml_node(text, path.name)
    if not isinstance(data, dict):
        raise UserError(f"{path.name}: expected a mapping with 'nodes:' at the top level (docs/cluster-file.md)")
    data.pop("$schema", None)  # the editors' schema hint (JSON files), not part of the cluster
    return data, (_line_map(node) if node is not None else {})


def _is_full_form(data: dict) -> bool:
    nodes = data.get("nodes")
    return isinstance(nodes, list) and any(isinstance(n, dict) and "devices" in n for n in nodes)


# ---------------------------------------------------------------- expansion


_COUNT = re.compile(r"^\s*([-+]?\s*\d+(?:\.\d*)?)\s*[x×*]\s*(.+?)\s*$", re.IGNORECASE)


def _gpu_entries(gpus: Union[str, list], loc: Loc) -> list[GpuEntry]:
    """'4x A6000' / 'A40' / [names or entries] -> GpuEntry list."""
    if isinstance(gpus, str):
        m = _COUNT.match(gpus)
        if m is None and re.match(r"^\s*[-+]?\d", gpus):
            raise _FieldError(loc, f"'{gpus}': write '<count>x <GPU>', e.g. '4x A6000'")
        count, name = (m.group(1).replace(" ", ""), m.group(2)) if m else ("1", gpus.strip())
        if not count.lstrip("+").isdecimal() or not 1 <= int(count) <= MAX_DEVICES_PER_NODE:
            raise _FieldError(loc, f"'{gpus}': the count must be a whole number from 1 to {MAX_DEVICES_PER_NODE}")
        return [GpuEntry(gpu=name)] * int(count)
    out: list[GpuEntry] = []
    for item in gpus:
        if isinstance(item, str):
            out.extend(_gpu_entries(item, loc))
        else:
            out.append(item)
    return out


def _nics(spec: Union[str, list[Nic], None], devices: list[Device], loc: Loc) -> list[Nic]:
    """'8x ib-hdr' -> 8 rails named rail0..7, NIC i closest to the node's i-th device; a list -> each NIC
    rated from its `link` class, or its kind and speed (knowledge/links.yaml, hardware.catalog.rate_nic)."""
    if spec is None:
        return []
    if isinstance(spec, str):
        m = _COUNT.match(spec)
        if m is None and re.match(r"^\s*[-+]?\d", spec):
            raise _FieldError(loc, f"'{spec}': write '<count>x <network class>', e.g. '8x ib-hdr'")
        count, key = (m.group(1).replace(" ", ""), m.group(2)) if m else ("1", spec.strip())
        # NICs per node are bounded like devices per node (schemas/bounds.py)
        if not count.lstrip("+").isdecimal() or not 1 <= int(count) <= MAX_DEVICES_PER_NODE:
            raise _FieldError(loc, f"'{spec}': the NIC count must be a whole number from 1 to {MAX_DEVICES_PER_NODE}")
        try:
            nics = [nic_from_key(key, f"rail{i}", [devices[i].index] if i < len(devices) else [])
                    for i in range(int(count))]
        except (ValueError, UserError) as exc:
            raise _FieldError(loc, f"'{spec}': {exc}") from None
        return [_pcie_capped(n, devices) for n in nics]
    out = []
    for i, nic in enumerate(spec):
        try:
            out.append(_pcie_capped(rate_nic(nic), devices))
        except (ValueError, UserError) as exc:
            raise _FieldError(loc + (i, "link"), str(exc)) from None
    return out


def _pcie_capped(nic: Nic, devices: list[Device]) -> Nic:
    """A catalog-rated rail is at most the GPU-to-NIC PCIe path: GPUDirect RDMA moves the data from GPU memory
    through one PCIe switch (links.yaml PIX class) at the GPU's gen x width, e.g. a 400 Gb/s port next to an
    A100 (PCIe 4.0 x16: 31.5 GB/s x 0.80 = 25.2 GB/s) reaches 25.2, not the NDR/RoCE-400 rail rate."""
    if nic.bandwidth_gb_per_s is None or nic.rate_source != "catalog":
        return nic
    near = [d for d in devices if d.index in nic.closest_devices] or devices
    gens = [g for g in (d.pcie_gen_max or d.pcie_gen for d in near if d.kind == "gpu") if g]
    widths = [d.pcie_width_max or d.pcie_width or 16 for d in near if d.kind == "gpu"]
    if not gens:
        return nic
    cap = link_spec("PIX", pcie_gen=min(gens), pcie_width=min(widths), p2p=True).bandwidth_gb_per_s
    return nic if nic.bandwidth_gb_per_s <= cap else nic.model_copy(update={"bandwidth_gb_per_s": round(cap, 3)})


def _access(spec: Union[str, AccessSpec, None]) -> NodeAccess:
    if spec is None:
        return NodeAccess()
    if isinstance(spec, str):
        spec = AccessSpec(ssh=spec)
    fields = spec.model_dump(exclude={"ssh", "method"}, exclude_none=True)
    method = spec.method
    if spec.ssh:
        m = re.match(r"^(?:(?P<user>[^@]+)@)?(?P<host>[^:]+)(?::(?P<port>\d+))?$", spec.ssh)
        if not m:
            raise ValueError(f"'{spec.ssh}' is not user@host:port")
        fields.setdefault("host", m.group("host"))
        if m.group("user"):
            fields.setdefault("user", m.group("user"))
        if m.group("port"):
            fields.setdefault("port", int(m.group("port")))
    if method is None:
        method = "prefix" if spec.prefix else ("ssh" if fields.get("host") else "local")
    return NodeAccess(method=method, **fields)


def _cpu(spec: Optional[CpuSpec]) -> CpuInfo:
    if spec is None:
        return CpuInfo()
    return CpuInfo(model=spec.model, sockets=spec.sockets, cores=spec.cores, threads=spec.threads or spec.cores,
                   numa_nodes=spec.numa_nodes, ram_bytes=int(spec.ram_gib * GIB))


def _devices(spec: NodeSpec, cpu: CpuInfo, where: Loc) -> list[Device]:
    """The node's devices: GPUs from the catalog, or CPU ranks sharing host RAM."""
    if spec.gpus is not None and spec.cpu_ranks is not None:
        raise _FieldError(where + ("cpu_ranks",), "give either gpus or cpu_ranks, not both")
    if spec.cpu_ranks:
        if cpu.ram_bytes <= 0:
            raise _FieldError(where + ("cpu_ranks",), "CPU ranks share host RAM: set cpu.ram_gib for this node")
        cpu_spec = gpu_spec("cpu")
        return [device_from_spec(cpu_spec, i, memory_bytes=cpu.ram_bytes // spec.cpu_ranks)
                for i in range(spec.cpu_ranks)]
    if spec.gpus is None:
        raise _FieldError(where, "a node needs 'gpus: <N>x <GPU>' or 'cpu_ranks: N'")
    devices = []
    pcie = spec.pcie or PcieSpec()
    entries = _gpu_entries(spec.gpus, where + ("gpus",))
    if len(entries) > MAX_DEVICES_PER_NODE:
        raise _FieldError(where + ("gpus",), f"{len(entries)} GPUs in one node is above {MAX_DEVICES_PER_NODE}; "
                                             "split them into several nodes")
    for i, entry in enumerate(entries):
        try:
            gs = gpu_spec(entry.gpu)
        except UserError as exc:
            raise _FieldError(where + ("gpus",), str(exc)) from None
        mem = int(entry.memory_gib * GIB) if entry.memory_gib is not None else None
        devices.append(device_from_spec(gs, i, memory_bytes=mem, pcie_gen=entry.pcie_gen or pcie.gen,
                                        pcie_width=entry.pcie_width or pcie.width, numa_node=entry.numa_node))
    return devices


def _pair_key(text: str, n: int, loc: Loc) -> tuple[int, int]:
    m = re.match(r"^\s*(?:GPU)?(\d+)\s*[-,]\s*(?:GPU)?(\d+)\s*$", str(text), re.IGNORECASE)
    if not m:
        raise _FieldError(loc, f"pair '{text}' must look like '2-3'")
    a, b = int(m.group(1)), int(m.group(2))
    if a == b or not (0 <= a < n and 0 <= b < n):
        raise _FieldError(loc, f"pair '{text}' names a device outside 0..{n - 1} or itself")
    return min(a, b), max(a, b)


def _topology_tokens(topo: Any, n: int, base_dir: Path, loc: Loc
                     ) -> tuple[dict[tuple[int, int], str], TopologySpec, Optional[list[Optional[int]]]]:
    """Expand the topology field into a token per pair (a<b), the mapping form's options, and each device's PCIe
    switch tree where a capture file shows it (else None)."""
    if isinstance(topo, str):
        if "/" in topo or topo.endswith(".txt"):
            topo = TopologySpec(file=topo)
        else:
            topo = TopologySpec(link=topo)
    elif isinstance(topo, list):
        topo = TopologySpec(matrix=topo)
    elif topo is None:
        topo = TopologySpec()
    tokens: dict[tuple[int, int], str] = {}
    default = topo.link
    switches = None
    if topo.file:
        captured, switches = _tokens_from_capture(base_dir / topo.file, n, loc + ("file",))
        tokens.update(captured)
    if topo.matrix is not None:
        rows = topo.matrix
        if len(rows) != n or any(len(r) != n for r in rows):
            raise _FieldError(loc + ("matrix",), f"the matrix must be {n}x{n} for {n} devices")
        for i in range(n):
            for j in range(i + 1, n):
                if rows[i][j].strip().upper() != rows[j][i].strip().upper():
                    raise _FieldError(loc + ("matrix", i), f"not symmetric at {i}-{j}: {rows[i][j]} vs {rows[j][i]}")
                tokens[(i, j)] = rows[i][j]
    for key, tok in topo.pairs.items():
        tokens[_pair_key(key, n, loc + ("pairs", key))] = tok
    for i in range(n):
        for j in range(i + 1, n):
            tokens.setdefault((i, j), default or "unknown")
    return tokens, topo, switches


def _tokens_from_capture(path: Path, n: int, loc: Loc) -> tuple[dict[tuple[int, int], str], list[Optional[int]]]:
    """GPU pair tokens from a saved `nvidia-smi topo -m` capture, and each GPU's PCIe switch tree
    (probe.topo.pcie_switch_groups)."""
    from ..probe.topo import parse_topo, pcie_switch_groups

    try:
        matrix = parse_topo(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise _FieldError(loc, f"cannot read topology capture '{path}': {exc.strerror}") from None
    except UnicodeDecodeError:
        raise _FieldError(loc, f"topology capture '{path.name}' is not text: save `nvidia-smi topo -m > "
                               f"{path.name}` and point the file at it") from None
    except UserError as exc:
        raise _FieldError(loc, str(exc)) from None
    if len(matrix.gpus) != n:
        raise _FieldError(loc, f"capture '{path.name}' has {len(matrix.gpus)} GPUs but the node lists {n}")
    out = {}
    for i in range(n):
        for j in range(i + 1, n):
            link = matrix.gpu_link(i, j)
            out[(i, j)] = link.token if link else "unknown"
    return out, pcie_switch_groups(matrix)


def _node(spec: NodeSpec, name: str, base_dir: Path, where: Loc, notes: list[str],
          net_nics: Union[str, list[Nic], None] = None) -> Node:
    """Expand one concise node into a full Node (`net_nics`: the network section's NICs, unless it lists its own)."""
    cpu = _cpu(spec.cpu)
    devices = _devices(spec, cpu, where)
    if spec.device_rates is not None:
        r = spec.device_rates
        upd = {k: v for k, v in (("peak_tflops_bf16", r.tflops_bf16), ("peak_tflops_fp32", r.tflops_fp32),
                                 ("achieved_tflops", r.achieved_tflops),
                                 ("memory_bandwidth_gb_per_s", r.memory_bandwidth_gb_per_s),
                                 ("host_copy_gb_per_s", r.host_copy_gb_per_s)) if v is not None}
        devices = [d.model_copy(update={**upd, "rate_source": r.rate_source}) for d in devices]
    n = len(devices)
    topo_loc = where + ("topology",)
    switches: Optional[list[Optional[int]]] = None
    if spec.cpu_ranks and spec.topology is None:
        tokens, topo = {(i, j): "SHM" for i in range(n) for j in range(i + 1, n)}, TopologySpec()
    else:
        tokens, topo, switches = _topology_tokens(spec.topology, n, base_dir, topo_loc)
        if spec.topology is None and n > 1:
            notes.append(f"node {name}: no topology given; assumed 'unknown' (host-memory bounce rates)")
    per_switch = spec.pcie.devices_per_switch if spec.pcie else None
    if per_switch:
        switches = [i // per_switch * per_switch if per_switch > 1 else None for i in range(n)]
    if switches:
        devices = [d.model_copy(update={"pcie_switch": switches[d.index]}) for d in devices]
    links: list[DeviceLink] = []
    explicit = topo.bandwidth_gb_per_s is not None or topo.latency_us is not None
    for (i, j), tok in sorted(tokens.items()):
        try:
            links.append(device_link(devices[i], devices[j], tok, p2p=topo.p2p,
                                     bandwidth_gb_per_s=topo.bandwidth_gb_per_s, latency_us=topo.latency_us,
                                     rate_source=topo.rate_source if explicit else "catalog"))
        except ValueError as exc:
            raise _FieldError(topo_loc, f"pair {i}-{j}: {exc}") from None
    try:
        access = _access(spec.access)
    except ValueError as exc:
        raise _FieldError(where + ("access",), str(exc)) from None
    if spec.nics is not None:
        nics = _nics(spec.nics, devices, where + ("nics",))
    else:
        nics = _nics(net_nics, devices, ("network", "nics"))
    return Node(name=name, devices=devices, links=links, nics=nics, cpu=cpu, access=access)


def _network(spec: Union[str, NetworkSpec, None], loc: Loc) -> Optional[Network]:
    if spec is None:
        return None
    if isinstance(spec, str):
        spec = NetworkSpec(link=spec)
    try:
        if spec.link:
            net = network_from_key(spec.link, nic=spec.nic, bandwidth_gb_per_s=spec.bandwidth_gb_per_s,
                                   latency_us=spec.latency_us,
                                   rate_source=spec.rate_source if spec.bandwidth_gb_per_s or spec.latency_us
                                   else "catalog")
            upd = {k: v for k, v in (("protocol", spec.protocol), ("link_speed_gbit_per_s", spec.link_speed_gbit_per_s))
                   if v is not None}
            return net.model_copy(update=upd) if upd else net
    except ValueError as exc:
        raise _FieldError(loc + ("link",) if not isinstance(spec, str) else loc, str(exc)) from None
    if spec.nics is not None and spec.bandwidth_gb_per_s is None and spec.latency_us is None:
        key = _nics_class(spec.nics, loc + ("nics",))
        net = network_from_key(key, nic=spec.nic)
        return net.model_copy(update={"protocol": spec.protocol}) if spec.protocol else net
    if spec.bandwidth_gb_per_s is None or spec.latency_us is None:
        raise _FieldError(loc, "give 'link: <1gbe|25gbe|ib-hdr|...>' or both bandwidth_gb_per_s and latency_us")
    return Network(bandwidth_gb_per_s=spec.bandwidth_gb_per_s, latency_us=spec.latency_us,
                   protocol=spec.protocol or "unknown", link_speed_gbit_per_s=spec.link_speed_gbit_per_s,
                   nic=spec.nic, rate_source=spec.rate_source)


def _nics_class(spec: Union[str, list[Nic]], loc: Loc) -> str:
    """The links.yaml class of the network section's NICs (what `link:` defaults to when it lists rails)."""
    try:
        if isinstance(spec, str):
            m = _COUNT.match(spec)
            return rail_key(m.group(2) if m else spec.strip())
        first = next((n for n in (rate_nic(nic) for nic in spec) if n.link), None)
    except ValueError as exc:
        raise _FieldError(loc, str(exc)) from None
    if first is None or first.link is None:
        raise _FieldError(loc, "no NIC here has a catalog class; add 'link: <ib-hdr|roce-400g|...>' to the network")
    return first.link


def expand(doc: ClusterFile, *, default_name: str = "cluster", base_dir: Path = Path("."),
           source: Optional[str] = None) -> Cluster:
    """Expand a validated concise ClusterFile into the full Cluster (raises _FieldError on bad values)."""
    notes = list(doc.notes)
    nodes: list[Node] = []
    defaults = doc.defaults.model_dump(exclude_unset=True) if doc.defaults else {}
    defaults.pop("name", None)
    defaults.pop("count", None)
    devices = 0
    net_nics = doc.network.nics if isinstance(doc.network, NetworkSpec) else None
    for i, raw in enumerate(doc.nodes):
        own = raw.model_dump(exclude_unset=True)
        inherited = dict(defaults)
        if "cpu_ranks" in own:  # a node's own device kind replaces the inherited one
            inherited.pop("gpus", None)
        if "gpus" in own:
            inherited.pop("cpu_ranks", None)
        merged = NodeSpec.model_validate({**inherited, **own})
        where: Loc = ("nodes", i)
        if len(nodes) + merged.count > MAX_NODES:
            raise _FieldError(where + ("count",), f"more than {MAX_NODES} nodes in all; gpuadvisor models up to "
                                                  f"{MAX_NODES}")
        first: Optional[Node] = None
        for k in range(merged.count):
            if merged.name:
                name = merged.name if merged.count == 1 else f"{merged.name}{k}"
            else:
                name = f"node{len(nodes)}"
            if first is None:  # identical nodes: expand once, then copy under each name
                first = _node(merged, name, base_dir, where, notes, net_nics)
                devices += len(first.devices) * merged.count
                if devices > MAX_DEVICES:
                    raise _FieldError(where, f"the cluster would have {devices} devices, above the {MAX_DEVICES} "
                                             "gpuadvisor models")
                nodes.append(first)
            else:
                nodes.append(first.model_copy(update={"name": name}))
    network = _network(doc.network, ("network",))
    if len(nodes) > 1 and network is None:
        raise _FieldError(("network",), f"{len(nodes)} nodes need 'network: <1gbe|25gbe|ib-hdr|...>'")
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        raise _FieldError(("nodes",), f"node names must be unique, got {names}")
    return Cluster(name=doc.name or default_name, nodes=nodes, network=network,
                   source=source or doc.source or f"file:{default_name}", notes=notes)


def load_cluster(path: Union[str, Path]) -> Cluster:
    """Read a cluster file (concise or full form, YAML or JSON) into a validated Cluster.

    Errors are one-line UserErrors naming the file, line and field, e.g.
    `cluster.yaml line 7: nodes[1].gpus: unknown GPU 'A7000': ...`.
    """
    path = Path(path)
    data, lines = _read(path)
    fname = path.name
    if _is_full_form(data):
        try:
            return Cluster.model_validate(data)
        except ValidationError as exc:
            raise _pydantic_error(fname, exc, lines) from None
    try:
        doc = ClusterFile.model_validate(data)
    except ValidationError as exc:
        raise _pydantic_error(fname, exc, lines) from None
    try:
        return expand(doc, default_name=path.stem, base_dir=path.parent,
                      source=doc.source or f"file:{path}")
    except _FieldError as exc:
        raise _user_error(fname, exc.loc, exc.msg, lines) from None
    except ValidationError as exc:  # schema-level checks of the expanded Cluster
        raise UserError(f"{fname}: {' '.join(str(exc).split())}") from None


def cluster_from_dict(data: dict, *, name: str = "cluster", source: Optional[str] = None) -> Cluster:
    """A Cluster from a concise cluster-file document already in memory (a dict as YAML would load it).

    Same rules as load_cluster; errors are one-line UserErrors naming the field (no line numbers).
    """
    try:
        doc = ClusterFile.model_validate(data)
    except ValidationError as exc:
        raise _pydantic_error(name, exc, {}) from None
    try:
        return expand(doc, default_name=name, source=source or doc.source or f"dict:{name}")
    except _FieldError as exc:
        raise _user_error(name, exc.loc, exc.msg, {}) from None
    except ValidationError as exc:
        raise UserError(f"{name}: {' '.join(str(exc).split())}") from None


def save_cluster(cluster: Cluster, path: Union[str, Path]) -> Path:
    """Write the full form of `cluster` (YAML, or JSON when the name ends in .json); load_cluster reads it back."""
    path = Path(path)
    data = cluster.model_dump(mode="json", exclude_defaults=True)
    data.setdefault("name", cluster.name)
    data.setdefault("nodes", [])
    if path.suffix.lower() == ".json":
        text = json.dumps({"$schema": schema_uri(), **data}, indent=2) + "\n"
    else:
        text = (f"# yaml-language-server: $schema={schema_uri()}\n"
                "# gpuadvisor cluster file, full form (written by save_cluster)\n"
                + yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=110))
    path.write_text(text, encoding="utf-8")
    return path


def schema_uri() -> str:
    """file: URI of the shipped knowledge/cluster.schema.json, the editors' schema hint in saved cluster files."""
    from ..paths import knowledge_dir

    return (knowledge_dir() / "cluster.schema.json").resolve().as_uri()


def cluster_file_json_schema() -> dict:
    """The JSON Schema of cluster files (committed as knowledge/cluster.schema.json): either form.

    The concise form (`ClusterFile`, written by hand) or the full form (`Cluster`, what `save_cluster` and
    `gpuadvisor probe --save` write). Both accept a top-level `$schema` string, the hint for editors.
    """
    from pydantic.json_schema import models_json_schema

    _, defs = models_json_schema([(ClusterFile, "validation"), (Cluster, "validation")],
                                 ref_template="#/$defs/{model}")
    hint = {"type": "string", "description": "URI of this JSON Schema, for editors; ignored by gpuadvisor"}
    for name, title in (("ClusterFile", "concise form"), ("Cluster", "full form")):
        d = defs["$defs"][name]
        d["title"] = f"gpuadvisor cluster file ({title})"
        d["properties"] = {"$schema": hint, **d["properties"]}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://github.com/gpuadvisor/gpuadvisor/knowledge/cluster.schema.json",
        "title": "gpuadvisor cluster file",
        "description": "A cluster file: the concise form written by hand (docs/cluster-file.md), or the full form "
                       "that `gpuadvisor probe --save` writes (every device, link and rate spelled out).",
        "anyOf": [{"$ref": "#/$defs/ClusterFile"}, {"$ref": "#/$defs/Cluster"}],
        "$defs": defs["$defs"],
    }
