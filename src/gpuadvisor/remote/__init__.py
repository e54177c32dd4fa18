"""Multi-node support: reach nodes (local, ssh, slurm, command prefix), pre-flight checks, cluster probes.

- `access`: `node_command` / `run_on_node` / `spawn_on_node` (argument lists, ssh-quoted, own sessions).
- `preflight`: reachability, matching Python/torch/DeepSpeed/NCCL versions, free rendezvous port, free GPUs.
- `cluster_probe`: probe every node, merge into one Cluster, measure the inter-node network.

Multi-node trials live in `gpuadvisor.trials.multinode`. Nothing here imports torch.
"""
