"""What the measuring probes (probes/*.py) report: collective bandwidth, GEMM rate, copy bandwidth."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from ._base import Frozen

CollectiveOp = Literal["all_reduce", "all_gather", "reduce_scatter", "send_recv"]


class BandwidthPoint(Frozen):
    """One message size of a collective sweep (nccl-tests conventions: algbw = S/t, busbw = algbw·factor)."""

    size_bytes: int
    time_s: float = Field(description="Median time of one call")
    algbw_gb_per_s: float
    busbw_gb_per_s: float


class CollectiveCurve(Frozen):
    """A size sweep of one collective over a group, with a fitted alpha-beta model."""

    op: CollectiveOp
    backend: str = Field(description="nccl or gloo")
    world_size: int
    nodes: int = 1
    dtype: str = "float32"
    points: list[BandwidthPoint]
    alpha_us: Optional[float] = Field(None, description="Fitted per-call latency")
    busbw_gb_per_s: Optional[float] = Field(None, description="Fitted asymptotic bus bandwidth")


class MatmulPoint(Frozen):
    m: int
    n: int
    k: int
    time_s: float
    tflops: float


class MatmulCurve(Frozen):
    """GEMM efficiency over shapes on one device."""

    device: str = Field(description="cuda:0 or cpu")
    device_name: str = ""
    dtype: str
    threads: Optional[int] = Field(None, description="torch intra-op threads (CPU)")
    points: list[MatmulPoint]
    best_tflops: float


class CopyBandwidth(Frozen):
    """Host<->device copy bandwidth."""

    direction: Literal["h2d", "d2h"]
    pinned: bool
    size_bytes: int
    gb_per_s: float


class MeasureReport(Frozen):
    """Everything `gpuadvisor probe --measure` measured on one host (or across nodes)."""

    hostname: str
    device_kind: Literal["gpu", "cpu"]
    world_size: int
    collectives: list[CollectiveCurve] = Field(default_factory=list)
    matmul: list[MatmulCurve] = Field(default_factory=list)
    copies: list[CopyBandwidth] = Field(default_factory=list)
    torch_version: Optional[str] = None
    command: str = Field("", description="How it was measured (provenance)")
    warnings: list[str] = Field(default_factory=list)
