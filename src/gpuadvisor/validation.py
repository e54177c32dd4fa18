"""Validate the cost model against the seeds: measured rows (knowledge/measurements/seed-*.jsonl)
and orderings (knowledge/findings.yaml). `gpuadvisor validate` prints this report.
"""
from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from .costmodel.analytical.comm import group_allreduce_s
from .costmodel.combine import estimate, make_context
from .costmodel.correction import Correction
from .errors import UserError
from .hardware.presets import row_cluster
from .paths import knowledge_dir
from .schemas import Estimate, MeasurementRow, Workload, parse_plan
from .safe_yaml import load_bundled_yaml

SPEED_METRICS = ("tokens_per_s", "samples_per_s", "step_time_s", "epoch_time_s")


@dataclass
class RowResult:
    id: str
    metric: str
    measured: float
    predicted: Optional[float]
    rel_error: Optional[float]
    tolerance: Optional[float]
    source: str
    error: Optional[str] = None

    @property
    def within(self) -> bool:
        return self.rel_error is not None and (self.tolerance is None or abs(self.rel_error) <= self.tolerance)


@dataclass
class FindingResult:
    id: str
    holds: bool
    detail: str
    source: str


@dataclass
class ValidationReport:
    rows: list[RowResult] = field(default_factory=list)
    findings: list[FindingResult] = field(default_factory=list)

    def _errs(self, metrics: tuple[str, ...]) -> list[float]:
        return [abs(r.rel_error) for r in self.rows if r.metric in metrics and r.rel_error is not None]

    @property
    def median_abs_error(self) -> Optional[float]:
        e = self._errs(SPEED_METRICS)
        return statistics.median(e) if e else None

    @property
    def max_abs_error(self) -> Optional[float]:
        e = self._errs(SPEED_METRICS)
        return max(e) if e else None

    @property
    def orderings_hold(self) -> bool:
        return all(f.holds for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        return {"rows": [asdict(r) for r in self.rows], "findings": [asdict(f) for f in self.findings],
                "summary": {"median_abs_error": self.median_abs_error, "max_abs_error": self.max_abs_error,
                            "n_speed_rows": len(self._errs(SPEED_METRICS)),
                            "findings_held": sum(f.holds for f in self.findings), "findings": len(self.findings),
                            "orderings_hold": self.orderings_hold}}

    def view(self) -> Any:
        """The rows (measured vs predicted), the ordering findings and the summary, as a rich renderable."""
        from .cli.console import Column, Group, block, make_table

        table = make_table(Column("row", overflow="fold"), Column("metric", overflow="fold"),
                           Column("measured", justify="right", no_wrap=True),
                           Column("predicted", justify="right", no_wrap=True),
                           Column("error", justify="right", no_wrap=True), Column("note", overflow="fold"))
        def num(v: float) -> str:
            return f"{v:,.0f}" if 100 <= abs(v) < 1e12 else f"{v:.4g}"

        for r in self.rows:
            pe = "-" if r.predicted is None else num(r.predicted)
            er = "-" if r.rel_error is None else f"{r.rel_error:+.1%}"
            note = "; ".join(x for x in ("" if r.within else "outside tolerance",
                                         f"error: {r.error}" if r.error else "") if x)
            table.add_row(r.id, r.metric, num(r.measured), pe, er, note)
        lines = [""] + [f"[{'ok' if f.holds else 'FAIL'}] {f.id}: {f.detail}" for f in self.findings] + [""]
        med, mx = self.median_abs_error, self.max_abs_error
        lines.append(f"throughput/time rows: median |error| {med:.1%}, max |error| {mx:.1%}" if med is not None
                     else "no throughput/time rows")
        lines.append(f"orderings: {sum(f.holds for f in self.findings)}/{len(self.findings)} hold")
        return Group(table, block(lines))

    def render(self, width: Optional[int] = None) -> str:
        """view() as plain text, `width` columns wide (default: the terminal's or COLUMNS)."""
        from .cli.console import to_text

        return to_text(self.view(), width)


def load_rows(paths: Optional[list[Path]] = None) -> list[MeasurementRow]:
    """Measurement rows of the seed files (or `paths`); a bad line is a one-line error naming it."""
    from .trials.store import parse_rows

    paths = paths or sorted((knowledge_dir() / "measurements").glob("seed-*.jsonl"))
    return [r for p in paths for r in parse_rows(p.read_text(encoding="utf-8").splitlines(), p.name, strict=True)[0]]


def predict_row(row: MeasurementRow, correction: Optional[Correction] = None) -> float:
    """The cost model's value for a row's metric."""
    cl = row_cluster(row)
    if row.metric == "allreduce_busbw_gb_per_s":
        ctx = make_context(cl, row.workload)
        p = row.plan
        g = ctx.topo.group("dp", p.dp, p.tp, p.pp, p.nodes, p.devices_per_node, p.mesh_order)
        size = 1.32e9
        t = group_allreduce_s(size, g, ctx.hier_min, ctx.tree_bw, ctx.nvls_factor)
        return 2.0 * (g.n - 1) / g.n * size / t / 1e9
    est = estimate(row.plan, cl, row.workload, correction=correction)
    if row.metric == "tokens_per_s":
        return est.tokens_per_s
    if row.metric == "samples_per_s":
        return est.samples_per_s
    if row.metric == "step_time_s":
        return est.step_time_s
    if row.metric == "epoch_time_s":
        return est.step_time_s * (row.steps_per_epoch or 1)
    if row.metric == "peak_memory_bytes":
        return float(est.memory.total)
    if row.metric == "network_bytes_per_run":
        return float(est.network_bytes_per_run or 0.0)
    if row.metric == "scaling_factor":
        base = next((n.split("=", 1)[1] for n in row.notes.split(";") if n.strip().startswith("baseline=")), None)
        bp = parse_plan(base.strip()) if base else parse_plan("dp=1,mb=1,m=1")
        bw = row.workload.model_copy(update={"training": row.workload.training.model_copy(
            update={"global_batch": bp.global_batch()})})
        b = estimate(bp, cl, bw, correction=correction)
        return est.tokens_per_s / (row.plan.world_size * b.tokens_per_s)
    raise UserError(f"row {row.id}: metric {row.metric} cannot be predicted")


def _workload(spec: dict, base: dict) -> Workload:
    from .workload.specs import make_workload
    d = dict(base)
    d.update({k: v for k, v in spec.items() if k in ("model", "seq_len", "precision", "optimizer", "token_budget")})
    model = d.pop("model")
    return make_workload(model, **d)


def _eval_spec(spec: dict, finding: dict) -> Estimate:
    from .hardware.presets import load_preset
    base = {k: v for k, v in finding["workload"].items() if k != "global_batch"}
    plan = parse_plan(spec["plan"])
    gb = spec.get("global_batch", plan.global_batch())
    if "row" in base:  # the workload of a measurement row (models the seed describes but no preset holds)
        row = next((r for r in load_rows() if r.id == base["row"]), None)
        if row is None:
            raise UserError(f"finding {finding['id']}: no measurement row '{base['row']}'")
        wl = row.workload.model_copy(update={"training": row.workload.training.model_copy(
            update={"global_batch": gb})})
    else:
        wl = _workload(spec, dict(base, global_batch=gb))
    cl = load_preset(spec.get("preset", finding["preset"]))
    return estimate(plan, cl, wl)


def _metric(est: Estimate, metric: str) -> float:
    if metric == "network_bytes_per_run":
        return float(est.network_bytes_per_run or 0.0)
    return float(getattr(est, metric))


_OPS = {">": lambda a, b: a > b, ">=": lambda a, b: a >= b, "<": lambda a, b: a < b, "<=": lambda a, b: a <= b}


def check_finding(f: dict) -> FindingResult:
    """Evaluate one finding of knowledge/findings.yaml."""
    c = f["check"]
    kind, metric = c["type"], c.get("metric", "tokens_per_s")
    try:
        if kind in ("order", "approx", "ratio_between"):
            a, b = _eval_spec(c["a"], f), _eval_spec(c["b"], f)
            va, vb = _metric(a, metric), _metric(b, metric)
            r = va / vb if vb else float("inf")
            if kind == "order":
                ratio = float(c.get("ratio", 1.0))
                ok = _OPS[c["op"]](va, ratio * vb)
                det = f"{metric} {va:.4g} {c['op']} {ratio:g} x {vb:.4g} (ratio {r:.3f})"
            elif kind == "approx":
                ok = abs(r - 1) <= float(c["tol"])
                det = f"ratio {r:.3f} within 1 ± {c['tol']}"
            else:
                ok = float(c["lo"]) <= r <= float(c["hi"])
                det = f"ratio {r:.3f} in [{c['lo']}, {c['hi']}]"
            ok = ok and a.feasible and b.feasible
        elif kind == "efficiency":
            a, b = _eval_spec(c["plan"], f), _eval_spec(c["baseline"], f)
            eff = a.tokens_per_s / (a.plan.world_size * b.tokens_per_s)
            v = c["value"]
            ok = (v[0] <= eff <= v[1]) if c["op"] == "between" else _OPS[c["op"]](eff, float(v))
            det = f"efficiency {eff:.3f} {c['op']} {v}"
        elif kind == "efficiency_gap":
            base = _eval_spec(c["baseline"], f)
            a, b = _eval_spec(c["a"], f), _eval_spec(c["b"], f)
            ea = a.tokens_per_s / (a.plan.world_size * base.tokens_per_s)
            eb = b.tokens_per_s / (b.plan.world_size * base.tokens_per_s)
            ok = eb - ea >= float(c["min_gap"])
            det = f"efficiency {ea:.3f} vs {eb:.3f}: drop {eb - ea:.3f} >= {c['min_gap']}"
        elif kind in ("feasible", "infeasible"):
            a = _eval_spec(c["plan"], f)
            ok = a.feasible == (kind == "feasible")
            det = f"peak {a.memory.total / 2**30:.1f} GiB of {a.memory_capacity_bytes / 2**30:.1f} GiB -> " \
                  f"{'fits' if a.feasible else 'OOM'}"
        else:
            raise UserError(f"finding {f['id']}: unknown check type '{kind}'")
    except (ValueError, KeyError) as exc:
        return FindingResult(f["id"], False, f"error: {exc}", f.get("source", ""))
    return FindingResult(f["id"], bool(ok), det, f.get("source", ""))


def load_findings(path: Optional[Path] = None) -> list[dict]:
    """The findings list of knowledge/findings.yaml."""
    p = path or knowledge_dir() / "findings.yaml"
    return (load_bundled_yaml(p.read_text(encoding="utf-8")) or {}).get("findings", [])


def validate(correction: Optional[Correction] = None) -> ValidationReport:
    """Predict every seed row and check every finding; see ValidationReport.render()."""
    rep = ValidationReport()
    for row in load_rows():
        try:
            pred = predict_row(row, correction)
            err = (pred - row.value) / row.value if row.value else None
            rep.rows.append(RowResult(row.id, row.metric, row.value, pred, err, row.tolerance, row.source))
        except ValueError as exc:
            rep.rows.append(RowResult(row.id, row.metric, row.value, None, None, row.tolerance, row.source, str(exc)))
    rep.findings = [check_finding(f) for f in load_findings()]
    return rep


def report_json(rep: ValidationReport) -> str:
    return json.dumps(rep.to_dict(), indent=2)
