"""Build the one-node Cluster of this host from a ProbeReport (and optionally a MeasureReport).

Policy for GPUs the catalog does not know (documented in docs/cluster-file.md):
- NVML must report the memory, else UserError (the memory model cannot work without it);
- the rates are borrowed from the slowest catalog GPU of the same compute capability, marked
  rate_source='assumed', with a note in Cluster.notes; measured matmul rates replace them;
- with neither a catalog entry of that compute capability nor a measurement: UserError.
Measured rates always override catalog ones and set rate_source='measured'.
"""
from __future__ import annotations

from typing import Optional

from ..errors import UserError
from ..knowledge import GpuSpec, find_gpu, gpu_spec, load_gpus
from ..probe.topo import pcie_switch_groups
from ..schemas.hardware import Cluster, Device, DeviceLink, LinkClass, Node, RateSource
from ..schemas.measure import CollectiveCurve, MatmulCurve, MeasureReport
from ..schemas.probe import GpuInfo, ProbeReport
from .catalog import device_from_spec, device_link

_BF16_DTYPES = ("bfloat16", "bf16", "float16", "fp16", "half")


def _stand_in(g: GpuInfo) -> Optional[GpuSpec]:
    """The slowest catalog GPU with the same compute capability (conservative borrowed rates)."""
    same = [s for s in load_gpus() if s.kind == "gpu" and g.compute_capability
            and s.compute_capability == g.compute_capability]
    return min(same, key=lambda s: s.tflops_bf16) if same else None


def _matmul_for(measured: Optional[MeasureReport], device: str, bf16: bool) -> Optional[MatmulCurve]:
    """The best matmul curve measured on `device` ('cuda:0', 'cpu') for bf16/fp16 or fp32."""
    if measured is None:
        return None
    curves = [c for c in measured.matmul if c.device == device
              and ((c.dtype.lower() in _BF16_DTYPES) == bf16)]
    return max(curves, key=lambda c: c.best_tflops) if curves else None


def _gpu_device(g: GpuInfo, measured: Optional[MeasureReport], notes: list[str]) -> Device:
    """One probed GPU -> Device with catalog (or borrowed) rates, NVML facts and measured overrides."""
    label = g.name or f"GPU{g.index}"
    spec = find_gpu(g.name) if g.name else None
    rate_source: RateSource = "catalog"
    if spec is None:
        if g.memory_total_bytes is None:
            raise UserError(
                f"unknown GPU '{label}' and NVML reports no memory size: add it to knowledge/gpus.yaml "
                "or describe the node in a cluster file (docs/cluster-file.md)"
            )
        spec = _stand_in(g)
        mm = _matmul_for(measured, f"cuda:{g.index}", bf16=True)
        if spec is None and mm is None:
            raise UserError(f"unknown GPU '{label}': add it to knowledge/gpus.yaml (knowledge/README.md) or name "
                            "the nearest known GPU and override its rates with device_rates in a cluster file")
        if spec is None:
            spec = gpu_spec("cpu")  # placeholder rates, replaced by the measurement below
        rate_source = "assumed"
        notes.append(
            f"GPU{g.index} '{label}' is not in knowledge/gpus.yaml: rates borrowed from '{spec.key}' "
            f"(compute capability {g.compute_capability}); add it to knowledge/gpus.yaml for accurate rates"
        )
    dev = device_from_spec(
        spec, g.index,
        memory_bytes=g.memory_total_bytes,
        pcie_gen=g.pcie_gen, pcie_width=g.pcie_width,
        rate_source=rate_source,
        uuid=g.uuid, memory_free_bytes=g.memory_free_bytes, compute_capability=g.compute_capability,
        pcie_gen_max=g.pcie_gen_max, pcie_width_max=g.pcie_width_max, numa_node=g.numa_node,
        mig_enabled=g.mig_enabled,
    )
    update: dict = {}
    if g.name and dev.name != g.name:
        update["name"] = g.name
    if rate_source == "assumed":
        update["spec_key"] = None
    mm16 = _matmul_for(measured, f"cuda:{g.index}", bf16=True)
    mm32 = _matmul_for(measured, f"cuda:{g.index}", bf16=False)
    best = mm16 or mm32
    if best is not None:
        update["achieved_tflops"] = best.best_tflops
        update["rate_source"] = "measured"
        if rate_source == "assumed":  # no datasheet peak: the measurement is the best peak we have
            if mm16:
                update["peak_tflops_bf16"] = mm16.best_tflops
            if mm32:
                update["peak_tflops_fp32"] = mm32.best_tflops
    return dev.model_copy(update=update) if update else dev


def _p2p(report: ProbeReport, a: int, b: int) -> Optional[bool]:
    """NVML P2P read+write capability for a pair, None when not reported."""
    for st in report.p2p:
        if {st.a, st.b} == {a, b}:
            if st.read is None and st.write is None:
                return None
            return bool(st.read) and bool(st.write)
    return None


def _host_copy(measured: Optional[MeasureReport]) -> Optional[float]:
    """The pinned host<->device copy rate probes/hostcopy.py measured, the slower direction (ZeRO-Offload's traffic
    goes both ways), at its largest buffer; None without a pinned measurement of each direction."""
    if measured is None:
        return None
    best: dict[str, tuple[int, float]] = {}
    for c in measured.copies:
        if c.pinned and c.gb_per_s > 0 and c.size_bytes >= best.get(c.direction, (-1, 0.0))[0]:
            best[c.direction] = (c.size_bytes, c.gb_per_s)
    return min(v[1] for v in best.values()) if len(best) == 2 else None


def _group_curve(measured: Optional[MeasureReport], backend: str, world: int) -> Optional[CollectiveCurve]:
    """A one-node all_reduce sweep over the whole node, if measured."""
    if measured is None:
        return None
    for c in measured.collectives:
        if c.op == "all_reduce" and c.backend == backend and c.world_size == world and c.nodes == 1:
            return c
    return None


def _busbw(curve: CollectiveCurve) -> float:
    return curve.busbw_gb_per_s or max(p.busbw_gb_per_s for p in curve.points)


def _apply_measured_links(links: list[DeviceLink], curve: Optional[CollectiveCurve], n: int) -> list[DeviceLink]:
    """Scale the links so the slowest equals the measured ring busbw; alpha per step from the fit."""
    if curve is None or not links or not curve.points:
        return links
    scale = _busbw(curve) / min(link.bandwidth_gb_per_s for link in links)
    alpha = curve.alpha_us / (2 * (n - 1)) if curve.alpha_us else None
    return [link.model_copy(update={
        "bandwidth_gb_per_s": round(link.bandwidth_gb_per_s * scale, 4),
        "latency_us": alpha if alpha is not None else link.latency_us,
        "rate_source": "measured",
    }) for link in links]


def _gpu_links(report: ProbeReport, devices: list[Device], notes: list[str]) -> list[DeviceLink]:
    """A DeviceLink per GPU pair from the topology matrix, NVML P2P and the link catalog."""
    topo = report.topology
    if topo is None and len(devices) > 1:
        notes.append(f"no topology ({report.topology_error or 'nvidia-smi topo -m unavailable'}); "
                     "assumed 'unknown' links (host-memory bounce rates)")
    links = []
    for i, a in enumerate(devices):
        for b in devices[i + 1:]:
            tl = None
            if topo is not None and a.index < len(topo.gpus) and b.index < len(topo.gpus):
                tl = topo.gpu_link(a.index, b.index)
            cls = tl.link_class if tl else LinkClass.UNKNOWN
            count = tl.nvlink_count if tl else 0
            links.append(device_link(a, b, cls, nvlink_count=count, p2p=_p2p(report, a.index, b.index)))
    return links


def _cpu_devices(report: ProbeReport, ranks: int, measured: Optional[MeasureReport]) -> list[Device]:
    """CPU (gloo) ranks sharing host RAM; measured matmul rates override the 'cpu' catalog entry."""
    ram = report.cpu.ram_bytes
    if ram <= 0:
        raise UserError(f"host '{report.hostname}': RAM size unknown, so CPU ranks have no memory budget; "
                        "describe the node in a cluster file with cpu.ram_gib")
    spec = gpu_spec("cpu")
    mm = _matmul_for(measured, "cpu", bf16=False) or _matmul_for(measured, "cpu", bf16=True)
    devices = []
    for i in range(ranks):
        dev = device_from_spec(spec, i, memory_bytes=ram // ranks)
        if mm is not None:
            dev = dev.model_copy(update={"peak_tflops_fp32": mm.best_tflops, "peak_tflops_bf16": mm.best_tflops,
                                         "achieved_tflops": mm.best_tflops, "rate_source": "measured"})
        devices.append(dev)
    return devices


def cluster_from_probe(
    report: ProbeReport,
    *,
    cpu_ranks: Optional[int] = None,
    measured: Optional[MeasureReport] = None,
    name: Optional[str] = None,
) -> Cluster:
    """The one-node Cluster of a probed host.

    Args:
        report: the inventory probe's report (GPUs from NVML, topology matrix, P2P, NICs, CPU/RAM).
        cpu_ranks: on a host without GPUs, model this many CPU (gloo) ranks sharing host RAM; ignored
            when there are GPUs. Without GPUs and without cpu_ranks: UserError.
        measured: a MeasureReport from the measuring probes; its matmul best_tflops and all_reduce busbw
            override catalog rates (rate_source='measured').
        name: cluster name (default: the hostname).

    Returns:
        A validated Cluster with source 'probe'; notes say what was assumed.
    """
    notes: list[str] = list(report.warnings)
    if report.gpus:
        gpus = sorted(report.gpus, key=lambda g: g.index)
        devices = [_gpu_device(g, measured, notes) for g in gpus]
        copy = _host_copy(measured)
        if copy is not None:  # measured on one device (cuda:0) alone: the node's slots are taken to be alike
            devices = [d.model_copy(update={"host_copy_gb_per_s": copy}) for d in devices]
        if report.topology is not None:
            switches = pcie_switch_groups(report.topology)
            devices = [d.model_copy(update={"pcie_switch": switches[d.index]}) if d.index < len(switches) else d
                       for d in devices]
        links = _gpu_links(report, devices, notes)
        links = _apply_measured_links(links, _group_curve(measured, "nccl", len(devices)), len(devices))
    else:
        if not cpu_ranks:
            reason = report.nvml_error or "NVML reports no GPU"
            raise UserError(f"host '{report.hostname}' has no GPU ({reason}); pass --cpu-ranks N to model CPU ranks")
        devices = _cpu_devices(report, cpu_ranks, measured)
        links = [device_link(a, b, LinkClass.SHM) for i, a in enumerate(devices) for b in devices[i + 1:]]
        links = _apply_measured_links(links, _group_curve(measured, "gloo", len(devices)), len(devices))
    nics = [n for n in report.nics if n.kind != "loopback"]
    node = Node(name=report.hostname, devices=devices, links=links, nics=nics, cpu=report.cpu)
    return Cluster(name=name or report.hostname, nodes=[node], network=None, source="probe", notes=notes)
