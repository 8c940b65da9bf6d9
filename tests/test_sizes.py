"""Size syntax and size lists of the raw sweep: nccl-tests' K/M/G (binary), its loop, presets, mistakes."""

from __future__ import annotations

import pytest

from harness.common.cli import UsageError
from harness.sweep.sizes import MAX_SIZES, SEED_ELEMENTS, parse_size, parse_size_list, size_range


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8", 8),
        ("0", 0),
        ("1K", 1024),
        ("64k", 65536),
        ("4M", 4 * 1024**2),
        ("1G", 1024**3),
        ("1.5M", 1536 * 1024),
        ("1KB", 1024),
        ("2KiB", 2048),
        (" 16 ", 16),
    ],
)
def test_parse_size_binary_suffixes(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "K", "12X", "-8", "1T", "1.5", "0.3K", "8 8", "1e3"])
def test_parse_size_rejects_with_the_option_name(text):
    with pytest.raises(UsageError, match="--min-bytes"):
        parse_size(text, "--min-bytes")


def test_range_by_factor_is_nccl_tests_loop():
    assert size_range(8, 128, step_factor=2) == [8, 16, 32, 64, 128]
    assert size_range(8, 100, step_factor=4) == [8, 32]  # the max is a bound, not a size
    assert size_range(8, 32 * 1024**2) == [8 * 2**k for k in range(23)]  # factor 2 when no step is given
    assert size_range(1024, 1024, step_factor=2) == [1024]


def test_range_by_bytes():
    assert size_range(1024, 4096, step_bytes=1024) == [1024, 2048, 3072, 4096]
    assert size_range(0, 10, step_bytes=5) == [0, 5, 10]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_bytes": 1024, "max_bytes": 8}, "larger than --max-bytes"),
        ({"min_bytes": 8, "max_bytes": 64, "step_factor": 1}, "--step-factor"),
        ({"min_bytes": 0, "max_bytes": 64, "step_factor": 2}, "--min-bytes"),
        ({"min_bytes": 8, "max_bytes": 64, "step_bytes": 0}, "--step-bytes"),
        ({"min_bytes": 8, "max_bytes": 64, "step_factor": 2, "step_bytes": 8}, "not both"),
        ({"min_bytes": 1, "max_bytes": 1024**3, "step_bytes": 1}, str(MAX_SIZES)),
    ],
)
def test_range_mistakes(kwargs, message):
    with pytest.raises(UsageError, match=message):
        size_range(**kwargs)


def test_explicit_list_and_seed_preset():
    assert parse_size_list("1K,64K,4M", 4) == [1024, 65536, 4 * 1024**2]
    seed = parse_size_list("seed", 4)
    assert seed == [4 * n for n in SEED_ELEMENTS]
    assert seed[0] == 4 and seed[-1] == 1024**3  # float32: one element up to 256M elements (1 GiB)
    assert parse_size_list("SEED", 2)[-1] == 512 * 1024**2  # elements scale with the dtype
    with pytest.raises(UsageError, match="--sizes"):
        parse_size_list("1K,banana", 4)
    with pytest.raises(UsageError, match="empty"):
        parse_size_list(",", 4)
