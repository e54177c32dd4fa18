"""A hand-built cost model for the study tests: candidate plans and deliberately imperfect predictions."""
from __future__ import annotations

from gpuadvisor.schemas import (Cluster, CpuInfo, Device, Estimate, MemoryBreakdown, Node, Plan, StepBreakdown,
                                Workload)


def cpu_cluster(n: int = 2) -> Cluster:
    """One node with n CPU gloo ranks (like the cpu-2ranks preset)."""
    devs = [Device(index=i, kind="cpu", name="cpu", memory_bytes=8 << 30, peak_tflops_bf16=0.5,
                   peak_tflops_fp32=0.5, memory_bandwidth_gb_per_s=20.0) for i in range(n)]
    return Cluster(name="test-cpu", nodes=[Node(name="n0", devices=devs, cpu=CpuInfo(cores=2, threads=2))],
                   source="test")


def make_estimate(plan: Plan, workload: Workload, tps: float, feasible: bool = True) -> Estimate:
    """An Estimate with a plausible breakdown (compute 70%, comm 30%)."""
    step = workload.tokens_per_step / tps
    return Estimate(plan=plan, feasible=feasible, step_time_s=step, tokens_per_s=tps,
                    samples_per_s=tps / workload.training.seq_len,
                    step=StepBreakdown(compute_s=0.7 * step, comm_exposed_s={"SHM": 0.3 * step}),
                    memory=MemoryBreakdown(weights=1 << 20, activations=plan.micro_batch_size << 20),
                    memory_capacity_bytes=8 << 30, analytical_tokens_per_s=tps,
                    infeasible_reason=None if feasible else "memory")


def predicted(plan: Plan) -> float:
    """The 'cost model': right about dp and micro-batch, wrong about ZeRO (thinks stage 1 is best)."""
    z = {0: 0.95, 1: 1.0, 2: 0.9}[plan.zero_stage]
    return 9000.0 * plan.dp ** 0.95 * min(plan.micro_batch_size, 8) ** 0.3 * z


class FakePlanner:
    """Planner over dp in {1,2}, mb in {1,2,4,8}, zero in {0,1,2}, bucket in {25,50}; one infeasible plan."""

    def __init__(self, workload: Workload, dps: tuple[int, ...] = (1, 2)):
        self.workload = workload
        self.plans = []
        for dp in dps:
            for mb in (1, 2, 4, 8):
                if 8 % (dp * mb):
                    continue
                for zero in (0, 1, 2):
                    for bucket in (25.0, 50.0):
                        self.plans.append(Plan(dp=dp, micro_batch_size=mb, num_micro_batches=8 // (dp * mb),
                                               zero_stage=zero, ddp_bucket_mb=bucket, devices_per_node=dp))

    def estimates(self) -> list[Estimate]:
        out = []
        for p in self.plans:
            infeasible = p.dp == 1 and p.micro_batch_size == 8 and p.zero_stage == 0 and p.ddp_bucket_mb == 50.0
            out.append(make_estimate(p, self.workload, predicted(p), feasible=not infeasible))
        return out

    def top(self, k: int) -> list[Estimate]:
        return sorted((e for e in self.estimates() if e.feasible), key=lambda e: (-e.tokens_per_s,
                                                                                   e.plan.to_string()))[:k]
