"""User mistakes: one exception type, and the one place that turns it into a one-line message and exit 2."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

USAGE_EXIT_CODE = 2  # argparse's own code for bad arguments, so every user mistake exits alike


class UsageError(Exception):
    """A mistake in what the user asked for. The message names the option and what would be accepted."""


def run_cli(main: Callable[[], T], prog: str) -> T:
    """Run `main`; a UsageError becomes `prog: error: message` on stderr and exit code 2, with no traceback."""
    try:
        return main()
    except UsageError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        raise SystemExit(USAGE_EXIT_CODE) from None
