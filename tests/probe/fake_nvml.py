"""A fake NVML with the pynvml API: GPUs as data, and any call made to raise any NVMLError kind."""
from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Optional

import pynvml


@dataclass
class FakeGpu:
    """One fake GPU's answers."""

    name: Any = "NVIDIA A40"
    uuid: Any = "GPU-00000000-0000-0000-0000-000000000000"
    total: int = 48 * 1024**3
    free: int = 47 * 1024**3
    cc: tuple[int, int] = (8, 6)
    pcie: tuple[int, int, int, int] = (4, 16, 4, 16)  # gen, width, gen max, width max
    nvlink_states: Optional[list[int]] = None  # None: NotSupported on link 0
    mig: Optional[list[int]] = None  # None: NotSupported
    numa: int = 0


@dataclass
class FakeNVML:
    """Mimics pynvml: module-level functions, constants and the NVMLError hierarchy."""

    gpus: list[FakeGpu] = field(default_factory=list)
    raises: dict[tuple[str, Optional[int]], BaseException] = field(default_factory=dict)
    p2p: dict[tuple[int, int, int], int] = field(default_factory=dict)  # (a, b, caps index) -> status
    driver: Any = "550.54.15"
    cuda: int = 12040
    calls: list[str] = field(default_factory=list)
    shutdown_called: bool = False

    NVMLError = pynvml.NVMLError
    NVML_P2P_CAPS_INDEX_READ = pynvml.NVML_P2P_CAPS_INDEX_READ  # the real (0,) tuple
    NVML_P2P_CAPS_INDEX_WRITE = pynvml.NVML_P2P_CAPS_INDEX_WRITE
    NVML_NVLINK_MAX_LINKS = 18
    NVML_DEVICE_MIG_ENABLE = 1

    def _check(self, fname: str, index: Optional[int] = None) -> None:
        """Raise the injected error for (function, gpu index) or (function, None)."""
        self.calls.append(fname)
        for key in ((fname, index), (fname, None)):
            if key in self.raises:
                raise self.raises[key]

    def nvmlInit(self):
        self._check("nvmlInit")

    def nvmlShutdown(self):
        self.shutdown_called = True
        self._check("nvmlShutdown")

    def nvmlSystemGetDriverVersion(self):
        self._check("nvmlSystemGetDriverVersion")
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self):
        self._check("nvmlSystemGetCudaDriverVersion")
        return self.cuda

    def nvmlDeviceGetCount(self):
        self._check("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        self._check("nvmlDeviceGetHandleByIndex", i)
        return ("handle", i)

    def _gpu(self, fname: str, handle) -> FakeGpu:
        """Look up the GPU behind a handle, raising any injected error first."""
        self._check(fname, handle[1])
        return self.gpus[handle[1]]

    def nvmlDeviceGetName(self, h):
        return self._gpu("nvmlDeviceGetName", h).name

    def nvmlDeviceGetUUID(self, h):
        return self._gpu("nvmlDeviceGetUUID", h).uuid

    def nvmlDeviceGetMemoryInfo(self, h):
        g = self._gpu("nvmlDeviceGetMemoryInfo", h)
        return SimpleNamespace(total=g.total, free=g.free, used=g.total - g.free)

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return self._gpu("nvmlDeviceGetCudaComputeCapability", h).cc

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return self._gpu("nvmlDeviceGetCurrPcieLinkGeneration", h).pcie[0]

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return self._gpu("nvmlDeviceGetCurrPcieLinkWidth", h).pcie[1]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return self._gpu("nvmlDeviceGetMaxPcieLinkGeneration", h).pcie[2]

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return self._gpu("nvmlDeviceGetMaxPcieLinkWidth", h).pcie[3]

    def nvmlDeviceGetNvLinkState(self, h, link):
        g = self._gpu("nvmlDeviceGetNvLinkState", h)
        if g.nvlink_states is None:
            raise pynvml.NVMLError_NotSupported()
        if link >= len(g.nvlink_states):
            raise pynvml.NVMLError_InvalidArgument()
        return g.nvlink_states[link]

    def nvmlDeviceGetMigMode(self, h):
        g = self._gpu("nvmlDeviceGetMigMode", h)
        if g.mig is None:
            raise pynvml.NVMLError_NotSupported()
        return g.mig

    def nvmlDeviceGetNumaNodeId(self, h):
        return self._gpu("nvmlDeviceGetNumaNodeId", h).numa

    def nvmlDeviceGetP2PStatus(self, h1, h2, index):
        if not isinstance(index, int):  # the real binding hands this to ctypes as c_uint
            raise TypeError(f"p2p caps index must be an int, got {index!r}")
        self._check("nvmlDeviceGetP2PStatus", h1[1])
        return self.p2p.get((h1[1], h2[1], index), 0)
