"""Message sizes for the raw sweep: nccl-tests' size syntax, ranges, explicit lists and named presets.

Sizes are bytes. K, M and G are binary (1K = 1024), as in nccl-tests; a decimal mantissa is allowed
(`1.5M`), as nccl-tests' own parser allows it.
"""

from __future__ import annotations

import math
import re

from harness.common.cli import UsageError

UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([KMG]?)(?:I?B)?\s*$", re.IGNORECASE)

# A classic hand-written sweep, in float32 elements (so 4 B to 1 GiB with float32).
SEED_ELEMENTS = (1, 1024, 2048, 4096, 8192, 256 * 1024, 512 * 1024, 1024**2, 4 * 1024**2, 256 * 1024**2)
PRESETS = {"seed": SEED_ELEMENTS}

# A guard against `-i 1 -e 1G`, which would ask for a billion rows.
MAX_SIZES = 10_000


def parse_size(text: str, option: str = "size") -> int:
    """Bytes for `8`, `1K`, `64k`, `1.5M`, `1G` (also `1KB`, `1KiB`); UsageError names `option`."""
    match = _SIZE_RE.match(str(text))
    if not match:
        raise UsageError(f"{option}: invalid size {text!r}; use bytes with an optional K, M or G (e.g. 8, 64K, 1G)")
    value = float(match.group(1)) * UNITS[match.group(2).upper()]
    if value != int(value):
        raise UsageError(f"{option}: {text!r} is not a whole number of bytes")
    return int(value)


def size_range(
    min_bytes: int, max_bytes: int, step_factor: int | None = None, step_bytes: int | None = None
) -> list[int]:
    """nccl-tests' loop: from min to max (inclusive), times step_factor, else plus step_bytes."""
    if min_bytes > max_bytes:
        raise UsageError(f"--min-bytes {min_bytes} is larger than --max-bytes {max_bytes}")
    if step_factor is not None and step_bytes is not None:
        raise UsageError("give --step-factor (-f) or --step-bytes (-i), not both")
    if step_factor is None and step_bytes is None:
        step_factor = 2
    if step_factor is not None:
        if step_factor < 2:
            raise UsageError(f"--step-factor must be 2 or more, got {step_factor}")
        if min_bytes < 1:
            raise UsageError("--min-bytes must be at least 1 with --step-factor (0 never grows)")
        count = math.floor(math.log(max_bytes / min_bytes, step_factor) + 1e-9) + 1
    else:
        if step_bytes < 1:
            raise UsageError(f"--step-bytes must be at least 1, got {step_bytes}")
        count = (max_bytes - min_bytes) // step_bytes + 1
    if count > MAX_SIZES:
        raise UsageError(f"that range has {count} sizes (more than {MAX_SIZES}); use a larger step")
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size = size * step_factor if step_factor is not None else size + step_bytes
    return sizes


def parse_size_list(text: str, element_size: int) -> list[int]:
    """`1K,64K,4M` as bytes, or a preset name (`seed`), whose element counts scale with element_size."""
    name = text.strip().lower()
    if name in PRESETS:
        return [count * element_size for count in PRESETS[name]]
    parts = [part for part in text.split(",") if part.strip()]
    if not parts:
        raise UsageError(f"--sizes: empty list; give sizes like 1K,64K,4M or a preset ({', '.join(PRESETS)})")
    sizes = [parse_size(part, "--sizes") for part in parts]
    if len(sizes) > MAX_SIZES:
        raise UsageError(f"--sizes has {len(sizes)} entries (more than {MAX_SIZES})")
    return sizes
