#!/usr/bin/env python
"""Collective bandwidth sweep in the style of nccl-tests; needs only torch.

Run with torchrun, e.g. ``torchrun --standalone --nproc-per-node 2 probes/collectives.py --quick``.
NCCL on GPUs and gloo on CPU (chosen by ``torch.cuda.is_available()``; ``--backend`` overrides).
For each op (all_reduce, all_gather, reduce_scatter, send_recv) and message size it runs warm-up
calls, then times each call between a barrier and a device synchronize, takes the slowest rank
per call and the median over calls, and reports

* algbw = S / t and busbw = algbw * factor, with S and the factors of nccl-tests
  doc/PERFORMANCE.md: all_reduce 2(n-1)/n, all_gather and reduce_scatter (n-1)/n with S the size
  of the whole (gathered / reduced) array, send/recv 1;
* alpha (per-call latency) and the asymptotic busbw, fitted by least squares on t = alpha + S/B.

Rank 0 prints ONE JSON object on stdout, shaped like gpuadvisor's MeasureReport
(src/gpuadvisor/schemas/measure.py) with ``collectives`` set to a list of CollectiveCurve.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time
from datetime import timedelta

OPS = ("all_reduce", "all_gather", "reduce_scatter", "send_recv")
ELEM_BYTES = 4  # float32, as nccl-tests' default
KIB, MIB = 1024, 1024 * 1024


def bus_factor(op: str, n: int) -> float:
    """busbw/algbw correction of nccl-tests doc/PERFORMANCE.md for `op` over `n` ranks."""
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter"):
        return (n - 1) / n
    if op == "send_recv":
        return 1.0
    raise ValueError(f"unknown collective {op!r}; expected one of {', '.join(OPS)}")


def algbw_gb_per_s(size_bytes: float, time_s: float) -> float:
    """Algorithm bandwidth S/t in GB/s (10^9 bytes, as nccl-tests)."""
    return size_bytes / time_s / 1e9


def busbw_gb_per_s(op: str, size_bytes: float, time_s: float, n: int) -> float:
    """Bus bandwidth algbw * factor(op, n) in GB/s."""
    return algbw_gb_per_s(size_bytes, time_s) * bus_factor(op, n)


def fit_alpha_beta(sizes: list[float], times: list[float]) -> tuple[float, float | None]:
    """Fit t = alpha + S/B; return (alpha_s >= 0, B in bytes/s or None when the slope is not positive).

    Weighted least squares on relative error (weights 1/t^2), so the small sizes fix alpha and
    the large ones fix B; a negative intercept is clamped to 0 and the slope refitted through 0.
    """
    if len(sizes) != len(times) or not sizes:
        raise ValueError("fit_alpha_beta needs as many times as sizes, at least one")
    w = [1.0 / (t * t) for t in times]
    sw = sum(w)
    sx = sum(wi * s for wi, s in zip(w, sizes))
    sy = sum(wi * t for wi, t in zip(w, times))
    sxx = sum(wi * s * s for wi, s in zip(w, sizes))
    sxy = sum(wi * s * t for wi, s, t in zip(w, sizes, times))
    det = sw * sxx - sx * sx
    if len(sizes) >= 2 and det > 0:
        slope = (sw * sxy - sx * sy) / det
        alpha = (sy - slope * sx) / sw
        if slope <= 0:  # time does not grow with size: all latency, bandwidth not measurable
            return sy / sw, None
        if alpha >= 0:
            return alpha, 1.0 / slope
    slope = sxy / sxx  # one point, or a negative intercept: fit through the origin
    return 0.0, (1.0 / slope if slope > 0 else None)


def default_sizes(on_gpu: bool, quick: bool) -> list[int]:
    """Message sizes in bytes: 8 KiB..64 MiB (x2) on GPU, 4 KiB..4 MiB (x4) on CPU when quick."""
    if on_gpu:
        lo, hi, step = (8 * KIB, 16 * MIB, 4) if quick else (8 * KIB, 64 * MIB, 2)
    else:
        lo, hi, step = (4 * KIB, 4 * MIB, 4) if quick else (4 * KIB, 16 * MIB, 2)
    sizes, s = [], lo
    while s <= hi:
        sizes.append(s)
        s *= step
    return sizes


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer sizes and iterations (CI, smoke tests)")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    p.add_argument("--ops", default=",".join(OPS), help="comma-separated subset of " + ",".join(OPS))
    p.add_argument("--min-bytes", type=int, default=None)
    p.add_argument("--max-bytes", type=int, default=None)
    p.add_argument("--warmup", type=int, default=None, help="warm-up calls per size (5, quick 2)")
    p.add_argument("--iters", type=int, default=None, help="timed calls per size (20, quick 5)")
    p.add_argument("--timeout", type=float, default=120.0, help="process-group timeout, seconds")
    args = p.parse_args(argv)
    args.ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    bad = [o for o in args.ops if o not in OPS]
    if bad:
        p.error(f"unknown op(s) {bad}; choose from {','.join(OPS)}")
    return args


class _Sweep:
    """One initialised process group and the buffers/ops to time on it."""

    def __init__(self, torch, dist, device, warnings: list[str]):
        self.torch, self.dist, self.device = torch, dist, device
        self.rank, self.n = dist.get_rank(), dist.get_world_size()
        self.backend = dist.get_backend()
        self.warnings = warnings
        self._rs_emulated = False
        # torch >= 2.10 renamed the tensor variants; keep torch >= 2.4 working.
        self._all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        self._reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def make_op(self, op: str, count: int):
        """Allocate buffers for `count` float32 elements of S and return a zero-arg callable."""
        t, dist, n, dev = self.torch, self.dist, self.n, self.device
        if op == "all_reduce":
            buf = t.ones(count, dtype=t.float32, device=dev)
            return lambda: dist.all_reduce(buf)
        if op == "all_gather":
            inp = t.ones(count // n, dtype=t.float32, device=dev)
            out = t.empty(count, dtype=t.float32, device=dev)
            return lambda: self._all_gather(out, inp)
        if op == "reduce_scatter":
            inp = t.ones(count, dtype=t.float32, device=dev)
            out = t.empty(count // n, dtype=t.float32, device=dev)
            if self._rs_emulated:
                return lambda: self._emulated_reduce_scatter(out, inp)
            return lambda: self._reduce_scatter(out, inp)
        if op == "send_recv":
            buf = t.ones(count, dtype=t.float32, device=dev)
            half = n // 2
            if self.rank < half:
                peer = self.rank + half
                return lambda: dist.send(buf, peer)
            if self.rank < 2 * half:
                peer = self.rank - half
                return lambda: dist.recv(buf, peer)
            return lambda: None  # odd world size: the last rank sits out
        raise ValueError(op)

    def _emulated_reduce_scatter(self, out, inp) -> None:
        """reduce_scatter as all_reduce + local chunk (moves ~2x the bytes of a ring reduce-scatter)."""
        tmp = inp.clone()
        self.dist.all_reduce(tmp)
        out.copy_(tmp.chunk(self.n)[self.rank])

    def check_reduce_scatter(self) -> None:
        """Fall back to an emulation where the backend lacks reduce_scatter (old gloo)."""
        try:
            self.make_op("reduce_scatter", self.n * 4)()
            self.sync()
        except (RuntimeError, NotImplementedError) as exc:
            self._rs_emulated = True
            self.warnings.append(
                f"{self.backend} has no reduce_scatter here ({str(exc).splitlines()[0][:120]}); "
                "measured an emulation (all_reduce + local chunk), so its busbw understates a real one"
            )

    def time_op(self, op: str, count: int, warmup: int, iters: int) -> float:
        """Median over calls of the slowest rank's time for one call, seconds."""
        fn = self.make_op(op, count)
        for _ in range(warmup):
            fn()
        self.sync()
        times = []
        for _ in range(iters):
            self.dist.barrier()
            self.sync()
            t0 = time.perf_counter()
            fn()
            self.sync()
            times.append(time.perf_counter() - t0)
        tt = self.torch.tensor(times, dtype=self.torch.float64, device=self.device)
        self.dist.all_reduce(tt, op=self.dist.ReduceOp.MAX)
        return float(statistics.median(tt.cpu().tolist()))


def _curve(op: str, sweep: _Sweep, sizes: list[int], warmup: int, iters: int, nodes: int) -> dict:
    """Sweep one op over sizes and fit alpha-beta; a CollectiveCurve as a dict."""
    n = sweep.n
    points = []
    for size in sizes:
        per = n if op in ("all_gather", "reduce_scatter") else 1
        count = max(per, (size // ELEM_BYTES) // per * per)
        nbytes = count * ELEM_BYTES
        t = sweep.time_op(op, count, warmup, iters)
        points.append({
            "size_bytes": nbytes,
            "time_s": t,
            "algbw_gb_per_s": algbw_gb_per_s(nbytes, t),
            "busbw_gb_per_s": busbw_gb_per_s(op, nbytes, t, n),
        })
    alpha, bw = fit_alpha_beta([p["size_bytes"] for p in points], [p["time_s"] for p in points])
    return {
        "op": op,
        "backend": sweep.backend,
        "world_size": n,
        "nodes": nodes,
        "dtype": "float32",
        "points": points,
        "alpha_us": alpha * 1e6,
        "busbw_gb_per_s": None if bw is None else bw * bus_factor(op, n) / 1e9,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the sweep and print the JSON report from rank 0."""
    args = _parse_args(argv)
    import torch
    import torch.distributed as dist

    warnings: list[str] = []
    backend = args.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend, timeout=timedelta(seconds=args.timeout))
    rank, n = dist.get_rank(), dist.get_world_size()
    local_n = int(os.environ.get("LOCAL_WORLD_SIZE", str(n)))
    nodes = max(1, n // max(1, local_n))
    sweep = _Sweep(torch, dist, device, warnings)

    sizes = default_sizes(device.type == "cuda", args.quick)
    if args.min_bytes is not None:
        sizes = [s for s in sizes if s >= args.min_bytes]
    if args.max_bytes is not None:
        sizes = [s for s in sizes if s <= args.max_bytes]
    warmup = args.warmup if args.warmup is not None else (2 if args.quick else 5)
    iters = args.iters if args.iters is not None else (5 if args.quick else 20)

    curves = []
    if n >= 2:  # settle threads, connections and allocator before the first timed size
        for _ in range(10):
            sweep.time_op("all_reduce", 1024, 1, 1)
    if n < 2:
        warnings.append("collectives need at least 2 ranks; run with torchrun --nproc-per-node 2 or more")
    elif not sizes:
        warnings.append("no message sizes left after --min-bytes/--max-bytes; widen the range")
    else:
        if "reduce_scatter" in args.ops:
            sweep.check_reduce_scatter()
            if backend == "gloo" and not sweep._rs_emulated:
                warnings.append(
                    "gloo implements reduce_scatter as an all_reduce plus a local chunk "
                    "(pytorch PRs 118911, 149869), so its busbw understates a ring reduce-scatter"
                )
        for op in args.ops:
            curves.append(_curve(op, sweep, sizes, warmup, iters, nodes))
    if n % 2 and "send_recv" in args.ops and n > 1:
        warnings.append(f"send_recv pairs rank r with r+{n // 2}; with {n} ranks the last one sat out")

    dist.barrier()
    if rank == 0:
        report = {
            "hostname": socket.gethostname(),
            "device_kind": "gpu" if device.type == "cuda" else "cpu",
            "world_size": n,
            "collectives": curves,
            "torch_version": torch.__version__,
            "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
            "warnings": warnings,
        }
        print(json.dumps(report), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
