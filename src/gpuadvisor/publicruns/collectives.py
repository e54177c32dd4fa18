"""The cost model's collectives against public nccl-tests measurements (knowledge/measurements/public/nccl_busbw.csv).

    load_collectives() -> CollectiveRow -> CASES (the row's hardware as a cluster) -> Context.topo group ->
    comm.group_allreduce_s / reduce_scatter_s -> predicted vs measured time

Only rows whose hardware a cluster file can state and whose message size is given (or whose maximum is a
bandwidth-bound plateau: _plateau_size) are predicted: 8-GPU NVSwitch sweeps (A100, H200, B200), the NVLS GPU-count
sweep, multi-node all-reduce over InfiniBand/EFA rails, and PCIe boxes without P2P (a 2080 Ti pair, 4 and 8 RTX
5090s). `benchmarks/nccl_accuracy.py` prints the figures; docs/calibration.md explains them. The rows that set
a constant (knowledge/links.yaml rail rates, calibration network.*) are marked as such in CASES: for them the check
is of the size dependence, not of the rate.
"""
from __future__ import annotations

import csv
import dataclasses
import re
import statistics
from functools import lru_cache
from typing import Callable, Optional

from ..costmodel.analytical import Context
from ..costmodel.analytical.comm import group_allreduce_s, reduce_scatter_s
from ..schemas import Cluster
from .load import _int, _num, public_dir

GB = 1e9
#: Below this a collective is latency-bound (NCCL's LL protocols; the α term): summarised apart.
SMALL_BYTES = 8 * 2**20


@dataclasses.dataclass(frozen=True)
class CollectiveRow:
    """One nccl-tests measurement: `busbw` GB/s for a `size_bytes` buffer over `gpus` ranks (nccl-tests' bus
    bandwidth: all-reduce 2(n-1)/n, all-gather / reduce-scatter (n-1)/n of the size over the time)."""

    source_id: str
    ref: str
    gpu: str
    gpus: int
    nodes: int
    collective: str
    algo: str
    size_bytes: float
    busbw: float

    @property
    def factor(self) -> float:
        n = self.gpus
        return 2.0 * (n - 1) / n if self.collective == "all_reduce" else (n - 1) / n

    @property
    def measured_s(self) -> float:
        return self.factor * self.size_bytes / (self.busbw * GB)


#: nccl-tests' smallest swept size (-b 1g, -b 256M, -b 8), bytes in binary units as nccl-tests reads them
_SWEEP_MIN = re.compile(r"-b\s*(\d+)\s*([kKmMgG]?)\b")
_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}


def _plateau_size(row: dict) -> Optional[float]:
    """The size of a row that states only the maximum bus bandwidth of a sweep whose smallest size (nccl-tests -b) is
    1 GiB or more: that smallest size, where the latency term is under 0.1 % of the time, so the maximum is the
    bandwidth-bound rate at every size of the sweep (NVIDIA/nccl #1639's RTX 5090 rows, -b 1g -e 8g). None otherwise."""
    m = _SWEEP_MIN.search(row["tool"])
    if not row["statistic"].lower().startswith("max") or not m:
        return None
    size = int(m.group(1)) * _UNITS[m.group(2).lower()]
    return float(size) if size >= 2**30 else None


def load_collectives() -> list[CollectiveRow]:
    """Every nccl_busbw.csv row with a size (or a bandwidth-bound plateau: _plateau_size), a bus bandwidth and a GPU
    count (others say a range, or a maximum over small sizes too)."""
    out = []
    with open(public_dir() / "nccl_busbw.csv", encoding="utf-8", newline="") as fh:
        for i, r in enumerate(csv.DictReader(fh), start=2):
            size = _num(r["size_bytes"]) or _plateau_size(r)
            bus, n = _num(r["busbw_GBps"]), _int(r["gpus_total"])
            if not (size and bus and n and n > 1):
                continue
            out.append(CollectiveRow(r["source_id"], f"nccl_busbw.csv:{i}", r["gpu"], n, _int(r["nodes"]) or 1,
                                     r["collective"], r["algo"], size, bus))
    return out


def _node(gpus: str, topology: object, nodes: int = 1, nics: Optional[str] = None, **extra) -> dict:
    """A cluster file (concise form) of `nodes` alike nodes, with `nics` rails when there are several."""
    data: dict = {"name": "nccl-tests", "defaults": {"gpus": gpus, "topology": topology, **extra},
                  "nodes": [{"name": "n", "count": nodes}]}
    if nodes > 1:
        data["network"] = {"nics": nics}
    return data


@dataclasses.dataclass(frozen=True)
class Case:
    """A source's hardware as a cluster file (`nodes` of them), which of its rows it covers, and what the rows set
    in knowledge/ (empty: an independent check)."""

    source_id: str
    cluster: Callable[[int], dict]  # the cluster file for a row's node count
    covers: Callable[[CollectiveRow], bool]
    sets: str = ""
    note: str = ""


def _gpu(prefix: str) -> Callable[[CollectiveRow], bool]:
    return lambda r: r.gpu.startswith(prefix)


#: What each source ran on, as gpuadvisor's cluster files state it.
CASES: tuple[Case, ...] = (
    Case("mleng_a100_nvlink3_allreduce", lambda k: _node("8x A100-SXM4-80GB", "NV12"), _gpu("A100"),
         sets="links.yaml nvlink latency_us (checked, not fitted)"),
    Case("mleng_h200_nvlink4_allreduce", lambda k: _node("8x H200", "NV18"), _gpu("H200"),
         sets="calibration network.nvls_bw_factor (with the GPU-count sweep)"),
    Case("mleng_nvls_gpu_count_sweep", lambda k: _node("8x H200", "NV18"), _gpu("H200"),
         sets="calibration network.nvls_bw_factor"),
    Case("mleng_nvls_gpu_count_sweep", lambda k: _node("8x B200", "NV18"), _gpu("B200"),
         sets="calibration network.nvls_bw_factor"),
    Case("mleng_h200_collectives_16gib", lambda k: _node("8x H200", "NV18"), _gpu("H200"),
         sets="calibration network.nvls_bw_factor"),
    Case("mleng_h200_latency_comp", lambda k: _node("8x H200", "NV18"), _gpu("H200")),
    Case("mleng_b200_efa_1v4_nodes", lambda k: _node("8x B200", "NV18", k, "8x efa-400g"), _gpu("B200"),
         sets="links.yaml efa-400g-rail (rate at 8-16 GiB, latency on 1-16 MiB)"),
    Case("mleng_p5en_4node_algo", lambda k: _node("8x H200", "NV18", k, "16x efa-200g"),
         lambda r: "nvlstree" not in r.algo.lower(),
         sets="links.yaml efa-200g-rail; calibration network.nccl_tree_bw_factor (its NVLSTree row, left out)"),
    Case("nccl_tests_issue_119", lambda k: _node("8x A100-SXM4-40GB", "NV12", k, "4x ib-hdr"), _gpu("A100"),
         sets="links.yaml ib-hdr-rail (24 GB/s per port)"),
    Case("nccl_issue_1639_rtx5090", lambda k: _node("8x RTX 5090", "SYS", pcie={"gen": 5, "width": 16}),
         _gpu("RTX 5090"), note="GeForce: no P2P, every pair bounces through host memory (links.yaml no_p2p); the "
                                "8 GPUs span two Xeon 8480+ sockets, the 4-GPU row's placement is not stated"),
    Case("autodl_2080ti_pcie_nop2p",
         lambda k: _node("2x RTX 3090", {"link": "PIX", "p2p": False}, pcie={"gen": 3, "width": 16}),
         _gpu("RTX 2080"), note="RTX 2080 Ti is not in knowledge/gpus.yaml: an RTX 3090 in a PCIe 3.0 x16 slot "
                                  "stands in (the link, not the GPU, sets an all-reduce without P2P)"),
)


@lru_cache(maxsize=None)
def _context(case: int, nodes: int) -> Context:
    from ..hardware.cluster_file import cluster_from_dict
    from ..workload.settings import make_workload

    cl: Cluster = cluster_from_dict(CASES[case].cluster(nodes), name=CASES[case].source_id)
    return Context(cl, make_workload("124M"))  # the model is not priced: only the cluster's groups are


@dataclasses.dataclass(frozen=True)
class CollectiveOutcome:
    row: CollectiveRow
    case: Case
    predicted_s: float

    @property
    def ratio(self) -> float:
        """predicted / measured time."""
        return self.predicted_s / self.row.measured_s

    @property
    def predicted_busbw(self) -> float:
        return self.row.factor * self.row.size_bytes / self.predicted_s / GB


def predict_row(row: CollectiveRow, case_index: int) -> float:
    """Seconds the cost model gives the row's collective on its case's cluster: the whole world as one data-parallel
    group (ranks on nodes in order). All-reduce takes NCCL's choice (ring, tree across nodes, NVLS inside an NVLS
    node), or the ring alone where the row forced it (NCCL_ALGO ring, NCCL_NVLS_ENABLE=0); all-gather and
    reduce-scatter the ring."""
    ctx = _context(case_index, row.nodes)
    gpn = row.gpus // row.nodes
    g = ctx.topo.group("dp", row.gpus, 1, 1, row.nodes, gpn, "tp-dp-pp")
    if row.collective in ("all_gather", "reduce_scatter"):
        return float(reduce_scatter_s(row.size_bytes, g.n, g.bw_gb_per_s, g.latency_us, g.nodes, g.intra_lat))
    algo = row.algo.lower()
    ring = "nvls_enable=0" in algo or "allreduce:ring" in algo
    return group_allreduce_s(row.size_bytes, g, ctx.hier_min, 0.0 if ring else ctx.tree_bw,
                             0.0 if ring else ctx.nvls_factor)


def evaluate_collectives(rows: Optional[list[CollectiveRow]] = None) -> list[CollectiveOutcome]:
    """Every row a case covers (all-reduce, all-gather, reduce-scatter), predicted."""
    out = []
    for r in load_collectives() if rows is None else rows:
        if r.collective not in ("all_reduce", "all_gather", "reduce_scatter"):
            continue
        for i, c in enumerate(CASES):
            if c.source_id == r.source_id and c.covers(r):
                out.append(CollectiveOutcome(r, c, predict_row(r, i)))
                break
    return out


def summarize_collectives(outcomes: list[CollectiveOutcome]) -> list[dict]:
    """Per source (and GPU): rows, the median predicted/measured time and the mean |error| of the time, for
    bandwidth-bound buffers (>= SMALL_BYTES) and latency-bound ones apart."""
    groups: dict[tuple[str, str], list[CollectiveOutcome]] = {}
    for o in outcomes:
        groups.setdefault((o.row.source_id, o.row.gpu.split(" ")[0]), []).append(o)

    def mape(xs: list[CollectiveOutcome]) -> Optional[float]:
        return 100.0 * statistics.fmean(abs(o.ratio - 1.0) for o in xs) if xs else None
    table = []
    for (sid, gpu), xs in groups.items():
        big = [o for o in xs if o.row.size_bytes >= SMALL_BYTES]
        small = [o for o in xs if o.row.size_bytes < SMALL_BYTES]
        table.append({"source": sid, "gpu": gpu, "rows": len(xs), "median_ratio": statistics.median(
            o.ratio for o in xs), "mape_large_pct": mape(big), "rows_large": len(big), "mape_small_pct": mape(small),
            "rows_small": len(small), "sets": xs[0].case.sets})
    return table
