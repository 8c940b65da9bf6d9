"""The one test for "a usable number" in what runs and sweeps left: a finite int or float, never a bool.

A value can be unknown in several shapes: null in summary.json (json_safe writes NaN as null), NaN from
the median of no steps, or whatever a hand-edited file holds. compare and predict show all of them as
unknown rather than computing with them. bool is excluded because True is an int to Python.
"""

from __future__ import annotations

import math
from typing import Any


def is_finite(value: Any) -> bool:
    """Whether `value` is an int or float (not a bool) that is neither NaN nor infinite."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
