#!/usr/bin/env python
"""Host <-> device copy bandwidth, pageable and pinned; needs only torch.

Run with plain python: ``python probes/hostcopy.py [--quick]``. On a GPU it times host-to-device and
device-to-host copies of one buffer (256 MiB, 32 MiB with --quick) from pageable and from pinned
host memory (median of the timed copies after warm-up, GB/s = 10^9 bytes/s). This is the path
ZeRO offload and GPUs without peer-to-peer use. Without a GPU there is nothing to copy to: it
prints an empty list with a warning. (Not named copy.py: a script's folder comes first on
sys.path, so that name would shadow the standard library's ``copy`` module that torch imports.)

Prints ONE JSON object on stdout, shaped like gpuadvisor's MeasureReport
(src/gpuadvisor/schemas/measure.py) with ``copies`` set to a list of CopyBandwidth.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time

MIB = 1024 * 1024


def gb_per_s(size_bytes: int, time_s: float) -> float:
    """Bandwidth in GB/s (10^9 bytes per second)."""
    return size_bytes / time_s / 1e9


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smaller buffer, fewer repetitions")
    p.add_argument("--device", default="cuda:0", help="CUDA device to copy to/from (default cuda:0)")
    p.add_argument("--size-mib", type=int, default=None, help="buffer size in MiB (256, quick 32)")
    p.add_argument("--iters", type=int, default=None, help="timed copies per case (10, quick 5)")
    return p.parse_args(argv)


def _measure(torch, device, size: int, iters: int) -> list[dict]:
    """Time h2d and d2h from pageable and pinned host buffers; CopyBandwidth dicts."""
    dev_buf = torch.empty(size, dtype=torch.uint8, device=device)
    results = []
    for pinned in (False, True):
        host = torch.empty(size, dtype=torch.uint8, pin_memory=pinned)
        host.fill_(1)  # touch the pages so first-fault cost is not timed
        for direction in ("h2d", "d2h"):
            dst, src = (dev_buf, host) if direction == "h2d" else (host, dev_buf)
            for _ in range(2):
                dst.copy_(src, non_blocking=pinned)
            torch.cuda.synchronize(device)
            times = []
            for _ in range(iters):
                t0 = time.perf_counter()
                dst.copy_(src, non_blocking=pinned)
                torch.cuda.synchronize(device)
                times.append(time.perf_counter() - t0)
            t = statistics.median(times)
            results.append({"direction": direction, "pinned": pinned, "size_bytes": size,
                            "gb_per_s": gb_per_s(size, t)})
        del host
    return results


def main(argv: list[str] | None = None) -> int:
    """Measure copies (GPU) or explain why there are none (CPU), and print the JSON report."""
    args = _parse_args(argv)
    import torch

    warnings: list[str] = []
    copies: list[dict] = []
    on_gpu = torch.cuda.is_available()
    if not on_gpu:
        warnings.append("no CUDA device: host<->device copy bandwidth not measured (nothing to copy to)")
    else:
        device = torch.device(args.device)
        torch.cuda.set_device(device)
        size = (args.size_mib or (32 if args.quick else 256)) * MIB
        iters = args.iters or (5 if args.quick else 10)
        try:
            copies = _measure(torch, device, size, iters)
        except RuntimeError as exc:  # pinning refused (container memlock limits) or OOM
            warnings.append(f"copy bandwidth not measured: {str(exc).splitlines()[0][:160]}")
    report = {
        "hostname": socket.gethostname(),
        "device_kind": "gpu" if on_gpu else "cpu",
        "world_size": 1,
        "copies": copies,
        "torch_version": torch.__version__,
        "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
        "warnings": warnings,
    }
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
