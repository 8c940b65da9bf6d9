"""What counts as a usable number in the files runs and sweeps leave: one test, for every reader.

A value can be unknown in several shapes: null in summary.json (json_safe writes NaN as null), NaN from
the median of no steps, or whatever a hand-edited file holds. Readers show all of them as unknown rather
than computing with them. bool is excluded because True is an int to Python.
"""

from __future__ import annotations

import math
from typing import Any

# No count or size of this harness comes near 2**62 (ranks, elements, bytes); a larger integer is a broken
# file, and Python's ints would otherwise overflow only later, in float arithmetic.
MAX_INT = 2**62


def is_finite(value: Any) -> bool:
    """Whether `value` is an int or float (not a bool) that is neither NaN nor infinite."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def in_range(value: float, minimum: float | None = None, above: float | None = None) -> bool:
    """Whether a number is finite (ints below MAX_INT) and within the bounds; NaN is never in range."""
    finite = abs(value) < MAX_INT if isinstance(value, int) else math.isfinite(value)
    return finite and (minimum is None or value >= minimum) and (above is None or value > above)


def is_number(value: Any, integer: bool = False, minimum: float | None = None, above: float | None = None) -> bool:
    """Whether `value` is an int (or, unless `integer`, a float), not a bool, finite and within the bounds."""
    kinds = int if integer else int | float
    return isinstance(value, kinds) and not isinstance(value, bool) and in_range(value, minimum, above)


def plural(count: int, noun: str) -> str:
    """'1 pair', '2 pairs': a count and its noun, agreeing (nouns that take an s)."""
    return f"{count} {noun}{'' if count == 1 else 's'}"
