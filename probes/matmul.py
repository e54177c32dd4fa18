#!/usr/bin/env python
"""GEMM efficiency curve on one device; needs only torch.

Run with plain python: ``python probes/matmul.py --quick``. Times C = A @ B for square shapes
(256..8192 in bf16 on a GPU; 256..2048 in fp32 on CPU with --quick, ..4096 without) and a few
transformer-like shapes (tokens x h x 4h for the MLP, tokens x h x 3h for QKV), and reports
TFLOP/s = 2*m*n*k / t with t the median time of one product after warm-up.

Prints ONE JSON object on stdout, shaped like gpuadvisor's MeasureReport
(src/gpuadvisor/schemas/measure.py) with ``matmul`` set to a one-element list of MatmulCurve.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time


def tflops(m: int, n: int, k: int, time_s: float) -> float:
    """Rate of one (m x k) @ (k x n) product: 2*m*n*k floating-point operations in `time_s`."""
    return 2.0 * m * n * k / time_s / 1e12


def default_shapes(on_gpu: bool, quick: bool) -> list[tuple[int, int, int]]:
    """(m, n, k) shapes: squares doubling from 256, then transformer MLP/QKV shapes."""
    top = (4096 if quick else 8192) if on_gpu else (2048 if quick else 4096)
    shapes, s = [], 256
    while s <= top:
        shapes.append((s, s, s))
        s *= 2
    if on_gpu:
        tokens, hiddens = 4096, (1024, 4096)
    else:
        tokens, hiddens = 512, ((256, 512) if quick else (256, 1024))
    if on_gpu and not quick:
        hiddens = (1024, 2048, 4096, 8192)
    for h in hiddens:
        shapes += [(tokens, 4 * h, h), (tokens, h, 4 * h), (tokens, 3 * h, h)]
    return shapes


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer and smaller shapes (CI, smoke tests)")
    p.add_argument("--device", default="auto", help="auto (cuda:0 if available, else cpu), cpu, cuda:N")
    p.add_argument("--dtype", default="auto", choices=("auto", "bfloat16", "float16", "float32"),
                   help="auto: bfloat16 on GPU, float32 on CPU")
    p.add_argument("--max-dim", type=int, default=None, help="drop shapes with any dimension above this")
    p.add_argument("--min-time", type=float, default=None, help="seconds of timed calls per shape (0.2, quick 0.05)")
    return p.parse_args(argv)


def _time_one(torch, a, b, out, sync, min_time: float, min_iters: int = 3, max_iters: int = 50) -> float:
    """Median seconds of torch.mm(a, b, out=out) after two warm-up calls."""
    for _ in range(2):
        torch.mm(a, b, out=out)
    sync()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_iters or (time.perf_counter() - start < min_time and len(times) < max_iters):
        t0 = time.perf_counter()
        torch.mm(a, b, out=out)
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    """Measure the curve and print the JSON report."""
    args = _parse_args(argv)
    import torch

    warnings: list[str] = []
    dev_arg = args.device
    if dev_arg == "auto":
        dev_arg = "cuda:0" if torch.cuda.is_available() else "cpu"
    device = torch.device(dev_arg)
    on_gpu = device.type == "cuda"
    if on_gpu:
        torch.cuda.set_device(device)
    dtype_name = args.dtype if args.dtype != "auto" else ("bfloat16" if on_gpu else "float32")
    dtype = getattr(torch, dtype_name)
    min_time = args.min_time if args.min_time is not None else (0.05 if args.quick else 0.2)

    def sync() -> None:
        if on_gpu:
            torch.cuda.synchronize(device)

    shapes = default_shapes(on_gpu, args.quick)
    if args.max_dim is not None:
        shapes = [s for s in shapes if max(s) <= args.max_dim]
    points = []
    for m, n, k in shapes:
        try:
            a = torch.randn(m, k, device=device).to(dtype)
            b = torch.randn(k, n, device=device).to(dtype)
            out = torch.empty(m, n, device=device, dtype=dtype)
            t = _time_one(torch, a, b, out, sync, min_time)
        except (RuntimeError, MemoryError) as exc:  # OOM or an unsupported dtype on this device
            warnings.append(f"matmul {m}x{n}x{k} {dtype_name} skipped: {str(exc).splitlines()[0][:120]}")
            continue
        finally:
            a = b = out = None
        points.append({"m": m, "n": n, "k": k, "time_s": t, "tflops": tflops(m, n, k, t)})

    name = torch.cuda.get_device_name(device) if on_gpu else _cpu_name()
    curve = {
        "device": str(device),
        "device_name": name,
        "dtype": dtype_name,
        "threads": None if on_gpu else torch.get_num_threads(),
        "points": points,
        "best_tflops": max((p["tflops"] for p in points), default=0.0),
    }
    if not points:
        warnings.append("no matmul shape could be measured; see the warnings above")
    report = {
        "hostname": socket.gethostname(),
        "device_kind": "gpu" if on_gpu else "cpu",
        "world_size": 1,
        "matmul": [curve] if points else [],
        "torch_version": torch.__version__,
        "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
        "warnings": warnings,
    }
    print(json.dumps(report), flush=True)
    return 0


def _cpu_name() -> str:
    """CPU model from /proc/cpuinfo, or the platform's processor string."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "cpu"


if __name__ == "__main__":
    sys.exit(main())
