"""Rules from the seed documents (knowledge/rules.yaml), compiled to closures — no string eval.

A condition is a leaf `[feature, op, value]` or `{all: [...]}`, `{any: [...]}`, `{not: cond}`.
Features are computed per plan by `plan_features` from the plan, the cluster and the workload.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Optional

from ..errors import UserError
from ..paths import knowledge_dir
from ..schemas import Plan, RuleHit
from ..safe_yaml import load_bundled_yaml

FEATURES = {
    "world": "devices used", "dp": "data-parallel degree", "tp": "tensor-parallel degree",
    "pp": "pipeline stages", "zero": "ZeRO stage", "offload": "ZeRO-Offload on", "nodes": "nodes used",
    "gpn": "devices per node used", "params_m": "model parameters in millions",
    "tp_crosses_nodes": "a TP group spans nodes", "pp_crosses_nodes": "a PP boundary crosses nodes",
    "dp_crosses_nodes": "a DP group spans nodes", "network_gbit": "inter-node speed, Gbit/s (inf if one node)",
    "tp_link": "slowest link of the TP group (nvlink/pcie/shm/network/none)",
    "dp_link": "slowest link of the DP group", "pp_link": "slowest link of the PP group",
    "m": "micro-batches per step", "mb": "micro-batch size", "m_over_p": "micro-batches / stages",
    "micro_steps": "micro-batches per step (gradient accumulation)", "comm_hook": "DDP comm hook",
    "recompute": "activation recompute", "schedule": "pipeline schedule", "sequence_parallel": "SP on",
    "device": "kind of the devices (gpu, or cpu for gloo CPU ranks)",
}

_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
    ">=": operator.ge, "in": lambda a, b: a in b,
}

Cond = Callable[[dict], bool]


def _vin(a: Any, b: Any) -> Any:
    """Element-wise `in` over an array of feature values."""
    import numpy as np
    return np.array([x in b for x in np.ravel(a)], dtype=bool).reshape(np.shape(a))


_VOPS: dict[str, Callable[[Any, Any], Any]] = dict(_OPS, **{"in": _vin})


def compile_vector_condition(c: Any, rule_id: str = "?") -> Callable[[dict], Any]:
    """As compile_condition, over a dict of feature arrays (one element per plan): a boolean array."""
    import numpy as np
    if isinstance(c, list) and len(c) == 3 and isinstance(c[0], str) and c[1] in _OPS:
        feat, op, val = c
        if feat not in FEATURES:
            raise UserError(f"rule {rule_id}: unknown feature '{feat}'; known: {', '.join(sorted(FEATURES))}")
        fn = _VOPS[op]
        return lambda f: np.asarray(fn(f[feat], val), dtype=bool)
    if isinstance(c, dict) and len(c) == 1:
        (k, v), = c.items()
        if k in ("all", "any") and isinstance(v, list):
            subs = [compile_vector_condition(x, rule_id) for x in v]
            red = np.logical_and.reduce if k == "all" else np.logical_or.reduce
            return lambda f: red([s(f) for s in subs]) if subs else np.asarray(k == "all")
        if k == "not":
            sub = compile_vector_condition(v, rule_id)
            return lambda f: ~sub(f)
    raise UserError(f"rule {rule_id}: malformed condition {c!r}; write [feature, op, value] or {{all: [...]}}")


def compile_condition(c: Any, rule_id: str = "?") -> Cond:
    """Turn a declarative condition into a predicate over a feature dict (raises UserError if malformed)."""
    if isinstance(c, list) and len(c) == 3 and isinstance(c[0], str) and c[1] in _OPS:
        feat, op, val = c
        if feat not in FEATURES:
            raise UserError(f"rule {rule_id}: unknown feature '{feat}'; known: {', '.join(sorted(FEATURES))}")
        fn = _OPS[op]
        return lambda f: bool(fn(f[feat], val))
    if isinstance(c, dict) and len(c) == 1:
        (k, v), = c.items()
        if k == "all" and isinstance(v, list):
            subs = [compile_condition(x, rule_id) for x in v]
            return lambda f: all(s(f) for s in subs)
        if k == "any" and isinstance(v, list):
            subs = [compile_condition(x, rule_id) for x in v]
            return lambda f: any(s(f) for s in subs)
        if k == "not":
            sub = compile_condition(v, rule_id)
            return lambda f: not sub(f)
    raise UserError(f"rule {rule_id}: malformed condition {c!r}; write [feature, op, value] or {{all: [...]}}")


@dataclass(frozen=True)
class Rule:
    """One compiled rule."""

    id: str
    severity: str
    factor: float
    message: str
    source: str
    cond: Cond
    vcond: Optional[Callable[[dict], Any]] = None  # the same condition over feature arrays (batch path)

    def hit(self) -> RuleHit:
        return RuleHit(id=self.id, severity=self.severity, message=self.message, source=self.source,  # type: ignore[arg-type]
                       factor=self.factor if self.severity == "penalty" else 1.0)


@lru_cache(maxsize=4)
def load_rules(path: Optional[str] = None) -> tuple[Rule, ...]:
    """Compile knowledge/rules.yaml (or `path`)."""
    p = Path(path) if path else knowledge_dir() / "rules.yaml"
    try:
        data = load_bundled_yaml(p.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise UserError(f"cannot read rules file {p}: {exc.strerror}; reinstall gpuadvisor") from None
    out = []
    for r in data.get("rules", []):
        sev = r.get("severity")
        if sev not in ("info", "warn", "penalty", "forbid"):
            raise UserError(f"rule {r.get('id')}: severity must be info/warn/penalty/forbid, got {sev!r}")
        out.append(Rule(str(r["id"]), sev, float(r.get("factor", 1.0)), str(r["message"]), str(r["source"]),
                        compile_condition(r["when"], str(r["id"])),
                        compile_vector_condition(r["when"], str(r["id"]))))
    return tuple(out)


def plan_features(p: Plan, ctx: Any) -> dict:
    """Feature dict of one plan on the context's cluster/workload (see FEATURES)."""
    topo = ctx.topo
    net = ctx.cluster.network
    gbit = float("inf")
    if net is not None:
        gbit = net.link_speed_gbit_per_s or net.bandwidth_gb_per_s * 8
    # the data-parallel group is the gradients' (dp*cp: Plan.gradient_ranks), as the engine's rows see it
    dp = p.gradient_ranks

    def grp(kind: str, deg: int):
        return topo.group(kind, dp, p.tp, p.pp, p.nodes, p.devices_per_node, p.mesh_order) if deg > 1 else None
    gt, gd, gp = grp("tp", p.tp), grp("dp", dp), grp("pp", p.pp)
    return {
        "world": p.world_size, "dp": dp, "tp": p.tp, "pp": p.pp, "zero": p.zero_stage, "offload": p.zero_offload,
        "nodes": p.nodes, "gpn": p.devices_per_node, "params_m": ctx.params / 1e6,
        "tp_crosses_nodes": bool(gt and gt.crosses_nodes), "pp_crosses_nodes": bool(gp and gp.crosses_nodes),
        "dp_crosses_nodes": bool(gd and gd.crosses_nodes), "network_gbit": gbit if p.nodes > 1 else float("inf"),
        "tp_link": gt.kind if gt else "none", "dp_link": gd.kind if gd else "none", "pp_link": gp.kind if gp else "none",
        "m": p.num_micro_batches, "mb": p.micro_batch_size, "m_over_p": p.num_micro_batches / p.pp,
        "micro_steps": p.num_micro_batches, "comm_hook": p.comm_hook, "recompute": p.recompute,
        "schedule": p.pp_schedule, "sequence_parallel": p.sequence_parallel, "device": ctx.device.kind,
    }


def apply_rules(p: Plan, ctx: Any, rules: Optional[tuple[Rule, ...]] = None) -> tuple[list[Rule], float, Optional[str]]:
    """(rules that fired, product of penalty factors, forbid message or None)."""
    rules = load_rules() if rules is None else rules
    if not rules:
        return [], 1.0, None
    f = plan_features(p, ctx)
    fired, factor, forbid = [], 1.0, None
    for r in rules:
        if r.cond(f):
            fired.append(r)
            if r.severity == "penalty":
                factor *= r.factor
            elif r.severity == "forbid" and forbid is None:
                forbid = r.message
    return fired, factor, forbid
