"""Rank layout of a plan, torch-free: which (dp, tp, pp) coordinates each rank has.

`plan.mesh_order` names the dims fastest-varying first: "tp-dp-pp" puts tensor-parallel peers on
neighbouring ranks (same node), then data-parallel replicas, then pipeline stages.
"""
from __future__ import annotations

from ..schemas.plan import Plan

_ORDER_DIMS = {"tp-dp-pp": ("tp", "dp", "pp"), "tp-pp-dp": ("tp", "pp", "dp")}  # fastest first


def coords_of(rank: int, plan: Plan) -> dict[str, int]:
    """(dp, tp, pp) coordinates of `rank` under `plan.mesh_order` (fastest-varying dim first)."""
    if not 0 <= rank < plan.world_size:
        raise ValueError(f"rank {rank} outside world size {plan.world_size}")
    out, rest = {}, rank
    for dim in _ORDER_DIMS[plan.mesh_order]:
        size = getattr(plan, dim)
        out[dim] = rest % size
        rest //= size
    return out


def mesh_shape(plan: Plan) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """(shape, names) for `init_device_mesh`: slowest-varying dim first, so flat rank order matches `coords_of`."""
    names = tuple(reversed(_ORDER_DIMS[plan.mesh_order]))
    return tuple(getattr(plan, n) for n in names), names
