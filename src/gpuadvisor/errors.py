"""User-facing errors: one line that names the problem and the fix."""
from __future__ import annotations

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
