"""User-facing errors: one line that names the problem and the fix."""
from __future__ import annotations

from typing import Any, Mapping

from . import exitcodes


class UserError(ValueError):
    """Bad input or environment (unknown model, unreadable topology, unreachable node...).

    The message is one line naming the problem and the fix; the CLI prints it and exits non-zero
    (`exit_code`, one of gpuadvisor.exitcodes: USAGE by default).
    """

    def __init__(self, message: str, exit_code: int = exitcodes.USAGE):
        # one line whatever the user typed (a model name or file content may carry newlines)
        super().__init__(" ".join(str(message).splitlines()))
        self.exit_code = exit_code


def error_text(error: Mapping[str, Any]) -> str:
    """One entry of a pydantic ValidationError.errors(): its message without pydantic's "Value error, " prefix
    (the prefix a validator's own ValueError gets)."""
    return str(error.get("msg", "")).removeprefix("Value error, ")


def validation_message(exc: Exception, *, with_field: bool = False, every_error: bool = False) -> str:
    """What a pydantic ValidationError says, one line, without pydantic's "Value error, " prefix.

    The first error's message; `with_field` puts its field first ("field: message"; a model-level check has no
    field and reads as its message alone); `every_error` joins all of them with "; ". Any other exception: its
    first line.
    """
    errs = getattr(exc, "errors", None)
    found = errs() if callable(errs) else []
    if not found:
        return (str(exc).splitlines() or [""])[0]
    msgs = [(".".join(map(str, e.get("loc") or ())), error_text(e)) for e in found[:None if every_error else 1]]
    return " ".join("; ".join(f"{loc}: {msg}" if loc and with_field else msg for loc, msg in msgs).split())
