"""The advisor's proof: predicted against measured for each verified setting, and whether the pick beat the run's
own setting by more than the noise.

Each setting ran R times, interleaved with the others (harness.grid's schedule). Its measured step is the
median of its runs' step p50s. "Beat by more than the noise" is an exact one-sided permutation test on those
per-run values: of every way to split the 2R values into two groups of R, the share whose difference of means
is at least the one observed (the mean, not the median: with 3 values a median ties across many splits).
With R = 3 the smallest possible p is 1/20 = 0.05, so three repeats can show a
win at the 5 % level only if every run of the pick was faster than every run of the setting it replaces.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass

SIGNIFICANCE = 0.05


@dataclass(frozen=True)
class Verified:
    """One setting's prediction and its measured runs."""

    label: str
    flags: str
    predicted_step_ms: float
    measured_step_ms: list[float]
    """Each repeat's step p50."""

    @property
    def measured_median_ms(self) -> float:
        return statistics.median(self.measured_step_ms) if self.measured_step_ms else float("nan")

    @property
    def error(self) -> float:
        """predicted / measured − 1 (NaN without a measured run)."""
        return self.predicted_step_ms / self.measured_median_ms - 1 if self.measured_step_ms else float("nan")


def permutation_p(faster: list[float], slower: list[float]) -> float:
    """One-sided exact permutation p-value that `faster` runs faster: the share of splits whose difference of
    means is at least the observed one (1.0 when either is empty)."""
    if not faster or not slower:
        return 1.0
    observed = statistics.mean(slower) - statistics.mean(faster)
    pooled = faster + slower
    hits = total = 0
    for chosen in itertools.combinations(range(len(pooled)), len(faster)):
        picked = set(chosen)
        a = [pooled[i] for i in picked]
        b = [pooled[i] for i in range(len(pooled)) if i not in picked]
        total += 1
        hits += statistics.mean(b) - statistics.mean(a) >= observed - 1e-9
    return hits / total


def verdict(pick: Verified, current: Verified) -> str:
    """Whether the pick beat the current setting by more than the noise, in one line."""
    if not pick.measured_step_ms or not current.measured_step_ms:
        return "not resolved: a setting has no finished run"
    p = permutation_p(pick.measured_step_ms, current.measured_step_ms)
    gain = 1 - pick.measured_median_ms / current.measured_median_ms
    spread = (
        f"{pick.label}: {_span(pick.measured_step_ms)} ms against {current.label}: {_span(current.measured_step_ms)} ms"
    )
    if p <= SIGNIFICANCE and gain > 0:
        return f"the pick beat the run's setting by {100 * gain:.1f} % (permutation p = {p:.3f}; {spread})"
    p_slower = permutation_p(current.measured_step_ms, pick.measured_step_ms)  # the same test the other way
    if p_slower <= SIGNIFICANCE and gain < 0:
        return (
            f"the pick lost: it measured {-100 * gain:.1f} % slower than the run's setting (permutation p = "
            f"{p_slower:.3f}, the test the other way; {spread})"
        )
    floor = 1 / len(list(itertools.combinations(range(len(pick.measured_step_ms) + len(current.measured_step_ms)),
                                                 len(pick.measured_step_ms))))  # fmt: skip
    more = " (more repeats can resolve it)" if floor > SIGNIFICANCE else ""
    direction = "faster" if gain >= 0 else "slower"
    return (
        f"not resolved: the pick measured {abs(100 * gain):.1f} % {direction} than the run's setting, within the "
        f"noise (permutation p = {p:.3f}{more}; {spread})"
    )


def _span(values: list[float]) -> str:
    return f"{min(values):.1f}–{max(values):.1f}" if len(values) > 1 else f"{values[0]:.1f}"


def format_verification(rows: list[Verified], pick: Verified, current: Verified) -> str:
    width = max([len("setting"), *(len(row.label) for row in rows)])
    lines = [
        f"{'setting':<{width}} {'predicted ms':>12} {'measured ms':>11} {'error':>7}  runs (step p50, ms)",
    ]
    for row in rows:
        runs = ", ".join(f"{v:.1f}" for v in row.measured_step_ms) or "none finished"
        lines.append(
            f"{row.label:<{width}} {row.predicted_step_ms:>12.2f} {row.measured_median_ms:>11.2f} "
            f"{100 * row.error:>+6.1f}%  {runs}"
        )
    errors = [abs(r.error) for r in rows if r.measured_step_ms]
    if errors:
        lines.append(
            f"# prediction error: median |error| {100 * statistics.median(errors):.1f} %, "
            f"worst {100 * max(errors):.1f} %"
        )
    lines.append(f"# verdict: {verdict(pick, current)}")
    return "\n".join(lines)
