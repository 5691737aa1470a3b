"""A service's own commands (the scaffold's ``migrate`` and ``serve``) fail as outboxkit's do:
the usual mistakes (an unreachable database, a bad setting, the framework's tables missing, a
missing extra) end in one line that names the fix and the exit code of `outboxkit`'s commands
(`outboxkit.commands.errors.EXIT_CODES`), never a traceback; ``OUTBOXKIT_DEBUG=1`` shows it."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

__all__ = ["run"]


def run(main: Callable[[], object], *, name: str, settings_prefix: str) -> int:
    """Run ``main``; its exit code (0 when it returns).

    Args:
        main: The command's body.
        name: The command as its lines name it (``billing.migrate``).
        settings_prefix: The service's settings prefix (``BILLING_``): an unreachable database
            names ``BILLING_DATABASE_URL``.
    """
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    from outboxkit.commands import errors

    try:
        main()
        return 0
    except KeyboardInterrupt:
        return errors.INTERRUPTED
    except Exception as exc:
        if os.environ.get("OUTBOXKIT_DEBUG", "") not in ("", "0"):
            raise
        found = exc
        if isinstance(exc, ValidationError | SettingsError):
            found = errors.bad_settings(exc, None)
        known = errors.translate(found, {}, database=f"{settings_prefix}DATABASE_URL")
        if known is None:
            raise
        message, code = known
        for line in message.splitlines():
            print(f"{name}: error: {line}", file=sys.stderr)
        return code
