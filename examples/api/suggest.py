"""Rank every parallel plan for TinyLlama-1.1B (a HF config.json) on a 2x RTX 4090 workstation.

Run from anywhere:  python examples/api/suggest.py
The Python API returns pydantic models: the ranking, the winner's estimate and its launch config.
"""
from pathlib import Path

import gpuadvisor

EXAMPLES = Path(__file__).resolve().parents[1]
CLUSTER = EXAMPLES / "clusters" / "workstation-2x4090.yaml"
MODEL = EXAMPLES / "models" / "tinyllama-1.1b" / "config.json"


def main() -> None:
    s = gpuadvisor.suggest(str(MODEL), cluster=CLUSTER, seq_len=1024, global_batch=16, top=3)
    r = s.ranking
    print(f"{r.workload_name} on {r.cluster_name}: {r.n_feasible} of {r.n_candidates} plans fit")
    for i, est in enumerate(r.top, 1):
        peak_gib = est.memory.total / 2**30
        p = est.plan
        layout = (f"{p.strategy} on {p.nodes}x{p.devices_per_node} GPUs, "
                  f"micro-batch {p.micro_batch_size} x {p.num_micro_batches}")
        print(f"{i}. {layout:<58} {est.tokens_per_s:>8,.0f} tok/s  peak {peak_gib:4.1f} GiB")
    best = r.top[0]
    print("why:", best.reasons[0] if best.reasons else "(only one plan)")
    assert s.launch is not None  # something fits: the launch config of the winner
    print("launch:", " ".join(s.launch.nodes[0].argv))


if __name__ == "__main__":
    main()
