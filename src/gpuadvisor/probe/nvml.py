"""Read GPUs through NVML (the `pynvml` module of nvidia-ml-py), never crashing on odd hardware.

Every field is optional: a call that raises NVMLError records `Missing(field, "<Kind>: <message>")`, e.g.
`NotSupported: Not Supported`, `NoPermission: Insufficient Permissions`, `GpuIsLost: GPU is lost`. No
library, no driver or no GPU is a normal result with `error` saying why. The NVML module is a parameter,
so tests pass a fake with the pynvml API that raises each NVMLError kind.
"""
from __future__ import annotations

import ctypes
import sys
from typing import Any, Optional

from pydantic import Field

from ..schemas._base import Frozen
from ..schemas.probe import GpuInfo, Missing, P2PStatus

__all__ = ["NvmlReading", "read_nvml", "load_pynvml", "error_reason"]

# nvmlGpuP2PStatus_t values (nvml.h) -> readable reason
_P2P_STATUS = {
    0: "OK",
    1: "chipset not supported",
    2: "GPU not supported",
    3: "IOH topology not supported",
    4: "disabled by regkey",
    5: "not supported",
    6: "unknown",
}
_P2P_UNKNOWN = 6
_MIG_ENABLE = 1  # NVML_DEVICE_MIG_ENABLE
_MAX_NVLINKS = 18  # NVML_NVLINK_MAX_LINKS on older bindings; newer ones export the constant


class NvmlReading(Frozen):
    """What NVML said about this host: GPUs, P2P between each pair, versions, or why it said nothing."""

    gpus: list[GpuInfo] = Field(default_factory=list)
    p2p: list[P2PStatus] = Field(default_factory=list)
    driver_version: Optional[str] = None
    cuda_version: Optional[str] = Field(None, description="Highest CUDA version the driver supports, e.g. 12.4")
    error: Optional[str] = Field(None, description="Why NVML gave nothing (no library, no GPU...)")
    missing: list[Missing] = Field(default_factory=list, description="Host-level fields NVML did not give")


#: The library pynvml opens on Linux (pynvml._LoadNvmlLibrary: CDLL("libnvidia-ml.so.1"))
_LINUX_NVML = "libnvidia-ml.so.1"


def nvml_library_missing() -> Optional[str]:
    """On Linux, why NVML's shared library cannot be opened (None if it can, or on another OS).

    The check pynvml's nvmlInit would make first, without importing pynvml: its 5,000 lines of ctypes
    structures take ~50 ms to import, a tenth of `gpuadvisor suggest` on a machine without a GPU, where
    the answer is always the same. The text is pynvml's NVMLError_LibraryNotFound in error_reason's form.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        ctypes.CDLL(_LINUX_NVML)
    except OSError:
        return "LibraryNotFound: NVML Shared Library Not Found"
    return None


def load_pynvml() -> Any:
    """Import pynvml, or return None when nvidia-ml-py is not installed."""
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def error_reason(exc: BaseException) -> str:
    """`NotSupported: Not Supported` style text for an NVMLError (or any exception)."""
    name = type(exc).__name__
    kind = name[len("NVMLError_"):] if name.startswith("NVMLError_") else name
    try:
        msg = str(exc)
    except Exception:  # a broken __str__ must not break the probe
        msg = ""
    msg = " ".join(msg.split())
    return f"{kind}: {msg}" if msg and msg != kind else kind


class _Reader:
    """Calls NVML functions, turning each failure into a Missing entry."""

    def __init__(self, nvml: Any):
        self.nvml = nvml
        err = getattr(nvml, "NVMLError", None)
        self.errors: tuple[type[BaseException], ...] = (
            (err,) if isinstance(err, type) and issubclass(err, BaseException) else ()
        ) + (AttributeError, TypeError, ValueError, OSError, ctypes.ArgumentError)

    def call(self, missing: list[Missing], field: str, fname: str, *args: Any) -> Any:
        """nvml.<fname>(*args), or None with `field` recorded in `missing`."""
        try:
            return getattr(self.nvml, fname)(*args)
        except self.errors as exc:
            missing.append(Missing(field=field, reason=error_reason(exc)))
            return None

    def const(self, name: str, default: int) -> int:
        """An NVML constant (pynvml's NVML_P2P_CAPS_INDEX_READ is the tuple (0,) by a stray comma)."""
        value = getattr(self.nvml, name, default)
        if isinstance(value, tuple):
            value = value[0] if value else default
        return value if isinstance(value, int) else default


def _text(value: Any) -> Optional[str]:
    """NVML strings arrive as str or bytes depending on the binding version."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _cuda_version(value: Any) -> Optional[str]:
    """12040 -> '12.4'."""
    if not isinstance(value, int) or value <= 0:
        return None
    return f"{value // 1000}.{(value % 1000) // 10}"


def _nvlinks(r: _Reader, handle: Any, missing: list[Missing]) -> tuple[Optional[int], Optional[int]]:
    """(active, total) NVLinks: query links 0.. until NVML says there are no more."""
    total = active = 0
    for link in range(r.const("NVML_NVLINK_MAX_LINKS", _MAX_NVLINKS)):
        try:
            state = r.nvml.nvmlDeviceGetNvLinkState(handle, link)
        except r.errors as exc:
            if link == 0:
                missing.append(Missing(field="nvlinks", reason=error_reason(exc)))
                return None, None
            break
        total += 1
        active += 1 if state else 0
    return active, total


def _gpu(r: _Reader, index: int) -> tuple[GpuInfo, Any]:
    """One GpuInfo and its NVML handle (None when the handle itself could not be had)."""
    missing: list[Missing] = []
    handle = r.call(missing, "handle", "nvmlDeviceGetHandleByIndex", index)
    if handle is None:
        return GpuInfo(index=index, missing=missing), None
    fields: dict[str, Any] = {"name": _text(r.call(missing, "name", "nvmlDeviceGetName", handle)),
                              "uuid": _text(r.call(missing, "uuid", "nvmlDeviceGetUUID", handle))}
    mem = r.call(missing, "memory", "nvmlDeviceGetMemoryInfo", handle)
    if mem is not None:
        fields["memory_total_bytes"] = getattr(mem, "total", None)
        fields["memory_free_bytes"] = getattr(mem, "free", None)
    cc = r.call(missing, "compute_capability", "nvmlDeviceGetCudaComputeCapability", handle)
    if isinstance(cc, (tuple, list)) and len(cc) == 2:
        fields["compute_capability"] = f"{cc[0]}.{cc[1]}"
    for field, fname in (("pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration"),
                         ("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth"),
                         ("pcie_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
                         ("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth")):
        value = r.call(missing, field, fname, handle)
        fields[field] = value if isinstance(value, int) and value > 0 else None
    fields["nvlinks_active"], fields["nvlinks_total"] = _nvlinks(r, handle, missing)
    mig = r.call(missing, "mig_enabled", "nvmlDeviceGetMigMode", handle)
    if isinstance(mig, (tuple, list)) and mig:
        fields["mig_enabled"] = mig[0] == r.const("NVML_DEVICE_MIG_ENABLE", _MIG_ENABLE)
    numa = r.call(missing, "numa_node", "nvmlDeviceGetNumaNodeId", handle)
    fields["numa_node"] = numa if isinstance(numa, int) and numa >= 0 else None
    return GpuInfo(index=index, missing=missing, **fields), handle


def _p2p(r: _Reader, a: int, b: int, ha: Any, hb: Any) -> P2PStatus:
    """Read and write P2P capability between GPUs a<b."""
    read_idx = r.const("NVML_P2P_CAPS_INDEX_READ", 0)
    write_idx = r.const("NVML_P2P_CAPS_INDEX_WRITE", 1)
    results: dict[str, Optional[bool]] = {}
    reasons: list[str] = []
    for what, idx in (("read", read_idx), ("write", write_idx)):
        try:
            status = r.nvml.nvmlDeviceGetP2PStatus(ha, hb, idx)
        except r.errors as exc:
            results[what] = None
            reasons.append(f"{what}: {error_reason(exc)}")
            continue
        if status == 0:
            results[what] = True
        elif status == _P2P_UNKNOWN or status not in _P2P_STATUS:
            results[what] = None
            reasons.append(f"{what}: status {status} ({_P2P_STATUS.get(status, 'unknown')})")
        else:
            results[what] = False
            reasons.append(f"{what}: {_P2P_STATUS[status]}")
    return P2PStatus(a=a, b=b, read=results["read"], write=results["write"],
                     reason="; ".join(reasons) or None)


def read_nvml(nvml: Any = None) -> NvmlReading:
    """Read every GPU NVML can see, and P2P read/write status between each pair.

    Args:
        nvml: an object with the pynvml API (`nvmlInit`, `nvmlDeviceGetCount`, ..., `NVMLError`); None
            imports the real `pynvml`.

    Returns:
        An NvmlReading. When NVML is unusable (nvidia-ml-py missing, no libnvidia-ml, driver not loaded,
        no GPU) `error` says why and `gpus` is empty; this is a normal result, never an exception.
        Per-field failures are in each GpuInfo's `missing`, host-level ones in `missing`.
    """
    if nvml is None:
        missing_library = nvml_library_missing()
        if missing_library:
            return NvmlReading(error=_unavailable(missing_library))
        nvml = load_pynvml()
        if nvml is None:
            return NvmlReading(error="nvidia-ml-py (pynvml) is not installed: pip install nvidia-ml-py")
    r = _Reader(nvml)
    try:
        nvml.nvmlInit()
    except Exception as exc:  # any failure to start NVML means "no NVML here", never a crash
        return NvmlReading(error=_unavailable(error_reason(exc)))
    try:
        return _read_initialised(r)
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # shutting down a half-broken NVML must not hide the reading
            pass


def _unavailable(reason: str) -> str:
    return f"NVML unavailable ({reason}); no NVIDIA driver on this host?"


def _read_initialised(r: _Reader) -> NvmlReading:
    """The reading once nvmlInit succeeded."""
    missing: list[Missing] = []
    driver = _text(r.call(missing, "driver_version", "nvmlSystemGetDriverVersion"))
    cuda = _cuda_version(r.call(missing, "cuda_version", "nvmlSystemGetCudaDriverVersion"))
    count = r.call(missing, "gpu_count", "nvmlDeviceGetCount")
    if not isinstance(count, int) or count <= 0:
        if count == 0:
            why = "NVML reports no GPU"
        elif count is None:
            why = f"NVML could not count GPUs ({missing[-1].reason})"
        else:
            why = f"NVML returned an unusable GPU count {count!r}"
        return NvmlReading(driver_version=driver, cuda_version=cuda, error=why, missing=missing)
    gpus: list[GpuInfo] = []
    handles: list[Any] = []
    for i in range(count):
        info, handle = _gpu(r, i)
        gpus.append(info)
        handles.append(handle)
    p2p = [
        _p2p(r, a, b, handles[a], handles[b])
        for a in range(count) for b in range(a + 1, count)
        if handles[a] is not None and handles[b] is not None
    ]
    return NvmlReading(gpus=gpus, p2p=p2p, driver_version=driver, cuda_version=cuda, missing=missing)

