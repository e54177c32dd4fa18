"""Predict one plan you have in mind, and see where its step time and memory go.

Run from anywhere:  python examples/api/predict.py
Same as:  gpuadvisor predict --cluster examples/clusters/two-nodes-25gbe.yaml \\
              --model examples/models/tinyllama-1.1b/config.json --plan dp=2,tp=4,pp=1,mb=4,m=2 --global-batch 16
"""
from pathlib import Path

import gpuadvisor

EXAMPLES = Path(__file__).resolve().parents[1]
CLUSTER = EXAMPLES / "clusters" / "two-nodes-25gbe.yaml"
MODEL = EXAMPLES / "models" / "tinyllama-1.1b" / "config.json"


def main() -> None:
    # Tensor parallel inside each 4-GPU node, data parallel across the 25 GbE link.
    est = gpuadvisor.predict(str(MODEL), "dp=2,tp=4,pp=1,mb=4,m=2,nodes=2,gpn=4", cluster=CLUSTER,
                             global_batch=16)
    print(f"plan {est.plan.to_string()} feasible={est.feasible}")
    print(f"step {est.step_time_s * 1e3:.0f} ms, {est.tokens_per_s:,.0f} tokens/s, "
          f"scaling efficiency {est.scaling_efficiency:.2f}")
    print(f"  compute {est.step.compute_s * 1e3:.0f} ms")
    for where, seconds in sorted(est.step.comm_exposed_s.items()):
        print(f"  exposed communication {where}: {seconds * 1e3:.0f} ms")
    print(f"peak memory {est.memory.total / 2**30:.1f} GiB of {est.memory_capacity_bytes / 2**30:.1f} GiB per GPU")
    print(f"network per step (busiest NIC): {est.network_bytes_per_step / 1e6:.0f} MB")
    for hit in est.rules:
        print(f"rule {hit.id} [{hit.severity}]: {hit.message}")
    # Compare with the best plan the advisor finds for the same model, batch and cluster.
    best = gpuadvisor.suggest(str(MODEL), cluster=CLUSTER, global_batch=16, top=1).ranking.top[0]
    print(f"best plan instead: {best.plan.to_string()} at {best.tokens_per_s:,.0f} tokens/s "
          f"({best.tokens_per_s / est.tokens_per_s:.1f}x)")


if __name__ == "__main__":
    main()
