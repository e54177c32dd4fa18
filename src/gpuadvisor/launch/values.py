"""The one check of a whole-number setting read from a user's config file (`predict --from`): a positive integer,
given as a number or as its digits; anything else is a one-line error naming the key and the fix."""
from __future__ import annotations

from typing import Any, Optional

from ..errors import UserError


def positive_int(where: str, key: str, v: Any) -> int:
    """`v` as a positive int. DeepSpeed's "auto" and an unexpanded shell variable (`${HIDDEN}` in a launch script)
    are named as such, with the fix."""
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        if isinstance(v, str) and v.strip().isdecimal() and int(v) >= 1:
            return int(v)
        hint = ""
        if v == "auto":
            hint = "; replace \"auto\" by the number"
        elif isinstance(v, str) and v.lstrip("\"'").startswith("$"):
            hint = "; it is a shell variable: give the arguments with their values (e.g. as your script prints them)"
        raise UserError(f"{where}: '{key}' must be a positive integer, got {repr(v)[:80]}{hint}")
    return v


def context_parallel_degree(where: str, key: str, v: Any, *, world: Optional[int], others: int = 1,
                            names: str = "") -> int:
    """A context-parallel degree read from a config (torchtitan's [parallelism] context_parallel_degree, Megatron's
    --context-parallel-size, Accelerate's parallelism_config_cp_size): a whole number >= 1 that, with the other
    degrees the file gives (`others`, the product of `names`), divides the `world` size, whose rest is the
    data-parallel degree (`world` None: the file states every degree, so no rest is derived). Anything else is a
    one-line error naming the value and the fix."""
    whole = isinstance(v, int) and not isinstance(v, bool) or isinstance(v, str) and v.strip().isdecimal()
    if not whole or int(v) < 1:
        raise UserError(f"{where}: '{key}' must be a whole number >= 1 (1: no context parallelism), got "
                        f"{repr(v)[:80]}; give the number of ranks each sequence is split over")
    cp = int(v)
    if world is not None and world % (others * cp):
        fit = world // others if world % others == 0 else world
        beside = f" beside {names} = {others}" if others > 1 else ""
        raise UserError(f"{where}: '{key}' {cp}{beside} does not divide the world size {world}; use a '{key}' that "
                        f"divides {fit}")
    return cp
