"""The one check of a whole-number setting read from a user's config file (`predict --from`): a positive integer,
given as a number or as its digits; anything else is a one-line error naming the key and the fix."""
from __future__ import annotations

from typing import Any

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
