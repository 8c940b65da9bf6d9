"""The verify verdict in words: which way the pick moved the step, and whether that was more than the noise
(an exact permutation test over each setting's repeats, worked out by hand here)."""

from __future__ import annotations

from harness.analysis.verification import Verified, format_verification, verdict


def setting(label: str, runs: list[float]) -> Verified:
    return Verified(label=label, flags="", predicted_step_ms=20.0, measured_step_ms=runs)


def test_a_pick_faster_in_every_run_beat_the_setting():
    # Every pick run below every run of the setting: 1 split in C(6, 3) = 20 is as extreme, p = 0.05.
    line = verdict(setting("pick", [19.0, 19.5, 19.9]), setting("own", [22.0, 22.6, 23.0]))
    assert line.startswith("the pick beat the run's setting by 13.7 % (permutation p = 0.050;"), line


def test_a_faster_pick_within_the_noise_says_faster():
    # Medians 19.9 against 22.65: 12.1 % faster, but one pick run is the slowest of all, so p > 0.05.
    line = verdict(setting("pick", [19.9, 19.0, 24.0]), setting("own", [22.65, 22.0, 23.0]))
    assert line.startswith("not resolved: the pick measured 12.1 % faster than the run's setting, within the noise")


def test_a_slower_pick_says_slower_never_a_signed_change():
    # One pick run (20.5) among the setting's: slower at the median, but not in every run, so not resolved.
    line = verdict(setting("pick", [25.0, 20.5, 26.0]), setting("own", [20.0, 21.0, 19.0]))
    assert line.startswith("not resolved: the pick measured 25.0 % slower than the run's setting, within the noise")
    assert "+" not in line.split("(")[0]


def test_a_pick_slower_in_every_run_lost():
    # The same exact test the other way: every pick run above every run of the setting, p = 1/20.
    line = verdict(setting("pick", [25.0, 24.0, 26.0]), setting("own", [20.0, 21.0, 19.0]))
    assert line.startswith("the pick lost: it measured 25.0 % slower than the run's setting (permutation p = 0.050")


def test_the_table_fits_its_longest_label():
    long = "default (1, then 25 MiB), allreduce (run's own)"
    lines = format_verification([setting("5 MiB, fp16", [19.0]), setting(long, [22.0])], *[setting("x", [1.0])] * 2)
    head, first, second = lines.splitlines()[:3]
    column = head.index("predicted ms")
    assert first[column - 1] == " " and second[column - 1] == " " and second.startswith(long + " ")
