"""Candidate enumeration: every valid dp·tp·pp·ZeRO plan with its knobs for a cluster and workload."""
from .enumerate import SearchSpace, divisors, enumerate_plans

__all__ = ["SearchSpace", "divisors", "enumerate_plans"]
