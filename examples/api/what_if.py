"""What if the two 25 GbE nodes had a faster network, or more nodes? Re-rank on modified clusters.

Run from anywhere:  python examples/api/what_if.py
Same as:  gpuadvisor suggest --cluster examples/clusters/two-nodes-25gbe.yaml --model 1.5B --what-if nic=100gbe
"""
from pathlib import Path

import gpuadvisor

CLUSTER = Path(__file__).resolve().parents[1] / "clusters" / "two-nodes-25gbe.yaml"
SCENARIOS = [None, "nic=10gbe", "nic=100gbe", "gpus=4x4,nic=25gbe"]


def main() -> None:
    for scenario in SCENARIOS:
        s = gpuadvisor.suggest("1.5B", cluster=CLUSTER, global_batch=32, top=1,
                               what_if=[scenario] if scenario else None)
        best = s.ranking.top[0]
        p = best.plan
        print(f"{scenario or 'as described':<20} best {p.strategy:<8} on {p.nodes}x{p.devices_per_node}: "
              f"{best.tokens_per_s:>8,.0f} tokens/s ({s.cluster.num_devices} GPUs in the cluster)")


if __name__ == "__main__":
    main()
