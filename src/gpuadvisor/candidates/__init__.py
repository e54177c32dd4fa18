"""Candidate enumeration: every valid dp·tp·pp·ZeRO plan with its knobs for a cluster and workload."""
from .enumerate import COLUMNS, OFFLOADS, SearchSpace, divisors, enumerate_plans, enumerate_rows, row_plan

__all__ = ["COLUMNS", "OFFLOADS", "SearchSpace", "divisors", "enumerate_plans", "enumerate_rows", "row_plan"]
