"""Input bounds shared by the hardware schema and the cluster-file format: positive, finite, plausible.

A value outside these is a typo or a unit mistake (GB/s written as Gbit/s * 1000, bytes as GiB...),
not hardware anyone has; pydantic turns a violation into one error naming the field.
"""
from __future__ import annotations

from typing import Annotated

from pydantic import Field

MAX_DEVICES_PER_NODE = 1024  # the largest single system image sold today is 72-576 GPUs
MAX_NODES = 16_384
MAX_DEVICES = 131_072
MAX_CPU_RANKS = 1024
MAX_MEMORY_GIB = 65_536.0  # per device (or per host for RAM)
MAX_TFLOPS = 100_000.0  # per device, dense
MAX_MEM_BW_GB_PER_S = 100_000.0
MAX_LINK_GB_PER_S = 100_000.0
MAX_LATENCY_US = 10_000_000.0  # 10 s
MAX_LINK_GBIT_PER_S = 100_000.0

PositiveRate = Annotated[float, Field(gt=0, allow_inf_nan=False)]
TFlops = Annotated[float, Field(gt=0, le=MAX_TFLOPS, allow_inf_nan=False)]
MemBandwidth = Annotated[float, Field(gt=0, le=MAX_MEM_BW_GB_PER_S, allow_inf_nan=False)]
LinkBandwidth = Annotated[float, Field(gt=0, le=MAX_LINK_GB_PER_S, allow_inf_nan=False)]
Latency = Annotated[float, Field(ge=0, le=MAX_LATENCY_US, allow_inf_nan=False)]
LinkSpeed = Annotated[float, Field(gt=0, le=MAX_LINK_GBIT_PER_S, allow_inf_nan=False)]
MemoryGiB = Annotated[float, Field(gt=0, le=MAX_MEMORY_GIB, allow_inf_nan=False)]
RamGiB = Annotated[float, Field(ge=0, le=MAX_MEMORY_GIB * 64, allow_inf_nan=False)]
MemoryBytes = Annotated[int, Field(gt=0, le=int(MAX_MEMORY_GIB * 2 ** 30))]
Count = Annotated[int, Field(ge=1, le=1_000_000)]
Index = Annotated[int, Field(ge=0, le=1_000_000)]
PcieGen = Annotated[int, Field(ge=1, le=8)]
PcieWidth = Annotated[int, Field(ge=1, le=32)]

__all__ = [n for n in dir() if n.isupper() or n[:1].isupper()]
