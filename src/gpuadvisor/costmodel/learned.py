"""The learned correction: predicts log(measured / analytical) throughput from plan and hardware features.

A scikit-learn estimator (``__init__`` stores hyper-parameters only, ``fit`` returns self, learned
attributes end in ``_``). The model is a bootstrap ensemble of small gradient-boosted trees: the mean of
the members is the correction, their spread the uncertainty. It is stored as data (``to_json``:
hyper-parameters + the feature rows it was fitted on) and refitted on load -- never pickled.
Evaluation: leave-one-source-out cross-validation over ``MeasurementRow.source_group`` (`loso_report`).

Imports scikit-learn: keep this module off the `suggest` path unless a learned correction is asked for.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.ensemble import GradientBoostingRegressor

from ..hardware.presets import row_cluster
from ..schemas import Cluster, Estimate, LinkClass, MeasurementRow, Plan, Workload

FORMAT = "gpuadvisor-learned-correction/2"
# PCIe/NVLink path quality, best (0) to worst; CPU shared memory and unknown in between (DESIGN section 2)
_LINK_ORDER = {LinkClass.NVLINK: 0, LinkClass.SHM: 1, LinkClass.PIX: 2, LinkClass.PXB: 3, LinkClass.PHB: 4,
               LinkClass.NODE: 5, LinkClass.SYS: 6, LinkClass.UNKNOWN: 4, LinkClass.SELF: 0}
FEATURES = (
    "log2_dp", "log2_tp", "log2_pp", "zero_stage", "zero_offload", "log2_micro_batch", "log2_num_micro_batches",
    "recompute", "log2_nodes", "tp_link", "dp_link", "pp_link", "tp_crosses_nodes", "dp_crosses_nodes",
    "pp_crosses_nodes", "log10_net_gb_per_s", "log10_intra_gb_per_s", "compute_frac", "comm_frac",
    "bubble_frac", "log10_params", "log2_tokens_per_micro_batch", "is_gpu",
)
# Hardware features that decide whether a correction learned on some machines applies to another, with
# the distance (in their units) at which a correction is trusted about 60% (exp(-1/2)): device kind
# (CPU ranks vs GPUs: categorically different, a correction does not cross it),
# network and intra-node bandwidth (log10 GB/s, 0.3 = a factor of 2). A correction fitted on NVLink/IB
# nodes says little about a 1 GbE PCIe box, so there it shrinks toward 1 (the analytical model).
DOMAIN = {"is_gpu": 0.25, "log10_net_gb_per_s": 0.3, "log10_intra_gb_per_s": 0.3}
_DOMAIN_IDX = [FEATURES.index(k) for k in DOMAIN]
_DOMAIN_SCALE = np.asarray(list(DOMAIN.values()), float)


def _group_link(cluster: Cluster, span: int, gpn: int) -> tuple[float, float, float]:
    """(link class rank, crosses nodes, intra-node bandwidth) of a group spanning `span` consecutive ranks."""
    node = cluster.nodes[0]
    if span <= 1:
        return 0.0, 0.0, 0.0
    devs = [d.index for d in node.devices][: min(span, gpn)]
    links = [node.link(a, b) for i, a in enumerate(devs) for b in devs[i + 1:]]
    links = [lk for lk in links if lk is not None]
    if node.devices and node.devices[0].kind == "cpu" and not links:
        rank, bw = _LINK_ORDER[LinkClass.SHM], 10.0
    else:
        rank = max((_LINK_ORDER.get(lk.link_class, 4) for lk in links), default=4)
        bw = min((lk.bandwidth_gb_per_s for lk in links), default=10.0)
    crosses = float(span > gpn)
    return (float(rank) + 4.0 * crosses), crosses, bw


def features(plan: Plan, cluster: Cluster, workload: Workload, estimate: Estimate) -> list[float]:
    """The feature vector of one (plan, hardware, workload, analytical estimate), in FEATURES order."""
    gpn = plan.devices_per_node
    tp_l, tp_x, tp_bw = _group_link(cluster, plan.tp, gpn)
    dp = plan.gradient_ranks  # dp*cp: a context-parallel rank is priced as a data-parallel one of s/cp tokens
    dp_l, dp_x, dp_bw = _group_link(cluster, plan.tp * dp if dp > 1 else 1, gpn)
    pp_l, pp_x, pp_bw = _group_link(cluster, plan.world_size if plan.pp > 1 else 1, gpn)
    total = max(estimate.step.total_s, 1e-12)
    comm = sum(estimate.step.comm_exposed_s.values())
    net = cluster.network.bandwidth_gb_per_s if (cluster.network and plan.nodes > 1) else 0.0
    intra = max(tp_bw, dp_bw, pp_bw)
    seq = workload.training.seq_len // plan.cp if workload.model.kind == "transformer" else 1
    dev = cluster.nodes[0].devices[0] if cluster.nodes[0].devices else None
    return [
        math.log2(dp), math.log2(plan.tp), math.log2(plan.pp), float(plan.zero_stage), float(plan.zero_offload),
        math.log2(plan.micro_batch_size), math.log2(plan.num_micro_batches), plan.recompute_fraction,
        math.log2(plan.nodes), tp_l, dp_l, pp_l, tp_x, dp_x, pp_x, math.log10(1.0 + net), math.log10(1.0 + intra),
        estimate.step.compute_s / total, comm / total, estimate.step.bubble_s / total,
        math.log10(max(workload.model.params, 1)), math.log2(max(plan.micro_batch_size * seq, 1)),
        float(dev is not None and dev.kind == "gpu"),
    ]


def throughput_rows(rows: Iterable[MeasurementRow]) -> list[MeasurementRow]:
    """Rows the correction learns from: positive tokens/s (or samples/s) measurements.

    Epoch times with steps_per_epoch become tokens/s: steps * tokens per step / epoch seconds.
    """
    out = []
    for r in rows:
        if r.value <= 0:
            continue
        if r.metric in ("tokens_per_s", "samples_per_s"):
            out.append(r)
        elif r.metric == "epoch_time_s" and r.steps_per_epoch:
            tps = r.steps_per_epoch * r.workload.tokens_per_step / r.value
            out.append(r.model_copy(update={"id": f"{r.id}~tokens_per_s", "metric": "tokens_per_s", "value": tps,
                                            "unit": "tokens/s"}))
    return out


class LearnedCorrection(BaseEstimator):
    """Bootstrap ensemble of gradient-boosted trees predicting log(measured/analytical) throughput.

    Parameters are hyper-parameters only; `fit(rows, estimates)` learns `members_`, `X_`, `y_`, `groups_`.
    `factor(...)` implements the cost model's Correction protocol: (exp(mean), relative uncertainty).
    The correction is trusted by how close the plan's hardware is to hardware it was fitted on
    (`DOMAIN` features, `domain_scale`): far from every training row it shrinks to 1 and the uncertainty
    grows to the training rows' spread -- a correction never extrapolates to unseen machines.
    """

    def __init__(self, n_members: int = 8, n_estimators: int = 150, max_depth: int = 2, learning_rate: float = 0.05,
                 min_samples_leaf: int = 2, subsample: float = 0.8, max_abs_log_factor: float = 3.0,
                 domain_scale: float = 1.0, random_state: int = 0):
        self.n_members = n_members
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.min_samples_leaf = min_samples_leaf
        self.subsample = subsample
        self.max_abs_log_factor = max_abs_log_factor
        self.domain_scale = domain_scale
        self.random_state = random_state

    # -- fitting -------------------------------------------------------------------------------------
    def fit(self, rows: Sequence[MeasurementRow], estimates: Sequence[Estimate]) -> "LearnedCorrection":
        """Fit on throughput rows and the analytical estimates of the same plans (uncorrected, aligned)."""
        if len(rows) != len(estimates):
            raise ValueError(f"fit needs one estimate per row, got {len(rows)} rows and {len(estimates)} estimates")
        X, y, groups = [], [], []
        for r, e in zip(rows, estimates):
            if r.metric not in ("tokens_per_s", "samples_per_s") or r.value <= 0:
                continue
            pred = e.tokens_per_s if r.metric == "tokens_per_s" else e.samples_per_s
            if not pred or pred <= 0:
                continue
            X.append(features(r.plan, row_cluster(r), r.workload, e))
            y.append(math.log(r.value / pred))
            groups.append(r.source_group)
        if len(X) < 2:
            raise ValueError(f"the learned correction needs at least 2 throughput rows, got {len(X)}")
        return self.fit_arrays(np.asarray(X, float), np.asarray(y, float), groups)

    def fit_arrays(self, X: np.ndarray, y: np.ndarray, groups: Optional[Sequence[str]] = None) -> "LearnedCorrection":
        """Fit on a feature matrix (FEATURES columns) and log ratios; the JSON form refits through here."""
        y = np.clip(y, -self.max_abs_log_factor, self.max_abs_log_factor)
        rng = np.random.RandomState(self.random_state)
        self.members_ = []
        for i in range(self.n_members):
            idx = rng.randint(0, len(X), len(X)) if self.n_members > 1 else np.arange(len(X))
            m = GradientBoostingRegressor(
                n_estimators=self.n_estimators, max_depth=self.max_depth, learning_rate=self.learning_rate,
                min_samples_leaf=min(self.min_samples_leaf, max(1, len(idx) // 2)),
                subsample=self.subsample if len(X) >= 8 else 1.0, random_state=self.random_state + i)
            m.fit(X[idx], y[idx])
            self.members_.append(m)
        self.X_, self.y_ = X, y
        self.groups_ = list(groups) if groups is not None else ["?"] * len(X)
        self.n_rows_ = len(X)
        self.prior_log_std_ = float(np.sqrt(np.mean(y ** 2)))  # how far off the analytical model typically is
        return self

    def trust(self, X: np.ndarray) -> np.ndarray:
        """Weight in [0, 1] of the learned correction per row: exp(-d^2/2), d = distance in DOMAIN units
        (over domain_scale) to the nearest training row's hardware."""
        d = (X[:, None, _DOMAIN_IDX] - self.X_[None, :, _DOMAIN_IDX]) / (_DOMAIN_SCALE * self.domain_scale)
        return np.exp(-0.5 * np.min(np.sum(d ** 2, axis=2), axis=1))

    # -- prediction ----------------------------------------------------------------------------------
    def predict_log(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and spread of log(measured/analytical) for each row of X, shrunk by `trust`.

        Spread = the members' std where trusted, the training rows' RMS log error where not."""
        if not hasattr(self, "members_"):
            raise ValueError("LearnedCorrection is not fitted; call fit(rows, estimates) first")
        preds = np.stack([m.predict(X) for m in self.members_])
        w = self.trust(X)
        mean = np.clip(w * preds.mean(axis=0), -self.max_abs_log_factor, self.max_abs_log_factor)
        spread = np.sqrt((w * preds.std(axis=0)) ** 2 + ((1.0 - w) * self.prior_log_std_) ** 2)
        return mean, spread

    def factor(self, plan: Plan, cluster: Cluster, workload: Workload,
               estimate: Estimate) -> tuple[float, Optional[float]]:
        """Correction protocol: measured/analytical factor and its relative uncertainty."""
        mean, std = self.predict_log(np.asarray([features(plan, cluster, workload, estimate)], float))
        return float(math.exp(mean[0])), float(math.expm1(std[0]))

    # -- storage as data -----------------------------------------------------------------------------
    def to_json(self) -> str:
        """Hyper-parameters and the training feature rows (refitted by from_json); no pickle."""
        data: dict[str, Any] = {"format": FORMAT, "params": self.get_params(), "features": list(FEATURES)}
        if hasattr(self, "X_"):
            data.update(X=self.X_.tolist(), y=self.y_.tolist(), groups=self.groups_)
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> "LearnedCorrection":
        """Rebuild from `to_json` output by refitting (deterministic for a fixed random_state)."""
        data = json.loads(text)
        if data.get("format") != FORMAT or data.get("features") != list(FEATURES):
            raise ValueError("learned-correction JSON has another format or feature set; refit it from the rows")
        model = cls(**data["params"])
        if "X" in data:
            model.fit_arrays(np.asarray(data["X"], float), np.asarray(data["y"], float), data.get("groups"))
        return model


def _estimate_rows(rows: Sequence[MeasurementRow]) -> tuple[list[MeasurementRow], list[Estimate]]:
    """Analytical (uncorrected) estimates for each row; rows the cost model cannot price are dropped."""
    from .combine import estimate

    keep, ests = [], []
    for r in rows:
        try:
            ests.append(estimate(r.plan, row_cluster(r), r.workload, correction=None))
        except (ValueError, KeyError, FileNotFoundError):
            continue
        keep.append(r)
    return keep, ests


def loso_report(rows: Sequence[MeasurementRow], estimates: Optional[Sequence[Estimate]] = None,
                model: Optional[LearnedCorrection] = None) -> dict[str, Any]:
    """Leave-one-source-out CV: for each source_group fit on the others, score on it.

    Errors are mean absolute relative errors of throughput, |predicted - measured| / measured.
    Returns {"analytical_mae", "learned_mae", "n_rows", "per_group": {group: {...}}}.
    """
    rows = throughput_rows(rows)
    if estimates is None:
        rows, estimates = _estimate_rows(rows)
    else:
        estimates = list(estimates)
        if len(estimates) != len(rows):
            raise ValueError("loso_report needs one estimate per throughput row")
    proto = model or LearnedCorrection()
    groups = sorted({r.source_group for r in rows})
    per_group: dict[str, Any] = {}
    all_a, all_l = [], []
    for g in groups:
        train = [(r, e) for r, e in zip(rows, estimates) if r.source_group != g]
        test = [(r, e) for r, e in zip(rows, estimates) if r.source_group == g]
        if len(train) < 2:
            continue
        m = LearnedCorrection(**proto.get_params()).fit([r for r, _ in train], [e for _, e in train])
        err_a, err_l = [], []
        for r, e in test:
            pred = e.tokens_per_s if r.metric == "tokens_per_s" else e.samples_per_s
            f, _ = m.factor(r.plan, row_cluster(r), r.workload, e)
            err_a.append(abs(pred - r.value) / r.value)
            err_l.append(abs(pred * f - r.value) / r.value)
        per_group[g] = {"n": len(test), "analytical_mae": float(np.mean(err_a)), "learned_mae": float(np.mean(err_l))}
        all_a += err_a
        all_l += err_l
    return {"analytical_mae": float(np.mean(all_a)) if all_a else None,
            "learned_mae": float(np.mean(all_l)) if all_l else None, "n_rows": len(all_a), "per_group": per_group}


def within_report(rows: Sequence[MeasurementRow], estimates: Optional[Sequence[Estimate]] = None,
                  model: Optional[LearnedCorrection] = None, min_rows: int = 4) -> dict[str, Any]:
    """Leave-one-row-out inside each source group with at least `min_rows` rows: does learning from the
    other plans measured on the same cluster move the prediction of an untried plan toward its measurement?

    Each held-out row is predicted by a model fitted on every other row (its own group's included).
    Returns {"analytical_mae", "learned_mae", "n_rows", "per_group": {...}} like `loso_report`.
    """
    rows = throughput_rows(rows)
    if estimates is None:
        rows, estimates = _estimate_rows(rows)
    estimates = list(estimates)
    proto = model or LearnedCorrection()
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.source_group] = counts.get(r.source_group, 0) + 1
    per_group: dict[str, Any] = {}
    all_a, all_l = [], []
    for g in sorted(k for k, n in counts.items() if n >= min_rows):
        err_a, err_l = [], []
        for i, (r, e) in enumerate(zip(rows, estimates)):
            if r.source_group != g:
                continue
            train = [(rr, ee) for j, (rr, ee) in enumerate(zip(rows, estimates)) if j != i]
            m = LearnedCorrection(**proto.get_params()).fit([a for a, _ in train], [b for _, b in train])
            pred = e.tokens_per_s if r.metric == "tokens_per_s" else e.samples_per_s
            f, _ = m.factor(r.plan, row_cluster(r), r.workload, e)
            err_a.append(abs(pred - r.value) / r.value)
            err_l.append(abs(pred * f - r.value) / r.value)
        per_group[g] = {"n": len(err_a), "analytical_mae": float(np.mean(err_a)),
                        "learned_mae": float(np.mean(err_l))}
        all_a += err_a
        all_l += err_l
    return {"analytical_mae": float(np.mean(all_a)) if all_a else None,
            "learned_mae": float(np.mean(all_l)) if all_l else None, "n_rows": len(all_a), "per_group": per_group}


def default_rows() -> list[MeasurementRow]:
    """knowledge/measurements/*.jsonl plus the local store (invalid lines skipped)."""
    from ..paths import knowledge_dir
    from ..trials.store import MeasurementStore, parse_rows

    rows: list[MeasurementRow] = []
    try:
        mdir = knowledge_dir() / "measurements"
    except FileNotFoundError:
        mdir = None
    for p in sorted(mdir.glob("*.jsonl")) if mdir and mdir.is_dir() else []:
        rows += parse_rows(Path(p).read_text().splitlines(), str(p), strict=False)[0]
    seen = {r.id for r in rows}
    rows += [r for r in MeasurementStore().rows() if r.id not in seen]
    return rows


def load_default(min_rows: int = 6) -> Optional[LearnedCorrection]:
    """Refit the correction from the shipped and local measurement rows; None when there are too few."""
    rows, ests = _estimate_rows(throughput_rows(default_rows()))
    if len(rows) < min_rows or len({r.source_group for r in rows}) < 2:
        return None
    return LearnedCorrection().fit(rows, ests)
