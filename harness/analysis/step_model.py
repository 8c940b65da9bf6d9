"""The step model behind the advisor: one training step's time for any bucket cap, cap list and hook.

Inputs, all from one measured run (harness.analysis.backward_timeline reads them): when each gradient becomes
ready in backward, the compute-only step, the rest of the step (the optimizer), the codec cost of the
compress hooks, and a network (the run's own buckets' α-β fit, a sweep's, or one given). FORMULAS states the
model; every printed prediction carries them.

- DDP's buckets are rebuilt with torch's own assignment function (`dist._compute_bucket_assignment_by_size`,
  as DDP's rebuild calls it), the parameters taken in their measured ready order.
- A bucket is ready when its last gradient is. Buckets launch in index order, and a process group runs L of
  their collectives at once, each taking the next in the queue: NCCL L = 1 (one communicator's collectives
  run in order on its stream), gloo L = its worker threads (2 by default; summary.json's
  "collectives_at_once"). Collectives in flight together overlap their latency α, not their bytes: the link
  carries one collective's bytes at a time, in launch order. (gpt_tiny at 0.01 MiB on 2 loopback ranks, ten
  latency-bound buckets: serial chaining predicted 26.3 ms exposed against 12.4–16.1 measured; the union of
  the ten collectives' intervals was about half their sum.)
- The fp16 and bf16 hooks send 2 bytes an element. Their cast runs on the compute path before the bucket
  launches (it delays the rest of backward), and their copy back runs after the collective; the measured
  codec time is split half and half between the two.
- Communication that runs while backward computes slows backward (the two share memory bandwidth, SMs or
  CPU cores: the Echo simulator, arXiv 2412.12487). The model charges κ ms of compute per ms of hidden
  communication. κ is fitted on the run's own setting from its measured interference (exposed − tail: how
  much later backward ended than compute-only), not from its whole forward + backward: the tail holds the
  link's noise (a 28 MB bucket that now and then takes 10 % longer), which fitted to κ moved it from 0.01
  to 0.23 on the known-answer model. What κ cannot carry (κ is kept within [0, 1]) and the tail model's own
  error at the run's setting are a constant residual, reported, so the run's own setting predicts its
  measured forward + backward. A run that hides little communication (DDP's default on a small model hides
  one bucket) leaves κ = slow-down / hidden at the mercy of a few ms of noise, so the range κ takes over the
  interference's 95 % interval is kept too (StepInputs.kappa_range), and the advisor says when the pick
  changes within it. A run that hides nothing leaves κ unmeasured: 0, with the range [0, 1]. (Setting κ to
  0 wherever that interval holds 0 was tried: on resnet50 at 2 CPU ranks, where gloo's threads do slow
  backward, it left the run's own setting predicted 8.7 % fast.)

torch is imported only inside `assign_buckets`, so the commands that use this module answer a mistake first.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from harness.analysis.backward_timeline import BackwardTimeline, CodecCost, ParamReady
from harness.analysis.prediction import COMPRESSED_DTYPE, COMPRESSED_ITEMSIZE, Network
from harness.common.metrics import busy_ms
from harness.common.names import DEFAULT_BUCKET_CAP_MB, MIB

FIRST_BUCKET_BYTES = MIB  # dist._DEFAULT_FIRST_BUCKET_BYTES: DDP's first bucket while the cap is its default
ADVISOR_CAPS_MB = (1, 2, 5, 10, 25, 50, 100, 200)
MAX_KAPPA = 1.0  # one ms of hidden communication cannot cost backward more than one ms: it would then be serial
# The per-bucket list is searched over at most MAX_LIST_GROUPS runs of consecutive parameters, keeping at most
# PARETO_POINTS splits per prefix: O(n² × points).
MAX_LIST_GROUPS = 400
PARETO_POINTS = 12
# The local search that refines the list makes at most this many predictions over all its seeds (each 0.1 to
# 2.5 ms on the 2-core machine, for 4 to 200 buckets; resnet50's 161 parameters took 170–630 a seed).
LOCAL_SEARCH_TRIALS = 5_000

FORMULAS = (
    "order: parameters sorted by measured ready time r_p (from the start of backward, calibration steps)",
    "buckets: torch's dist._compute_bucket_assignment_by_size(order, limits), limits = [1 MiB, 25 MiB] for DDP's"
    " default, [cap, cap] for --bucket-cap-mb cap, or one limit per bucket for a list",
    "S_b = Σ numel × bytes on the wire (4 for fp32 gradients, 2 with the fp16/bf16 hooks)",
    "t_b = α(n) + S_b × 2(n−1)/n / B_bus   (ring all_reduce), at the in-run fit's B_bus while backward runs and at"
    " B_bus' (the run's calibration all_reduces, made after backward) for what runs after it: a collective that"
    " starts sending (s_b = max(start_b + α(n), wire_{b−1}) − α(n), below) before E and outlasts it does the part"
    " of t_b left at E at B_bus' (end = E + (1 − (E − s_b)/t_b) × t_b'); both × the dtype's rate per byte"
    " against the run's own (fp16/bf16 probed after backward in the timeline steps; 1 where not probed)",
    "k_b = codec(numel_b) = fixed + per-element × numel_b   (fp16/bf16 only; half before the launch, half after)",
    "launch_b = max(F + max_{p∈b} r_p + Σ_{c≤b} (k_c/2 + h), launch_{b−1})   (F: forward; casts and the hook's host"
    " work run on the compute path)",
    "start_b = max(launch_b, start_{b−1}, the earliest a thread is free: the L-th latest end_c, c < b)   (L"
    " collectives at once, in index order: NCCL 1, gloo its worker threads)",
    "end_b = max(start_b + α(n), wire_{b−1}) + (t_b − α(n)) + k_b/2,  wire_b = end_b − k_b/2   (latencies overlap;"
    " the bytes of one collective at a time; with L = 1: end_b = start_b + t_b + k_b/2)",
    "E = F + backward + Σ (k_b/2 + h)   (the end of backward; h: one bucket's host work on the thread that runs"
    " backward, the fixed part of a fixed + per-byte fit of the hook's call time over the run's buckets, from an"
    " allreduce run; charged on CPU gloo,"
    " where that thread is backward's, 0 on the GPU);  tail = max(0, end_last − E)",
    "hidden = |∪_b [start_b, min(end_b, E)]|   (communication under backward: the time any collective or its"
    " copy back is in flight, counted once, like the harness's comm time, the union of its collectives' intervals)",
    "forward+backward = C + Σ (k_b/2 + h) + κ × hidden + tail + residual   (C: compute-only forward+backward)",
    "residual = M − (C + Σ (k_b/2 + h) + κ × hidden + tail) at the run's own setting, M its measured forward+backward"
    " (the tail model's error there, and what κ's clamp leaves)",
    "κ = clamp((I − Σ (k_b/2 + h)) / hidden, 0, 1) at the run's own setting, I its measured interference"
    " (exposed − tail: backward's slow-down); κ's range: the same at the ends of I's 95 % interval",
    "step = forward+backward + other   (other: the run's measured step − forward+backward, the optimizer);"
    "  exposed = forward+backward − C",
)


@dataclass(frozen=True)
class Candidate:
    """One setting the advisor weighs: bucket size limits (DDP's) and a hook."""

    limits_bytes: tuple[int, ...]
    """DDP's bucket size limits in order; the last repeats for every later bucket."""
    hook: str
    kind: str
    """"default" (DDP's 1 MiB first bucket, then 25 MiB), "cap" (train.py --bucket-cap-mb) or "list"."""

    @property
    def bucket_cap_mb(self) -> float | None:
        """train.py's --bucket-cap-mb for this candidate; None for DDP's default (and for a list)."""
        return shortest_mb(self.limits_bytes[-1]) if self.kind == "cap" else None

    @property
    def label(self) -> str:
        if self.kind == "default":
            return "default (1, then 25 MiB)"
        if self.kind == "cap":
            return f"{shortest_mb(self.limits_bytes[-1]):g} MiB"
        return f"list of {len(self.limits_bytes)}"

    def limits_mb(self) -> list[float]:
        return [round(limit / MIB, 6) for limit in self.limits_bytes]


def shortest_mb(limit_bytes: int) -> float:
    """The MiB with the fewest digits that DDP turns back into `limit_bytes` (int(MiB × 2**20)): a 0.1 MiB cap
    is 104857 bytes, which is 0.0999994 MiB written out in full."""
    for digits in range(1, 17):
        mb = float(f"{limit_bytes / MIB:.{digits}g}")
        if int(mb * MIB) == limit_bytes:
            return mb
    return limit_bytes / MIB


def default_candidate(hook: str) -> Candidate:
    return Candidate((FIRST_BUCKET_BYTES, int(DEFAULT_BUCKET_CAP_MB * MIB)), hook, "default")


def cap_candidate(cap_mb: float, hook: str) -> Candidate:
    cap = int(cap_mb * MIB)
    return Candidate((cap, cap), hook, "cap")


def run_candidate(bucket_cap_mb: float | None, hook: str) -> Candidate:
    """The setting a run used: train.py's --bucket-cap-mb (None: DDP's default) and its hook."""
    return default_candidate(hook) if bucket_cap_mb is None else cap_candidate(bucket_cap_mb, hook)


@dataclass(frozen=True)
class ModelBucket:
    """One bucket of the model: its parameters (in ready order) and when its last gradient is ready."""

    params: tuple[ParamReady, ...]

    @property
    def numel(self) -> int:
        return sum(p.numel for p in self.params)

    @property
    def grad_bytes(self) -> int:
        return sum(p.numel * p.itemsize for p in self.params)

    @property
    def ready_ms(self) -> float:
        return max(p.ready_ms for p in self.params)


def assign_buckets(order: list[ParamReady], limits_bytes: tuple[int, ...]) -> list[ModelBucket]:
    """DDP's buckets for parameters ready in `order`, from torch's own assignment function."""
    import torch
    import torch.distributed as dist

    dtypes = {1: torch.uint8, 2: torch.float16, 4: torch.float32, 8: torch.float64}
    tensors = [torch.empty(p.numel, dtype=dtypes.get(p.itemsize, torch.float32), device="meta") for p in order]
    groups, _ = dist._compute_bucket_assignment_by_size(tensors, list(limits_bytes), [], list(range(len(order))))
    return [ModelBucket(tuple(order[i] for i in group)) for group in groups]


@dataclass
class StepInputs:
    """What the model takes from the measured run, besides the network."""

    timeline: BackwardTimeline
    compute_only_ms: float
    other_ms: float
    codec: dict[str, CodecCost] = field(default_factory=dict)
    kappa: float = 0.0
    residual_ms: float = 0.0
    kappa_range: tuple[float, float] = (0.0, 0.0)
    """The κ that the ends of the measured interference's 95 % interval would give (anchor)."""
    kappa_measured: bool = True
    """False where the run's own setting hid no communication, so its κ says nothing (anchor)."""
    hook_host_ms: float = 0.0
    """h: what one more bucket costs the thread that runs backward (hook_host_cost); 0 where not charged."""
    collectives_at_once: int = 1
    """L: how many collectives the run's process group runs at once (FORMULAS)."""


@dataclass(frozen=True)
class MeasuredSetting:
    """What the run measured at its own setting, for anchor: forward+backward (p50); backward's slow-down,
    its interference = exposed − tail (p50; None for a run that did not record it: then M − C − tail, with
    the tail modelled); and how far the slow-down's 95 % interval reaches (below, above) it."""

    fwd_bwd_ms: float
    interference_ms: float | None = None
    noise_ms: tuple[float, float] = (0.0, 0.0)


@dataclass(frozen=True)
class BucketTiming:
    bytes: int
    numel: int
    ready_ms: float
    start_ms: float
    end_ms: float
    comm_ms: float
    codec_ms: float


@dataclass(frozen=True)
class StepPrediction:
    candidate: Candidate
    world_size: int
    buckets: tuple[BucketTiming, ...]
    step_ms: float
    fwd_bwd_ms: float
    exposed_ms: float
    tail_ms: float
    hidden_ms: float
    comm_ms: float
    codec_ms: float


def wire_itemsize(param: ParamReady, hook: str) -> int:
    return COMPRESSED_ITEMSIZE.get(hook, param.itemsize)


def simulate(
    buckets: list[ModelBucket], candidate: Candidate, network: Network, world_size: int, inputs: StepInputs
) -> StepPrediction:
    """The step of FORMULAS for these buckets, with inputs.kappa and inputs.residual_ms as they stand."""
    timeline, hook = inputs.timeline, candidate.hook
    codec = inputs.codec.get(hook)
    forward = timeline.forward_ms
    compress_total = previous_launch = 0.0
    # Backward's end, with every cast and every bucket's host work before the launches on the compute path (E).
    codec_sizes = [bucket.numel for bucket in buckets] if codec is not None else []
    host = inputs.hook_host_ms
    backward_end = forward + timeline.backward_ms + sum(codec.ms(n) for n in codec_sizes) / 2 + host * len(buckets)
    alpha = network.alpha_at_us(world_size) / 1e3
    # When each of the L worker threads is next free (a min-heap): a copy back can end a bucket after a later one.
    threads_free = [-math.inf] * max(1, inputs.collectives_at_once)
    rows: list[BucketTiming] = []
    wire_free = previous_start = -math.inf  # when the link has carried the last bytes; the last start
    for bucket in buckets:
        size = sum(p.numel * wire_itemsize(p, hook) for p in bucket.params)
        codec_ms = codec.ms(bucket.numel) if codec is not None else 0.0
        compress_total += codec_ms / 2 + host
        launch = max(forward + bucket.ready_ms + compress_total, previous_launch)
        # The queue is first in, first out; a collective starts once a thread is free.
        start = max(launch, previous_start, threads_free[0])
        # Its latency runs beside the others in flight; its bytes wait for theirs (with L = 1 they never wait).
        sending = max(start + alpha, wire_free) - alpha
        comm = collective_ms(network, size, world_size, sending, backward_end, COMPRESSED_DTYPE.get(hook))
        wire_free = sending + comm
        chain_end = wire_free + codec_ms / 2
        heapq.heapreplace(threads_free, chain_end)  # the thread runs the copy back too (the future's callback)
        previous_launch, previous_start = launch, start
        rows.append(BucketTiming(size, bucket.numel, bucket.ready_ms, start, chain_end, wire_free - start, codec_ms))
    chain_end = max((r.end_ms for r in rows), default=-math.inf)
    tail = max(0.0, chain_end - backward_end) if rows else 0.0
    hidden = busy_ms((r.start_ms, min(r.end_ms, backward_end)) for r in rows if r.start_ms < backward_end)
    fwd_bwd = inputs.compute_only_ms + compress_total + inputs.kappa * hidden + tail + inputs.residual_ms
    return StepPrediction(
        candidate=candidate,
        world_size=world_size,
        buckets=tuple(rows),
        step_ms=fwd_bwd + inputs.other_ms,
        fwd_bwd_ms=fwd_bwd,
        exposed_ms=fwd_bwd - inputs.compute_only_ms,
        tail_ms=tail,
        hidden_ms=hidden,
        comm_ms=busy_ms((r.start_ms, r.start_ms + r.comm_ms) for r in rows),
        codec_ms=sum(r.codec_ms for r in rows),
    )


def collective_ms(
    network: Network, size: float, world_size: int, start: float, backward_end: float, dtype: str | None = None
) -> float:
    """One bucket's all_reduce of `dtype` (None: the gradients') starting at `start`: at the rate beside backward
    until backward ends at `backward_end`, then the rest of its bytes at the rate after backward (FORMULAS: t_b)."""
    beside = network.all_reduce_us(size, world_size, dtype=dtype) / 1e3
    if start + beside <= backward_end:
        return beside
    after = network.all_reduce_us(size, world_size, after_backward=True, dtype=dtype) / 1e3
    if start >= backward_end:
        return after
    room = backward_end - start
    return room + (1 - room / beside) * after


def predict_candidate(candidate: Candidate, network: Network, world_size: int, inputs: StepInputs) -> StepPrediction:
    buckets = assign_buckets(inputs.timeline.ready_order(), candidate.limits_bytes)
    return simulate(buckets, candidate, network, world_size, inputs)


def anchor(
    inputs: StepInputs, run_setting: Candidate, network: Network, world_size: int, measured: MeasuredSetting
) -> StepPrediction:
    """Fit κ, its range and the residual (FORMULAS) so that the run's own setting predicts what it measured;
    sets them on `inputs` and returns the prediction of the run's setting."""
    inputs.kappa, inputs.residual_ms = 0.0, 0.0
    bare = predict_candidate(run_setting, network, world_size, inputs)
    casts = bare.fwd_bwd_ms - inputs.compute_only_ms - bare.tail_ms  # Σ (k_b/2 + h): on the compute path, no κ
    if measured.interference_ms is not None:
        slowdown = measured.interference_ms - casts
    else:
        slowdown = measured.fwd_bwd_ms - bare.fwd_bwd_ms

    def kappa_for(value: float) -> float:
        return min(MAX_KAPPA, max(0.0, value / bare.hidden_ms)) if bare.hidden_ms > 0 else 0.0

    below, above = measured.noise_ms
    inputs.kappa = kappa_for(slowdown)
    inputs.kappa_measured = bare.hidden_ms > 0
    if inputs.kappa_measured:
        inputs.kappa_range = (kappa_for(slowdown - below), kappa_for(slowdown + above))
    else:
        # Nothing ran beside backward at the run's setting (one bucket, ready as backward ends): the run cannot
        # say what hidden communication costs backward, so κ may be anything it can be, and the advisor says
        # when that changes the pick.
        inputs.kappa_range = (0.0, MAX_KAPPA)
    inputs.residual_ms = measured.fwd_bwd_ms - predict_candidate(run_setting, network, world_size, inputs).fwd_bwd_ms
    return predict_candidate(run_setting, network, world_size, inputs)


def best_list(
    hook: str, network: Network, world_size: int, inputs: StepInputs, caps_mb: tuple[float, ...] = ADVISOR_CAPS_MB
) -> Candidate:
    """The per-bucket size list that the model predicts fastest, searched over where buckets split the ready order.

    Two stages. A dynamic program over split points proposes a split (`_planned_cuts`); it approximates the
    model so that it can search every split. A local search then improves that split, and the splits of DDP's
    default and of each cap in `caps_mb`, with `simulate` itself: it moves, removes and adds one split point
    at a time while the predicted step gets shorter (`_refined_cuts`), within LOCAL_SEARCH_TRIALS predictions
    over all seeds. So the terms the program leaves out (gloo's L collectives at once, the casts and host
    work that delay later launches) are judged by the whole model. Each limit is its bucket's own gradient
    bytes: a bucket closes once it reaches its limit, so torch's assignment rebuilds these buckets.

    The list is then predicted as torch rebuilds it, against DDP's default and every cap; where one of them is
    faster, the list is that setting's own limits, so a list is never predicted slower than a cap. That happens
    where the search's split points are coarser than the caps' (a model of more than MAX_LIST_GROUPS
    parameters) and where torch does not rebuild the searched buckets (parameters of several dtypes, which it
    buckets apart).
    """
    order = inputs.timeline.ready_order()
    groups = _coarsen(order, MAX_LIST_GROUPS)
    settings = [default_candidate(hook), *(cap_candidate(c, hook) for c in caps_mb)]
    built = {setting: assign_buckets(order, setting.limits_bytes) for setting in settings}  # seeds, then rivals
    seeds = {tuple(_planned_cuts(groups, hook, network, world_size, inputs))}
    seeds |= {_cuts_of(groups, buckets) for buckets in built.values()}
    candidate = Candidate((), hook, "list")

    def step_ms(cuts: tuple[int, ...]) -> float:
        return simulate(_buckets_at(groups, cuts), candidate, network, world_size, inputs).step_ms

    trials_left, results = LOCAL_SEARCH_TRIALS, []
    for seed in sorted(seeds):
        cuts, ms, used = _refined_cuts(seed, len(groups), step_ms, max(1, trials_left))
        results.append((ms, cuts))
        trials_left -= used
    best = min(results)[1]
    listed = Candidate(tuple(bucket.grad_bytes for bucket in _buckets_at(groups, best)), hook, "list")
    rivals = {
        setting: simulate(buckets, setting, network, world_size, inputs).step_ms for setting, buckets in built.items()
    }
    fastest = min(rivals, key=rivals.__getitem__)
    if rivals[fastest] < predict_candidate(listed, network, world_size, inputs).step_ms:
        return Candidate(fastest.limits_bytes, hook, "list")
    return listed


def _buckets_at(groups: list[list[ParamReady]], cuts: tuple[int, ...]) -> list[ModelBucket]:
    """The buckets that split `groups` before each index in `cuts` (ascending, each in 1 … len(groups) − 1)."""
    bounds = [0, *cuts, len(groups)]
    return [ModelBucket(tuple(p for g in groups[i:j] for p in g)) for i, j in itertools.pairwise(bounds)]


def _cuts_of(groups: list[list[ParamReady]], buckets: list[ModelBucket]) -> tuple[int, ...]:
    """The split points nearest to where `buckets` (in ready order) end, on the groups' boundaries."""
    ends = _prefix([len(g) for g in groups])
    cuts, done = set(), 0
    for bucket in buckets[:-1]:
        done += len(bucket.params)
        nearest = min(range(1, len(groups)), key=lambda k: abs(ends[k] - done), default=None)
        if nearest is not None:
            cuts.add(nearest)
    return tuple(sorted(cuts))


def _refined_cuts(
    cuts: tuple[int, ...], count: int, step_ms: Callable[[tuple[int, ...]], float], most_trials: int
) -> tuple[tuple[int, ...], float, int]:
    """Local search from `cuts`: take the first move (a split point moved by one group, removed, or added) that
    makes `step_ms` shorter, until none does or `most_trials` predictions have been made. Returns the split, its
    step and the predictions made."""
    best, best_ms, trials = cuts, step_ms(cuts), 1
    improved = True
    while improved and trials < most_trials:
        improved = False
        for move in _moves(best, count):
            trials += 1
            ms = step_ms(move)
            if ms < best_ms - 1e-9:
                best, best_ms, improved = move, ms, True
                break
            if trials >= most_trials:
                break
    return best, best_ms, trials


def _moves(cuts: tuple[int, ...], count: int) -> Iterator[tuple[int, ...]]:
    """Every split that differs from `cuts` by one split point moved one group, removed, or added."""
    present = set(cuts)
    for n, cut in enumerate(cuts):
        for moved in (cut - 1, cut + 1):
            if 0 < moved < count and moved not in present:
                yield tuple(sorted((*cuts[:n], moved, *cuts[n + 1 :])))
        yield cuts[:n] + cuts[n + 1 :]
    for added in range(1, count):
        if added not in present:
            yield tuple(sorted((*cuts, added)))


def _planned_cuts(
    groups: list[list[ParamReady]], hook: str, network: Network, world_size: int, inputs: StepInputs
) -> list[int]:
    """The dynamic program's split, on an approximation of the model.

    A prefix of the ready order, split into buckets, leaves two things that matter later: when its last
    collective ends (later buckets queue behind it, and what runs past backward is exposed) and the cost of its
    communication that ran under backward (κ per ms). The program keeps, for each prefix, the splits that no
    other split beats on both (a Pareto front, at most PARETO_POINTS of them), and extends each by one more
    bucket. It takes backward's end before any cast or host work, adds h to a split's cost without delaying
    the launches after it, and chains collectives one at a time (L = 1) where gloo runs two: on random small
    cases its split was up to 3.9 % slower, by `simulate`, than the best (bench/list_search.py), which is why
    `best_list` refines it with the whole model.
    """
    codec = inputs.codec.get(hook)
    wire_dtype = COMPRESSED_DTYPE.get(hook)
    forward = inputs.timeline.forward_ms
    backward_end = forward + inputs.timeline.backward_ms
    ready = [forward + g[-1].ready_ms for g in groups]
    wire = _prefix([sum(p.numel * wire_itemsize(p, hook) for p in g) for g in groups])
    numel = _prefix([sum(p.numel for p in g) for g in groups])
    # fronts[j]: (chain end, cost so far, split point i, index into fronts[i]) for the first j groups.
    fronts: list[list[tuple[float, float, int, int]]] = [[(-math.inf, 0.0, -1, -1)]]
    for j in range(1, len(groups) + 1):
        options = []
        for i in range(j):
            size, elements = wire[j] - wire[i], numel[j] - numel[i]
            codec_ms = codec.ms(elements) if codec else 0.0
            beside = network.all_reduce_us(size, world_size, dtype=wire_dtype) / 1e3
            for k, (end, cost, _, _) in enumerate(fronts[i]):
                start = max(ready[j - 1], end)
                comm = (
                    beside
                    if start + beside <= backward_end
                    else collective_ms(network, size, world_size, start, backward_end, wire_dtype)
                )
                duration = comm + codec_ms
                hidden = max(0.0, min(start + duration, backward_end) - start)
                options.append((start + duration, cost + inputs.kappa * hidden + inputs.hook_host_ms, i, k))
        fronts.append(_pareto(options))
    # The whole step: what is hidden costs κ per ms, what runs past backward is exposed.
    last = min(fronts[-1], key=lambda o: o[1] + max(0.0, o[0] - backward_end))
    cuts, j, point = [], len(groups), last
    while j > 0:
        _, _, i, k = point
        if i > 0:
            cuts.append(i)
        j, point = i, fronts[i][k]
    return sorted(cuts)


def _pareto(options: list[tuple[float, float, int, int]]) -> list[tuple[float, float, int, int]]:
    """The options that no other beats on both end and cost, at most PARETO_POINTS of them, spread by end."""
    front, best_cost = [], math.inf
    for option in sorted(options):
        if option[1] < best_cost:
            front.append(option)
            best_cost = option[1]
    if len(front) > PARETO_POINTS:
        step = (len(front) - 1) / (PARETO_POINTS - 1)
        front = [front[round(n * step)] for n in range(PARETO_POINTS)]
    return front


def _coarsen(order: list[ParamReady], most: int) -> list[list[ParamReady]]:
    """`order` in at most `most` runs of consecutive parameters (one parameter each when it is short enough)."""
    per = max(1, math.ceil(len(order) / most))
    return [order[i : i + per] for i in range(0, len(order), per)]


def _prefix(values: list[int]) -> list[int]:
    sums = [0]
    for value in values:
        sums.append(sums[-1] + value)
    return sums
