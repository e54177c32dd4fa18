"""Ranking: feasibility, ordering by objective, explanations, what-if edits of the cluster."""
from .rank import OBJECTIVES, rank
from .whatif import apply_what_if

__all__ = ["OBJECTIVES", "apply_what_if", "rank"]
