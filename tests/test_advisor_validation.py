"""bench.advisor_validation's noise floor: how far one run lies from its setting's other repeats, worked by hand."""

from __future__ import annotations

import math

import pytest

from bench.advisor_validation import noise_floor


def test_noise_floor_is_each_run_against_the_median_of_the_others():
    # 10 against median(12, 11) = 11.5: −13.0 %; 12 against median(10, 11) = 10.5: +14.3 %; 11 against 11: 0.
    # The setting run once has no other repeat to be judged against, so it is not counted.
    median, worst, runs = noise_floor({"a": [10.0, 12.0, 11.0], "b": [20.0]})
    assert runs == 3
    assert median == pytest.approx(1.5 / 11.5)
    assert worst == pytest.approx(1.5 / 10.5)


def test_no_repeats_leave_the_floor_unknown():
    median, worst, runs = noise_floor({"a": [10.0], "b": [20.0]})
    assert runs == 0 and math.isnan(median) and math.isnan(worst)
