"""The prediction model: a training step's gradient communication from a network's α and bus bandwidth.

Each bucket's all_reduce time follows the α-β model with the ring's bus-bandwidth factor; buckets are
reduced one after another, each starting once its gradients are ready, and whatever runs past the end of
backward is exposed. FORMULAS states every step of it; harness.analysis.prediction_report prints them with
the numbers. The network comes from a raw sweep's all_reduce fit (network_from_sweep) or is given; the
buckets come from harness.analysis.bucket_layout. A run's summary.json adds measured/predicted.

A fit describes the sizes it was measured over: check_fit_range refuses buckets outside them unless the user
opts in (and then says so), and refuses always where the fit's β is infinite (its time did not grow with
size), which says nothing about the bandwidth of larger buckets. The fit's own error travels with the
prediction (Network.fit_max_rel_error).
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from harness.analysis.bucket_layout import PlannedBucket
from harness.analysis.checked import BadFile, check_regular
from harness.common.cli import UsageError
from harness.common.metrics import busbw_factor, percentile
from harness.common.numbers import is_finite
from harness.common.sweep_fits import FitRecordError, load_fits

ALPHA_SCALINGS = ("constant", "ring")
HOOKS = ("allreduce", "fp16", "bf16")  # PowerSGD's traffic depends on its rank and state: not modelled
# Bytes per element of the dtypes a run's collectives carry (summary.json names them as torch does).
DTYPE_ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}
COMPRESSED_DTYPE = {"fp16": "float16", "bf16": "bfloat16"}  # what the compress hooks send
COMPRESSED_ITEMSIZE = {hook: DTYPE_ITEMSIZE[dtype] for hook, dtype in COMPRESSED_DTYPE.items()}
# Backward costs about twice the forward (two matmuls per forward matmul), so 2/3 of forward + backward.
DEFAULT_BACKWARD_SHARE = 2 / 3

ASSUMED_READY = (
    "r_i = F + B × (S_0 + … + S_i) / Σ S   (bucket i ready, ASSUMED: gradients arrive in proportion to bytes over"
    " backward; F = (1−b)·C forward, B = b·C backward, C = compute-only forward + backward)"
)
MEASURED_READY = (
    "r_i = (F + max ready time of bucket i's gradients) × C / (F + B)   (MEASURED: the run's backward timeline, its"
    " calibration steps, F its forward and B its backward there, scaled onto the compute-only C: a timeline step's"
    " per-parameter stamps make it slower)"
)
FORMULAS = (
    "S_i = numel_i × bytes per element on the wire (4 for fp32 gradients, 2 with the fp16/bf16 hooks)",
    "t_i = α(n) + S_i × 2(n−1)/n / B_bus   (ring all_reduce: each rank sends and receives 2(n−1)/n × S)",
    "B_bus = β_sweep × 2(n_s−1)/n_s   (the sweep fits t = α + S/β at its world size n_s: β is algbw there)",
    "α(n) = α   (--alpha-scaling constant)   or   α × (n−1)/(n_s−1)   (ring: 2(n−1) hops, each α/(2(n_s−1)))",
    "comm = Σ t_i   (buckets are reduced one after another, in index order)",
    ASSUMED_READY,
    "start_i = max(r_i, end_{i−1}),  end_i = start_i + t_i,  exposed = max(0, end_last − C)",
    "step = C + exposed + other   (other: the rest of the step, the optimizer; from --run, else 0)",
    "efficiency = measured / predicted   (1.0: training reaches what the sweep's network predicts; above: slower)",
)


@dataclass(frozen=True)
class Network:
    """all_reduce cost on one network: latency α at the reference world size and the bus bandwidth."""

    alpha_us: float
    busbw_gbps: float
    ref_world_size: int
    """The world size α was measured at (the sweep's), for --alpha-scaling ring."""
    alpha_scaling: str = "constant"
    source: str = ""
    fit_max_rel_error: float | None = None
    """The sweep fit's largest relative error over its sizes; None where α and the bandwidth were given."""
    fit_range_bytes: tuple[int, int] | None = None
    """(smallest, largest) size the bandwidth was fitted over; None where the bandwidth was given."""
    after_backward_busbw_gbps: float | None = None
    """The bus bandwidth of a collective that runs once backward is over (the run's calibration all_reduces,
    network_from_run); None: the same as busbw_gbps. On CPU gloo a collective beside backward shares its cores."""
    wire_dtype: str = "float32"
    """The dtype the rates above were measured in (the run's buckets')."""
    gradient_dtype: str = "float32"
    """What the allreduce hook sends: the gradients' dtype."""
    dtype_rate: dict[str, float] = field(default_factory=dict)
    """Per dtype sent, its rate per byte over wire_dtype's, both measured after backward (network_from_run);
    a dtype not here: 1. gloo sums float16 on the CPU element by element, so where the cores bound it, half
    the bytes take about as long."""

    def alpha_at_us(self, world_size: int) -> float:
        """α(n): constant, or growing with the ring's 2(n−1) hops."""
        if self.alpha_scaling == "constant" or self.ref_world_size < 2:
            return self.alpha_us
        return self.alpha_us * (world_size - 1) / (self.ref_world_size - 1)

    def all_reduce_us(
        self, size_bytes: float, world_size: int, after_backward: bool = False, dtype: str | None = None
    ) -> float:
        """t = α(n) + S × 2(n−1)/n / B_bus, in µs (with one rank nothing travels: t = α); with `after_backward`,
        at the bandwidth of a collective that has backward's cores to itself, where the run measured one; for
        `dtype` (None: the gradients'), at that dtype's rate (dtype_rate)."""
        busbw = self.busbw_gbps
        if after_backward and self.after_backward_busbw_gbps is not None:
            busbw = self.after_backward_busbw_gbps
        busbw *= self.dtype_rate.get(dtype or self.gradient_dtype, 1.0)
        factor = busbw_factor("all_reduce", world_size)
        transfer = 0.0 if factor == 0 or math.isinf(busbw) else size_bytes * factor / (busbw * 1e3)
        return self.alpha_at_us(world_size) + transfer


def busbw_from_beta(beta_gbps: float, world_size: int) -> float:
    """The bus bandwidth behind a sweep's β (algbw-scale at `world_size`): β × 2(n−1)/n."""
    return beta_gbps * busbw_factor("all_reduce", world_size)


def network_from_sweep(path: str, alpha_scaling: str = "constant") -> Network:
    """The all_reduce fit of a raw sweep's JSON Lines (eager throughput, in place, else out of place)."""
    if not os.path.lexists(path):
        raise UsageError(f"--sweep {path!r} is not a file; write one with python -m harness.raw_sweep --json PATH")
    fit, placement = None, ""
    try:
        check_regular(path)  # a FIFO would block the reader, a device never end
        for placement in ("in_place", "out_of_place"):
            fit = load_fits(path, placement=placement).get("all_reduce")
            if fit is not None:
                break
    except (BadFile, FitRecordError) as err:
        raise UsageError(f"--sweep: {err}") from None
    except OSError as err:
        raise UsageError(f"--sweep {path!r} cannot be read: {err.strerror or err}") from None
    if fit is None:
        raise UsageError(
            f"--sweep {path!r} has no all_reduce fit (eager throughput); run python -m harness.raw_sweep "
            "--collectives all_reduce --json PATH over at least two sizes"
        )
    if fit.world_size < 2:
        raise UsageError(f"--sweep {path!r} ran on 1 rank: no data crossed a link, so it has no bandwidth")
    return Network(
        alpha_us=fit.alpha_us,
        busbw_gbps=busbw_from_beta(fit.beta_gbps, fit.world_size),
        ref_world_size=fit.world_size,
        alpha_scaling=alpha_scaling,
        source=f"sweep {path} (all_reduce {placement}, {fit.world_size} ranks, β {fit.beta_gbps:.4g} GB/s algbw)",
        fit_max_rel_error=fit.max_rel_error,
        fit_range_bytes=(fit.min_size_bytes or 0, fit.max_size_bytes or 0),  # (0, 0): not recorded, so unknown
    )


def lower_envelope_fit(size_bytes: list[float], time_us: list[float]) -> tuple[float, float, float] | None:
    """(α µs, β GB/s, largest relative excess) of the line t = α + S/β that lies on or below every point and is
    closest to them (least total excess): the line through two of the points, or through one with β = ∞.

    In training a bucket's time can only grow by what it waits for: the collective launched before it (NCCL's
    stream, gloo's queue), a slower peer, the CPU taken by backward. A least-squares line is dragged up by such
    a bucket (a 16 KB bucket queued 40 ms behind a 29 MB one gave α = 31 ms); the lower envelope is not."""
    points = sorted(zip(size_bytes, time_us, strict=True))
    if len({s for s, _ in points}) < 2:
        return None
    best = None
    lines = [(t, 0.0) for _, t in points]  # (α, µs per byte): flat lines
    for (s0, t0), (s1, t1) in itertools.combinations(points, 2):
        if s1 > s0 and t1 >= t0:
            gamma = (t1 - t0) / (s1 - s0)
            lines.append((t0 - gamma * s0, gamma))
    for alpha, gamma in lines:
        if alpha < 0 or any(alpha + gamma * s > t * (1 + 1e-9) for s, t in points):
            continue
        excess = sum(t - (alpha + gamma * s) for s, t in points)
        if best is None or excess < best[0]:
            best = (excess, alpha, gamma)
    if best is None:
        return None
    _, alpha, gamma = best
    worst = max((t - (alpha + gamma * s)) / t for s, t in points)
    return alpha, (math.inf if gamma == 0 else 1.0 / (gamma * 1e3)), worst


# Where the lower envelope's line gives the buckets' summed time wrong by more than this, the line is held by small
# buckets that do not scale, and the step's busy-time line is taken instead if it misses the summed time by less.
# On a tbf-shaped link (the known-answer run CI caught, 2026-12-04) a 16 KB bucket took 40.7 ms and a 4.2 MB one
# 44.4: α = 40.7 ms, B = 1.15 GB/s, twelve times the link, the 29 MB bucket's 310 ms put at 66, the summed time
# 62 % short, and the pick was 25 MiB allreduce; with the busy-time line, 1 MiB fp16 as worked out. At 25 % the
# resnet50 loopback validation grid (envelope 29 % short) switched too and got worse (median |error| 5.7 → 7.5 %,
# worst 14.6 → 22.8 %), hence half.
ENVELOPE_SUMMED_ERROR_LIMIT = 0.5


def _summed_time_error(network: Network, points: list[tuple[float, float]]) -> float:
    """|Σ predicted − Σ measured| / Σ measured over the buckets' (bytes, µs): what a prediction of the step's
    communication, which adds the buckets' times, gets wrong."""
    world = network.ref_world_size
    measured = sum(t for _, t in points)
    return abs(sum(network.all_reduce_us(s, world) for s, _ in points) - measured) / measured


def _worst_miss(network: Network, points: list[tuple[float, float]]) -> float:
    """The largest (measured − predicted) / measured over the buckets' (bytes, µs): how far the fit's line lies
    below the slowest bucket."""
    world = network.ref_world_size
    return max((t - network.all_reduce_us(s, world)) / t for s, t in points)


def _alpha_beyond(points: list[tuple[float, float]], busbw_gbps: float, world: int) -> float:
    """α at a given bandwidth: the least any collective of (bytes, µs) took beyond its bytes at `busbw_gbps`, at
    least 0."""
    probe = Network(0.0, busbw_gbps, world)
    return max(0.0, min(t - probe.all_reduce_us(s, world) for s, t in points))


def network_from_run(summary: dict[str, Any], run: str, alpha_scaling: str = "constant") -> Network | None:
    """The α-β fit of the training's own all_reduce: the lower envelope (lower_envelope_fit) of each measured
    bucket's collective time (p50) against its bytes on the wire. None where it cannot be fitted: one rank
    (nothing crossed a link), fewer than two distinct bucket sizes, or no bucket timed.

    Where the envelope is flat (no line through two buckets stays at or above α = 0: on a shaped link every
    bucket after the first waited behind another, so time did not grow with bytes), or its line misses the buckets'
    summed time by more than ENVELOPE_SUMMED_ERROR_LIMIT where the other misses it by less, the bandwidth is the
    step's instead: its bytes over its busy communication time (busbw_gbps_p50, the link's rate within 10 %
    on tbf-shaped links, docs/BENCHMARKS.md), and α the least any bucket took beyond its bytes at that rate.
    Where the envelope is slower than that rate, the step's rate with α from the calibration's all_reduces after
    backward; where the α of either fit is longer than the shortest of those collectives, α is held to that one's
    time."""
    world = summary.get("world_size") or 1
    points = [
        (b["bytes"], 1e3 * b["time_ms_p50"])
        for b in summary.get("buckets", [])
        if is_finite(b.get("time_ms_p50")) and b.get("bytes")
    ]
    fitted = lower_envelope_fit([s for s, _ in points], [t for _, t in points]) if world > 1 else None
    if fitted is None:
        return None
    alpha, beta, worst = fitted
    busbw, how = busbw_from_beta(beta, world), "lower envelope"
    step_busbw = summary.get("totals", {}).get("busbw_gbps_p50")
    if is_finite(step_busbw) and step_busbw > 0:
        busy_alpha = _alpha_beyond(points, step_busbw, world)
        busy = Network(busy_alpha, step_busbw, world)
        envelope_error = math.inf if math.isinf(beta) else _summed_time_error(Network(alpha, busbw, world), points)
        if envelope_error > ENVELOPE_SUMMED_ERROR_LIMIT and _summed_time_error(busy, points) < envelope_error:
            how = "the step's busy-time bandwidth; α: the least any bucket took beyond it"
            if not math.isinf(beta):
                how += f"; the lower envelope missed the buckets' summed time by {envelope_error:.0%}"
            alpha, busbw = busy_alpha, step_busbw
            worst = _worst_miss(busy, points)
    rates_alpha = None  # the α the rates after backward are taken with (with_run_rates); None: α itself
    slower = how == "lower envelope" and is_finite(step_busbw) and busbw < step_busbw
    clean_alpha = after_backward_alpha(summary, step_busbw, world) if slower else None
    if clean_alpha is not None:
        # The envelope carries the bytes slower than the step did over its busy time, which the model, sending one
        # collective's bytes at a time, cannot do: its line went through buckets that waited, not through the link.
        # The step's rate, then; and α not from the buckets (a first bucket that waited for a slower rank holds it
        # up: gpt2 over two shaped hosts, 145 ms against 45 in the other runs, docs/BENCHMARKS.md) but from the
        # calibration's all_reduces after backward, which start with the ranks lined up and nothing else running.
        how = (
            f"the step's busy-time bandwidth, the lower envelope's {busbw:.3g} GB/s being slower; α: the least any "
            "calibration all_reduce after backward took beyond its bytes at that rate"
        )
        alpha, busbw = clean_alpha, step_busbw
        worst = _worst_miss(Network(alpha, busbw, world), points)
    elif alpha > (shortest := _shortest_after_backward_us(summary)):
        # A fixed cost longer than a whole collective of the same run, one with the ranks lined up and nothing else
        # running, is not a latency: the line went through buckets that queued behind others (gpt2 on 4 ranks
        # sharing 2 cores: the envelope's α 202 ms, where its calibration's 18.9 MB all_reduces took 21-35 ms;
        # resnet50 on 4 ranks of 4 threads: the least any bucket took beyond the step's rate, 12.3 ms, where a
        # whole 8.2 MB collective took 6.2 ms, and each of 35 buckets at 1 MiB was charged it). α is held to that
        # whole collective's time, a bound that keeps what collectives beside backward pay beyond clean ones.
        how += (
            f"; its α {alpha / 1e3:.3g} ms held to the {shortest / 1e3:.3g} ms of the shortest calibration "
            "all_reduce after backward"
        )
        alpha = shortest
        worst = _worst_miss(Network(alpha, busbw, world), points)
        # Held so, α is by this rule's own reading what a collective beside backward pays beyond a clean one: the
        # clean ones' rates after backward are then their bytes over their time less their own fixed cost
        # (clean_collectives_alpha), not less α. Less α, the shortest had nothing left and the rest were stretched
        # by how little was. resnet50 on 4 ranks of 4 threads, OMP_WAIT_POLICY=PASSIVE, base 11:20:35 UTC of the
        # 11:14 grid (docs/validation/): its envelope's α 6.87 ms, held to a whole 8.2 MB collective's 5.06 ms,
        # read float32 after backward as 3.26 GB/s and float16 per byte as 0.24× float32's, where the grid's other
        # two bases (α 1.56 and 2.91 ms, not held) read 2.23 and 2.95 GB/s, 0.42× and 0.32×; from it 1 MiB fp16
        # was predicted 20.8 % long and 100 MiB allreduce 13.7 % short. Those collectives' own fixed cost is
        # 0.49 ms: 2.28 GB/s, 0.29×, +17.9 % and -8.2 %. Over the ten kept grids' tarballs this acts on 10 of the
        # 26 base runs; three grids' median |error| fell (by 0.5 to 3.6 points), and no grid's median or worst
        # rose by more than 2.4 points (resnet50 on 2 ranks: worst 10.2 -> 12.6 %, its noise floor 4.9 %, 16.0 %).
        # On a grid first run after this rule (23:09 UTC, docs/validation/): worst 22.3 -> 20.2 %, median 7.1 % both,
        # the pick within the measured best's spread from 2 of 3 bases (1 of 3 before).
        rates_alpha = clean_collectives_alpha(summary, alpha)
        if rates_alpha is not None:
            how += f"; the rates after backward less those collectives' own fixed cost, {rates_alpha / 1e3:.2g} ms"
    sources = sorted({b.get("time_source") or "?" for b in summary.get("buckets", [])})
    source = f"in-run fit ({how}) of {run}'s {len(points)} buckets ({world} ranks, {', '.join(sources)} times)"
    network = Network(
        alpha_us=alpha,
        busbw_gbps=busbw,
        ref_world_size=world,
        alpha_scaling=alpha_scaling,
        source=source,
        fit_max_rel_error=worst,
        fit_range_bytes=(min(s for s, _ in points), max(s for s, _ in points)),
    )
    return with_run_rates(network, summary, after_backward=True, rates_alpha_us=rates_alpha)


def buckets_dtype(summary: dict[str, Any]) -> str:
    """The dtype the run's buckets went on the wire in (summary.json's buckets), float32 where none says."""
    return next((b["dtype"] for b in summary.get("buckets", []) if b.get("dtype")), "float32")


def after_backward_rows(summary: dict[str, Any]) -> Iterator[tuple[str, int, float]]:
    """(dtype, bytes, ms) of each all_reduce the run made after backward (summary.json's after_backward_all_reduces)."""
    recorded = summary.get("after_backward_all_reduces") or {}
    return zip(recorded.get("dtype", []), recorded.get("bytes", []), recorded.get("ms", []), strict=False)


def _after_backward_points(summary: dict[str, Any]) -> list[tuple[float, float]]:
    """(bytes, µs) of each of the run's all_reduces after backward in the buckets' dtype (after_backward_rows)."""
    wire = buckets_dtype(summary)
    return [
        (size, 1e3 * ms)
        for dtype, size, ms in after_backward_rows(summary)
        if dtype == wire and size > 0 and is_finite(ms)
    ]


def _shortest_after_backward_us(summary: dict[str, Any]) -> float:
    """The shortest of the run's all_reduces after backward in the buckets' dtype, µs (infinite where none)."""
    return min((t for _, t in _after_backward_points(summary)), default=math.inf)


def clean_collectives_alpha(summary: dict[str, Any], at_most_us: float) -> float | None:
    """The fixed cost, µs, of the run's all_reduces after backward in the buckets' dtype themselves: the intercept of
    their Theil-Sen line (the median of every pair's slope, then the median of t − slope × S), a fit that a few
    collectives slowed by the host do not move, held to 0 … `at_most_us`; None where they hold fewer than two
    distinct sizes. A run's calibration gives dozens of them over several sizes (resnet50: 50 over five)."""
    points = _after_backward_points(summary)
    slopes = [(t1 - t0) / (s1 - s0) for (s0, t0), (s1, t1) in itertools.combinations(points, 2) if s1 != s0]
    if not slopes:
        return None
    slope = percentile(slopes, 50)
    return min(at_most_us, max(0.0, percentile([t - slope * s for s, t in points], 50)))


def after_backward_alpha(summary: dict[str, Any], busbw_gbps: float, world: int) -> float | None:
    """α from the run's all_reduces after backward in the buckets' dtype (after_backward_all_reduces): the least any
    took beyond its bytes at `busbw_gbps`, at least 0; None where the run made none (one rank, no calibration).

    Those collectives hold no wait for a slower rank (calibration lines the ranks up first) and no queue (one at a
    time, with backward over), so what they take beyond their bytes bounds the fixed cost from above."""
    if world < 2 or not busbw_gbps > 0:
        return None
    points = _after_backward_points(summary)
    return _alpha_beyond(points, busbw_gbps, world) if points else None


def with_run_latency(network: Network, summary: dict[str, Any]) -> Network:
    """A sweep's `network` with α as the run's own buckets paid it: the median over the run's timed buckets of
    their collective time less the sweep's bandwidth term, where that is above the sweep's α. A sweep times
    collectives back to back on an idle machine; a training's each pay the hook, DDP's bucket and gloo's hand-off,
    beside backward (gpt_tiny on 2 loopback ranks: its one 0.48 MB bucket took 1.41 ms, where the sweep's α and
    bandwidth give 0.86). The bandwidth stays the sweep's: one run's few bucket sizes cannot fit it."""
    world = summary.get("world_size") or 1
    paid = [  # the sweep's dtype only: another's bytes go at another rate
        1e3 * b["time_ms_p50"] - (network.all_reduce_us(b["bytes"], world) - network.alpha_at_us(world))
        for b in summary.get("buckets", [])
        if is_finite(b.get("time_ms_p50")) and b.get("bytes") and b.get("dtype", "float32") == "float32"
    ]
    if world < 2 or not paid:
        return network
    alpha = percentile(paid, 50)
    if network.alpha_scaling != "constant" and network.ref_world_size >= 2:
        alpha *= (network.ref_world_size - 1) / (world - 1)  # α(n) back to the sweep's world size (alpha_at_us)
    if alpha <= network.alpha_us:
        return network
    source = f"{network.source}; α {alpha:.0f} µs as the run's {len(paid)} buckets paid it beyond the sweep's bandwidth"
    return replace(network, alpha_us=alpha, source=source)


def with_run_rates(
    network: Network, summary: dict[str, Any], after_backward: bool, rates_alpha_us: float | None = None
) -> Network:
    """`network` with what the run measured after backward (after_backward_busbw): each dtype's rate per byte
    against the run's own buckets' dtype, and with `after_backward` (an in-run fit, whose buckets ran beside
    backward) the rate after backward itself. A sweep is a collective after backward already: its rate stays.
    The rates are taken less `rates_alpha_us` (None: the network's α), the fixed cost of those collectives."""
    world = summary.get("world_size") or 1
    # The dtype the network's rates are in: the run's buckets' for its own fit, float32 for a sweep's.
    wire = buckets_dtype(summary) if after_backward else "float32"
    rates_alpha = network.alpha_at_us(world) if rates_alpha_us is None else rates_alpha_us
    after = after_backward_busbw(summary, rates_alpha, world)
    if wire not in after:
        return network
    source = network.source
    busbw_after = after[wire][0] if after_backward else None
    if busbw_after is not None:
        source += (
            f"; after backward B_bus {busbw_after:.3g} GB/s, the median of its {after[wire][1]} calibration"
            f" all_reduces in {wire} (backward over, nothing else running)"
        )
    dtype_rate = {dtype: rate / after[wire][0] for dtype, (rate, _) in after.items() if dtype != wire}
    if dtype_rate:
        source += "; per byte, " + ", ".join(f"{dtype} {ratio:.2f}×" for dtype, ratio in sorted(dtype_rate.items()))
        source += f" {wire}'s rate (the run's probes after backward)"
    # A dtype whose every probe fell under 2α above would otherwise go at the wire dtype's rate, as if never probed:
    # resnet50 on 4 ranks of 4 threads, with α 12.3 ms (before α was held in the busy-time fit too), had both of its
    # 12.6 MB float16 probes at 21-22 ms, and the advisor picked fp16, measured 34 % slower than allreduce
    # (docs/BENCHMARKS.md, 2026-12-06). The probe's own pair gives the rate then.
    paired = {dtype: ratio for dtype, ratio in paired_dtype_rates(summary, wire).items() if dtype not in after}
    if paired:
        dtype_rate |= paired
        source += "; per byte, " + ", ".join(f"{dtype} {ratio:.2f}×" for dtype, ratio in sorted(paired.items()))
        source += (
            f" {wire}'s rate, from whole times (α in both: every probe of it under 2α), against the {wire} "
            "all_reduce of as many elements before it"
        )
    gradient_dtype = (summary.get("after_backward_all_reduces") or {}).get("dtype", [wire])[0]
    return replace(
        network,
        source=source,
        after_backward_busbw_gbps=busbw_after,
        wire_dtype=wire,
        gradient_dtype=gradient_dtype,
        dtype_rate=dtype_rate,
    )


def after_backward_busbw(summary: dict[str, Any], alpha_us: float, world: int) -> dict[str, tuple[float, int]]:
    """Per dtype, (B_bus, samples) of the run's all_reduces once backward is over: its calibration steps average
    their gradients after backward, chunk by chunk, and its timeline steps probe the compress hooks' dtypes,
    each stamped apart from the copies around it (calibration.py). B_bus = S × 2(n−1)/n / (t − α) per
    collective, its median, over the collectives that took at least 2α (where α takes most of the time, t − α is
    noise over a small remainder). Empty where the run has none (world size 1, no calibration, an older train.py)."""
    factor = busbw_factor("all_reduce", world)
    rates: dict[str, list[float]] = {}
    for dtype, size, ms in after_backward_rows(summary):
        # Only where the bytes, not α, take most of the time (t ≥ 2α: else t − α is noise over a small remainder),
        # and t > α, so that t − α is never 0 (α = 0 and t = 0).
        if factor > 0 and is_finite(ms) and size > 0 and 1e3 * ms >= 2 * alpha_us and 1e3 * ms > alpha_us:
            rates.setdefault(dtype, []).append(size * factor / ((1e3 * ms - alpha_us) * 1e3))
    return {dtype: (percentile(values, 50), len(values)) for dtype, values in rates.items()}


def paired_dtype_rates(summary: dict[str, Any], wire: str) -> dict[str, float]:
    """Per probed dtype other than `wire`, the median over its probes of its rate per byte against the `wire`
    all_reduce of as many elements that came before it (calibration_average.average_gradients probes with the first
    chunk's element count), each rate from the whole time, α included in both. Where α takes most of a probe's time
    this is the only rate it gives: with the bytes' time alike per element, a dtype of half the bytes comes out at
    half the rate, the same time for the same gradients. Empty where the run has no such pair."""
    if wire not in DTYPE_ITEMSIZE:
        return {}
    timed = [
        (dtype, size // DTYPE_ITEMSIZE[dtype], size / ms)  # (dtype, elements, bytes per ms)
        for dtype, size, ms in after_backward_rows(summary)
        if dtype in DTYPE_ITEMSIZE and isinstance(size, int) and size > 0 and is_finite(ms) and ms > 0
    ]
    ratios: dict[str, list[float]] = {}
    for index, (dtype, elements, rate) in enumerate(timed):
        if dtype == wire:
            continue
        before = (r for d, e, r in reversed(timed[:index]) if d == wire and e == elements)
        wire_rate = next(before, None)
        if wire_rate is not None:
            ratios.setdefault(dtype, []).append(rate / wire_rate)
    return {dtype: percentile(values, 50) for dtype, values in ratios.items()}


def check_fit_range(network: Network, sizes: list[int], extrapolate: bool = False, sweep: str = "") -> str | None:
    """None when every size lies within the sizes the bandwidth was fitted over (or it was given); a UsageError
    naming the range and the bucket outside it, or with `extrapolate` the warning to show instead."""
    if network.fit_range_bytes is None or not sizes:
        return None
    low, high = network.fit_range_bytes
    outside = [s for s in sizes if not low <= s <= high]
    if not outside:
        return None
    worst = max(outside) if max(outside) > high else min(outside)
    measured = f"over {low:,} to {high:,} bytes" if high else "over sizes it does not record (no max_size_bytes)"
    what = (
        f"--sweep {sweep}: its all_reduce fit was measured {measured}, and {len(outside)} of {len(sizes)} buckets "
        f"lie outside (one of {worst:,} bytes)"
    )
    if math.isinf(network.busbw_gbps):
        raise UsageError(
            f"{what}: its time did not grow with size (β = ∞), so it holds no bandwidth to predict them with, even "
            "with --extrapolate; sweep larger sizes (python -m harness.raw_sweep -e) or give --busbw-gbps"
        )
    if not extrapolate:
        raise UsageError(
            f"{what}; sweep sizes that cover the buckets (python -m harness.raw_sweep -b/-e), or pass --extrapolate "
            "to predict beyond the measured sizes"
        )
    return f"{what}: predicted beyond the measured sizes, as --extrapolate asks"


def wire_bytes(bucket: PlannedBucket, hook: str) -> int:
    """Bytes of the bucket's all_reduce: compressed hooks send 2 bytes an element, else the gradient's."""
    return bucket.numel * COMPRESSED_ITEMSIZE.get(hook, bucket.grad_itemsize)


def overlap_timeline(
    times_ms: list[float],
    sizes: list[int],
    compute_ms: float,
    backward_share: float,
    ready_ms: list[float] | None = None,
) -> tuple[list[float], list[float], float]:
    """(ready, end) of each bucket and the exposed ms, with time 0 at the start of forward.

    PlannedBucket i is ready at `ready_ms[i]` where the run measured it, else (ASSUMED_READY) once backward has
    produced its share of the bytes; it starts when it is ready and the previous bucket is done, and what ends
    after backward (at compute_ms) is exposed.
    """
    total = sum(sizes) or 1
    forward_ms, backward_ms = (1 - backward_share) * compute_ms, backward_share * compute_ms
    ready, ends, done, cumulative = [], [], 0.0, 0
    for i, (t, size) in enumerate(zip(times_ms, sizes, strict=True)):
        cumulative += size
        r = ready_ms[i] if ready_ms is not None else forward_ms + backward_ms * cumulative / total
        done = max(r, done) + t
        ready.append(r)
        ends.append(done)
    return ready, ends, max(0.0, done - compute_ms) if ends else 0.0


def predict(
    buckets: list[PlannedBucket],
    network: Network,
    world_size: int,
    hook: str = "allreduce",
    compute_ms: float | None = None,
    other_ms: float = 0.0,
    backward_share: float = DEFAULT_BACKWARD_SHARE,
    ready_ms: list[float] | None = None,
) -> dict[str, Any]:
    """Per-bucket and per-step predicted communication; exposure too when the compute time is known, with each
    bucket's measured ready time (from the start of forward) where `ready_ms` gives them."""
    sizes = [wire_bytes(b, hook) for b in buckets]
    times_ms = [network.all_reduce_us(s, world_size) / 1e3 for s in sizes]
    comm_ms = sum(times_ms)
    rows = [
        {"index": b.index, "bytes": s, "predicted_ms": t, "first_param": b.first_param, "last_param": b.last_param}
        for b, s, t in zip(buckets, sizes, times_ms, strict=True)
    ]
    totals: dict[str, Any] = {"bytes_per_step": sum(sizes), "buckets": len(buckets), "comm_ms": comm_ms}
    if compute_ms is not None:
        ready, ends, exposed = overlap_timeline(times_ms, sizes, compute_ms, backward_share, ready_ms)
        for row, r, e in zip(rows, ready, ends, strict=True):
            row["ready_ms"], row["end_ms"] = r, e
        step_ms = compute_ms + exposed + other_ms
        totals.update(
            compute_ms=compute_ms,
            other_ms=other_ms,
            backward_share=backward_share,
            exposed_ms=exposed,
            step_ms=step_ms,
            exposed_share_of_step=exposed / step_ms if step_ms > 0 else math.nan,
            overlap_pct=100.0 * (1 - exposed / comm_ms) if comm_ms > 0 else math.nan,
        )
    return {
        "world_size": world_size,
        "hook": hook,
        "network": {
            "alpha_us": network.alpha_us,
            "alpha_at_world_size_us": network.alpha_at_us(world_size),
            "busbw_gbps": network.busbw_gbps,
            "ref_world_size": network.ref_world_size,
            "alpha_scaling": network.alpha_scaling,
            "source": network.source,
            "fit_max_rel_error": network.fit_max_rel_error,
            # None where the bandwidth was given or the fit does not record its sizes.
            "fit_min_size_bytes": (network.fit_range_bytes or (0, 0))[1] and network.fit_range_bytes[0],
            "fit_max_size_bytes": (network.fit_range_bytes or (0, 0))[1] or None,
        },
        "buckets": rows,
        "totals": totals,
    }


def add_efficiency(prediction: dict[str, Any], summary: dict[str, Any]) -> None:
    """Measured (summary.json) / predicted, per bucket and per step, into `prediction`."""
    measured = {b["index"]: b for b in summary.get("buckets", [])}
    for row in prediction["buckets"]:
        m = measured.get(row["index"], {}).get("time_ms_p50")
        row["measured_ms"] = m
        row["measured_over_predicted"] = _ratio(m, row["predicted_ms"])
    totals, run = prediction["totals"], summary.get("totals", {})
    totals["measured_comm_ms"] = run.get("comm_ms_p50")
    totals["comm_measured_over_predicted"] = _ratio(run.get("comm_ms_p50"), totals["comm_ms"])
    if "exposed_ms" in totals:
        totals["measured_exposed_ms"] = run.get("exposed_ms_p50")
        totals["measured_step_ms"] = run.get("step_ms_p50")
        totals["step_measured_over_predicted"] = _ratio(run.get("step_ms_p50"), totals["step_ms"])
    sources = {b.get("time_source") for b in summary.get("buckets", [])}
    prediction["measured_time_source"] = ",".join(sorted(s for s in sources if s))


def other_ms_of_run(totals: dict[str, Any]) -> float:
    """The part of a run's step outside forward + backward (the optimizer, the rest), from its summary.json
    totals: step ms − forward+backward ms (medians), 0 where either is unknown."""
    step, fwd_bwd = totals.get("step_ms_p50"), totals.get("fwd_bwd_ms_p50")
    return max(0.0, step - fwd_bwd) if is_finite(step) and is_finite(fwd_bwd) else 0.0


def _ratio(measured: float | None, predicted: float) -> float | None:
    if not is_finite(measured) or predicted <= 0:
        return None
    return measured / predicted
