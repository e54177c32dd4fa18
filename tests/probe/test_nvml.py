"""NVML reading with a fake pynvml: every field optional, every NVMLError kind recorded, never a crash."""
from __future__ import annotations

import pynvml
import pytest

from gpuadvisor.probe.nvml import error_reason, read_nvml

from .fake_nvml import FakeGpu, FakeNVML


def two_gpus(**kw) -> FakeNVML:
    """Two A40-like GPUs, the second on NUMA node 1."""
    return FakeNVML(gpus=[FakeGpu(), FakeGpu(uuid="GPU-1", numa=1)], **kw)


def test_full_reading():
    nv = FakeNVML(gpus=[FakeGpu(name=b"NVIDIA A100-SXM4-80GB", nvlink_states=[1] * 10 + [0, 0], mig=[0, 0],
                                cc=(8, 0), pcie=(3, 8, 4, 16)), FakeGpu(nvlink_states=[1] * 12, mig=[1, 1])])
    r = read_nvml(nv)
    assert r.error is None and r.driver_version == "550.54.15" and r.cuda_version == "12.4"
    g0, g1 = r.gpus
    assert g0.name == "NVIDIA A100-SXM4-80GB" and g0.compute_capability == "8.0"
    assert (g0.pcie_gen, g0.pcie_width, g0.pcie_gen_max, g0.pcie_width_max) == (3, 8, 4, 16)
    assert (g0.nvlinks_active, g0.nvlinks_total) == (10, 12)
    assert g0.mig_enabled is False and g1.mig_enabled is True
    assert g0.memory_total_bytes == 48 * 1024**3 and g0.memory_free_bytes == 47 * 1024**3
    assert g0.numa_node == 0 and g0.missing == []
    assert r.p2p[0].a == 0 and r.p2p[0].b == 1 and r.p2p[0].read is True and r.p2p[0].write is True
    assert nv.shutdown_called


def test_p2p_status_codes_and_real_tuple_constant():
    # pynvml.NVML_P2P_CAPS_INDEX_READ is (0,): the reader must pass 0, the fake raises TypeError otherwise
    assert pynvml.NVML_P2P_CAPS_INDEX_READ == (0,)
    nv = FakeNVML(gpus=[FakeGpu(), FakeGpu(), FakeGpu()], p2p={(0, 1, 0): 2, (0, 1, 1): 2, (0, 2, 1): 4, (1, 2, 0): 6})
    r = read_nvml(nv)
    s01, s02, s12 = r.p2p
    assert (s01.read, s01.write) == (False, False) and "GPU not supported" in s01.reason
    assert (s02.read, s02.write) == (True, False) and "disabled by regkey" in s02.reason
    assert s12.read is None and s12.write is True
    assert [(s.a, s.b) for s in r.p2p] == [(0, 1), (0, 2), (1, 2)]


@pytest.mark.parametrize(
    "exc,kind",
    [(pynvml.NVMLError_NotSupported(), "NotSupported"), (pynvml.NVMLError_NoPermission(), "NoPermission"),
     (pynvml.NVMLError_GpuIsLost(), "GpuIsLost"), (pynvml.NVMLError_Unknown(), "Unknown"),
     (pynvml.NVMLError_FunctionNotFound(), "FunctionNotFound"), (pynvml.NVMLError_Timeout(), "Timeout")],
)
def test_each_error_kind_becomes_missing_for_each_field(exc, kind):
    funcs = {"nvmlDeviceGetName": "name", "nvmlDeviceGetUUID": "uuid", "nvmlDeviceGetMemoryInfo": "memory",
             "nvmlDeviceGetCudaComputeCapability": "compute_capability",
             "nvmlDeviceGetCurrPcieLinkGeneration": "pcie_gen", "nvmlDeviceGetCurrPcieLinkWidth": "pcie_width",
             "nvmlDeviceGetMaxPcieLinkGeneration": "pcie_gen_max", "nvmlDeviceGetMaxPcieLinkWidth": "pcie_width_max",
             "nvmlDeviceGetNvLinkState": "nvlinks", "nvmlDeviceGetMigMode": "mig_enabled",
             "nvmlDeviceGetNumaNodeId": "numa_node"}
    nv = two_gpus(raises={(f, 1): exc for f in funcs} | {("nvmlDeviceGetP2PStatus", 0): exc})
    r = read_nvml(nv)
    assert r.error is None
    good, bad = r.gpus
    assert good.name == "NVIDIA A40" and good.numa_node == 0
    assert {m.field for m in bad.missing} == set(funcs.values())
    assert all(m.reason.startswith(kind) for m in bad.missing)
    for attr in ("name", "uuid", "memory_total_bytes", "compute_capability", "pcie_gen", "nvlinks_total",
                 "mig_enabled", "numa_node"):
        assert getattr(bad, attr) is None
    assert r.p2p[0].read is None and kind in r.p2p[0].reason


def test_gpu_lost_on_handle_keeps_other_gpus_and_skips_its_p2p():
    nv = FakeNVML(gpus=[FakeGpu(), FakeGpu(), FakeGpu()],
                  raises={("nvmlDeviceGetHandleByIndex", 1): pynvml.NVMLError_GpuIsLost()})
    r = read_nvml(nv)
    assert [g.index for g in r.gpus] == [0, 1, 2]
    assert r.gpus[1].missing[0].field == "handle" and "GPU is lost" in r.gpus[1].missing[0].reason
    assert r.gpus[2].name == "NVIDIA A40"
    assert [(s.a, s.b) for s in r.p2p] == [(0, 2)]


@pytest.mark.parametrize(
    "exc", [pynvml.NVMLError_LibraryNotFound(), pynvml.NVMLError_DriverNotLoaded(), pynvml.NVMLError_NoPermission(),
            OSError("libnvidia-ml.so.1: cannot open shared object file")],
)
def test_init_failure_is_a_normal_result(exc):
    r = read_nvml(FakeNVML(gpus=[FakeGpu()], raises={("nvmlInit", None): exc}))
    assert r.gpus == [] and r.error and "NVML unavailable" in r.error


def test_no_gpu_and_count_failure():
    assert read_nvml(FakeNVML()).error == "NVML reports no GPU"
    r = read_nvml(FakeNVML(gpus=[FakeGpu()], raises={("nvmlDeviceGetCount", None): pynvml.NVMLError_Unknown()}))
    assert r.gpus == [] and "could not count GPUs" in r.error and r.missing[-1].field == "gpu_count"


def test_host_level_missing_and_shutdown_error_ignored():
    nv = two_gpus(raises={("nvmlSystemGetDriverVersion", None): pynvml.NVMLError_NoPermission(),
                          ("nvmlShutdown", None): pynvml.NVMLError_Uninitialized()})
    r = read_nvml(nv)
    assert r.driver_version is None and r.missing[0].field == "driver_version" and len(r.gpus) == 2


def test_missing_function_in_old_binding():
    class Old(FakeNVML):
        def __getattribute__(self, name):
            if name == "nvmlDeviceGetNumaNodeId":
                raise AttributeError(name)
            return super().__getattribute__(name)

    r = read_nvml(Old(gpus=[FakeGpu()]))
    numa = [m for m in r.gpus[0].missing if m.field == "numa_node"]
    assert r.gpus[0].numa_node is None and numa[0].reason.startswith("AttributeError")
    assert r.gpus[0].name == "NVIDIA A40"


def test_real_pynvml_on_this_host_never_raises():
    r = read_nvml()
    assert r.error is not None or r.gpus  # no GPU here: a reason; with a GPU: GPUs


def test_error_reason_text():
    assert error_reason(pynvml.NVMLError_GpuIsLost()) == "GpuIsLost: GPU is lost"
    assert error_reason(pynvml.NVMLError_NotSupported()) == "NotSupported: Not Supported"
    assert error_reason(ValueError("bad")) == "ValueError: bad"


def test_missing_library_reads_as_pynvml_would_without_importing_it(monkeypatch):
    """No libnvidia-ml: the same reason pynvml's nvmlInit gives, and pynvml is never imported (its import is ~50 ms
    of `suggest` on a GPU-less machine); with the library present the real module is used."""
    import gpuadvisor.probe.nvml as nvml_mod
    imported = []
    monkeypatch.setattr(nvml_mod, "load_pynvml", lambda: imported.append(1) or FakeNVML(gpus=[FakeGpu()]))
    monkeypatch.setattr(nvml_mod, "_LINUX_NVML", "libgpuadvisor-no-such-library.so.1")
    monkeypatch.setattr(nvml_mod.sys, "platform", "linux")
    r = read_nvml()
    assert r.gpus == [] and imported == []
    assert r.error == ("NVML unavailable (" + error_reason(pynvml.NVMLError_LibraryNotFound())
                       + "); no NVIDIA driver on this host?")
    monkeypatch.setattr(nvml_mod, "nvml_library_missing", lambda: None)
    assert len(read_nvml().gpus) == 1 and imported == [1]
