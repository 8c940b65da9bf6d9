"""The timeline's stamps and lanes, without a process group: the extra stamps are taken on the marked step only
and resolved with it, and the compute lane splits the step at them."""

from __future__ import annotations

import pytest

from harness.train.stamps import BACKWARD_START, OPTIMIZER_END, BucketTiming, ResolvedStep, StepStamps
from harness.train.timeline import step_lanes


def test_marks_are_resolved_with_their_step_only():
    stamps = StepStamps(use_cuda=False)
    for step in (0, 1):
        stamps.begin(step)
    stamps.mark(1, BACKWARD_START)
    stamps.mark(1, BACKWARD_START)  # a later micro-batch's replaces it
    stamps.mark(5, OPTIMIZER_END)  # a step that never began: nothing
    stamps.end(0)
    stamps.end(1)
    assert stamps.resolve(0).marks is None
    marks = stamps.resolve(1).marks
    assert list(marks) == [BACKWARD_START] and marks[BACKWARD_START] >= 0


def test_compute_lane_splits_the_step_at_its_stamps():
    bucket = BucketTiming(7, 0, 3, 100, 400, "float32", 30.0, 36.0, 5.0, 0.5, ((30.5, 35.5),))
    resolved = ResolvedStep(7, 50.0, 40.0, [bucket], marks={BACKWARD_START: 12.0, OPTIMIZER_END: 46.0})
    lanes = {what: (start, end) for what, start, end in step_lanes(resolved)}
    # backward ends at the last bucket's ready stamp; DDP's wait for its result runs to the end of backward
    assert lanes == {
        "forward": (0.0, 12.0),
        "backward": (12.0, 30.0),
        "wait for comm": (30.0, 40.0),
        "optimizer step": (40.0, 46.0),
    }
    without_marks = ResolvedStep(7, 50.0, 40.0, [bucket])
    assert [what for what, _, _ in step_lanes(without_marks)] == ["optimizer step"]
    assert step_lanes(without_marks)[0][2] == pytest.approx(50.0), "the step's end where no optimizer end was taken"
