"""Pydantic models at every hand-off of the pipeline (probe -> cluster -> plan -> estimate -> launch)."""
from .estimate import Estimate, MemoryBreakdown, Ranking, RuleHit, StepBreakdown
from .hardware import Cluster, CpuInfo, Device, DeviceLink, LinkClass, Network, Nic, Node, NodeAccess
from .job import TrainerJob
from .launch import EnvVar, LaunchConfig, NodeLaunch
from .measure import (BandwidthPoint, CollectiveCurve, CopyBandwidth, MatmulCurve, MatmulPoint,
                      MeasureReport)
from .measurement import MeasurementRow
from .plan import Plan, check_plan_for, parse_plan
from .probe import GpuInfo, Missing, P2PStatus, ProbeReport, TopoLink, TopoMatrix
from .trial import (ComparisonSummary, ExperimentSummary, NicBytes, RunMetrics, TrainingResults,
                    TrialRecord)
from .workload import FineTune, ModelSpec, TrainingSettings, Workload

__all__ = [
    "BandwidthPoint", "CollectiveCurve", "CopyBandwidth", "MatmulCurve", "MatmulPoint", "MeasureReport",
    "MeasurementRow", "TrainerJob",
    "Cluster", "ComparisonSummary", "CpuInfo", "Device", "DeviceLink", "EnvVar", "Estimate",
    "ExperimentSummary", "FineTune", "GpuInfo", "LaunchConfig", "LinkClass", "MemoryBreakdown", "Missing",
    "ModelSpec", "Network", "Nic", "NicBytes", "Node", "NodeAccess", "NodeLaunch", "P2PStatus", "Plan",
    "ProbeReport", "Ranking", "RuleHit", "RunMetrics", "StepBreakdown", "TopoLink", "TopoMatrix",
    "TrainingResults", "TrainingSettings", "TrialRecord", "Workload", "check_plan_for", "parse_plan",
]
