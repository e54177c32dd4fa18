"""Per-rank measurement of one run: the A6000 paper's TrainingResults (§III, Appendices E and F).

- Time: wall clock of the timed window (after warm-up), started after a barrier; every step is
  bracketed by device synchronisation (torch.cuda.synchronize on GPU; CPU ops are synchronous),
  as in Appendix E, so compute and communication are both inside it.
- Tokens: what this rank counts toward throughput (Appendix F; the strategy decides) and what it saw.
- Memory: GPU peak = torch.cuda.max_memory_allocated over the run; GPU average = mean of per-step
  NVML snapshots of device memory used (the paper's pyNVML method), or of
  torch.cuda.memory_reserved when NVML is missing. CPU peak = VmHWM and average = mean of
  per-step VmRSS from /proc/self/status.
- Utilisation: mean of per-step NVML GPU utilisation samples (None on CPU or without NVML).
- NIC bytes: /proc/net/dev deltas per interface over the window. The counters are per host
  (network namespace), not per process, so only local rank 0 of each node records them and the
  other ranks leave `nic_bytes` empty; summing over ranks then counts every node once.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import torch
import torch.distributed as dist

from ..schemas.trial import NicBytes, TrainingResults
from .parallel import Context


def read_proc_status(path: str = "/proc/self/status") -> dict[str, int]:
    """VmHWM and VmRSS of this process in bytes (empty dict where /proc is missing)."""
    out: dict[str, int] = {}
    try:
        for line in Path(path).read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                value, unit = rest.split()[:2]
                out[key] = int(value) * {"kB": 1024, "mB": 1 << 20}.get(unit, 1)
    except (OSError, ValueError):
        pass
    return out


def read_net_dev(path: str = "/proc/net/dev") -> dict[str, tuple[int, int]]:
    """{interface: (rx_bytes, tx_bytes)} from /proc/net/dev (empty where unreadable)."""
    out: dict[str, tuple[int, int]] = {}
    try:
        lines = Path(path).read_text().splitlines()[2:]
    except OSError:
        return out
    for line in lines:
        name, _, rest = line.partition(":")
        fields = rest.split()
        if len(fields) >= 9:
            out[name.strip()] = (int(fields[0]), int(fields[8]))
    return out


def net_delta(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> dict[str, NicBytes]:
    """Bytes per interface between two /proc/net/dev readings (counter wrap or a vanished NIC -> skipped)."""
    out = {}
    for name, (rx1, tx1) in after.items():
        if name in before:
            rx0, tx0 = before[name]
            if rx1 >= rx0 and tx1 >= tx0:
                out[name] = NicBytes(rx_bytes=rx1 - rx0, tx_bytes=tx1 - tx0)
    return out


class _Nvml:
    """Optional NVML handle for one GPU; every query returns None when NVML cannot answer."""

    def __init__(self, index: int):
        self.handle = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except Exception:  # no driver, no library, MIG, container without NVML
            self.handle = None

    def memory_used(self) -> Optional[int]:
        try:
            return int(self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used) if self.handle else None
        except Exception:
            return None

    def utilization(self) -> Optional[float]:
        try:
            return float(self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu) if self.handle else None
        except Exception:
            return None


class Recorder:
    """Collects one rank's TrainingResults over the timed window."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.step_times: list[float] = []
        self.mem: list[float] = []
        self.util: list[float] = []
        self.nvml = _Nvml(ctx.device.index or 0) if ctx.is_cuda else None
        self._net0: dict[str, tuple[int, int]] = {}
        self._t0 = 0.0
        self.time_s = 0.0

    def sync(self) -> None:
        """Wait for queued device work (Appendix E); a no-op on CPU."""
        if self.ctx.is_cuda:
            torch.cuda.synchronize(self.ctx.device)

    def start_window(self) -> None:
        """Align ranks with a barrier, then start the clock and the NIC counters."""
        self.sync()
        dist.barrier()
        self._net0 = read_net_dev()
        self._t0 = time.perf_counter()

    def step_start(self) -> float:
        self.sync()
        return time.perf_counter()

    def step_end(self, started: float) -> None:
        self.sync()
        self.step_times.append(time.perf_counter() - started)
        if self.ctx.is_cuda:
            used = self.nvml.memory_used() if self.nvml else None
            self.mem.append(float(used if used is not None else torch.cuda.memory_reserved(self.ctx.device)))
            u = self.nvml.utilization() if self.nvml else None
            if u is not None:
                self.util.append(u)
        else:
            self.mem.append(float(read_proc_status().get("VmRSS", 0)))

    def end_window(self) -> None:
        self.sync()
        self.time_s = time.perf_counter() - self._t0
        self._net1 = read_net_dev()

    def results(self, steps: int, tokens_counted_per_step: int, tokens_seen_per_step: int,
                losses: list[float]) -> TrainingResults:
        """This rank's TrainingResults; `losses` holds every step's loss, warm-up included (empty if not owned)."""
        ctx = self.ctx
        if ctx.is_cuda:
            peak = int(torch.cuda.max_memory_allocated(ctx.device))
        else:
            status = read_proc_status()
            peak = status.get("VmHWM", int(max(self.mem, default=0)))
        nic = net_delta(self._net0, self._net1) if ctx.local_rank == 0 else {}
        return TrainingResults(
            rank=ctx.rank, world_size=ctx.world_size, device=str(ctx.device),
            tokens=tokens_counted_per_step * steps, tokens_seen=tokens_seen_per_step * steps,
            time_s=self.time_s, step_times_s=self.step_times, peak_memory_bytes=peak,
            avg_memory_bytes=sum(self.mem) / len(self.mem) if self.mem else 0.0,
            avg_utilization_pct=sum(self.util) / len(self.util) if self.util else None,
            nic_bytes=nic, losses=losses,
        )
