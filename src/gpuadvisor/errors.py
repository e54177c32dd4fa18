"""User-facing errors: one line that names the problem and the fix."""
from __future__ import annotations


class UserError(ValueError):
    """Bad input or environment (unknown model, unreadable topology, unreachable node...).

    The message is one line naming the problem and the fix; the CLI prints it and exits non-zero.
    """

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code
