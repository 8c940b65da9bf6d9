"""How close the advisor's per-bucket list comes to the best split, by the step model, on random small cases.

    python -m bench.list_search --cases 200 --seed 0
    python -m bench.list_search --cases 40 --seed 3 --min-params 11 --max-params 13

Each case draws a backward timeline (4 to 10 parameters of 1 to 1000 thousand elements, ready at random times
in a 40 ms backward), L (1, 2 or 3 collectives at once), κ, the hook's host work, the hook (allreduce or fp16,
with or without a codec cost) and a network. Every split of the parameters into buckets is predicted with the
whole model (`simulate`); the report is the worst, over the cases, of how much slower than the best split the
dynamic program's split alone is, and the list best_list returns. Measured figures: docs/BENCHMARKS.md, "the
per-bucket list, refined with the whole model".
"""

from __future__ import annotations

import itertools
import random

from harness.analysis.backward_timeline import BackwardTimeline, CodecCost, ParamReady
from harness.analysis.prediction import Network
from harness.analysis.step_model import (
    MAX_LIST_GROUPS,
    Candidate,
    StepInputs,
    _buckets_at,
    _coarsen,
    _planned_cuts,
    best_list,
    predict_candidate,
    simulate,
)
from harness.common.cli import OneLineParser, check_count, run_cli


def random_case(rng: random.Random, count: int) -> tuple[StepInputs, str, Network]:
    ready = sorted((rng.uniform(0, 40) for _ in range(count)), reverse=True)
    params = tuple(ParamReady(i, f"p{i}", rng.choice([1, 10, 100, 1000]) * 1000, 4, ready[i]) for i in range(count))
    inputs = StepInputs(
        BackwardTimeline(params, 5.0, 40.0, 3, "random"),
        compute_only_ms=50.0,
        other_ms=1.0,
        kappa=rng.choice([0.0, 0.3, 1.0]),
        collectives_at_once=rng.choice([1, 2, 3]),
        hook_host_ms=rng.choice([0.0, 0.5]),
    )
    hook = rng.choice(["allreduce", "fp16"])
    if hook == "fp16" and rng.random() < 0.5:
        inputs.codec["fp16"] = CodecCost(0.2, 2e-6, "random")
    return inputs, hook, Network(rng.choice([0.0, 500.0, 3000.0]), rng.choice([0.1, 1.0, 10.0]), 2)


PROG = "python -m bench.list_search"


def main() -> None:
    parser = OneLineParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-params", type=int, default=4)
    parser.add_argument("--max-params", type=int, default=10)
    args = parser.parse_args()
    check_count("--cases", args.cases)
    check_count("--min-params", args.min_params)
    if args.max_params < args.min_params:
        parser.error(f"--max-params {args.max_params} is below --min-params {args.min_params}")
    if not 2 <= args.min_params <= args.max_params <= min(16, MAX_LIST_GROUPS):
        parser.error("need 2 <= --min-params <= --max-params <= 16 (every split is tried: 2^(n-1) of them)")
    rng = random.Random(args.seed)
    worst_program = worst_list = 0.0
    for _ in range(args.cases):
        count = rng.randint(args.min_params, args.max_params)
        inputs, hook, network = random_case(rng, count)
        groups = _coarsen(inputs.timeline.ready_order(), MAX_LIST_GROUPS)
        unnamed = Candidate((), hook, "list")

        def step_ms(cuts: tuple[int, ...], groups=groups, unnamed=unnamed, inputs=inputs, network=network) -> float:
            return simulate(_buckets_at(groups, cuts), unnamed, network, 2, inputs).step_ms

        splits = itertools.chain.from_iterable(itertools.combinations(range(1, count), r) for r in range(count))
        best = min(step_ms(cuts) for cuts in splits)
        program = step_ms(tuple(_planned_cuts(groups, hook, network, 2, inputs)))
        listed = predict_candidate(best_list(hook, network, 2, inputs), network, 2, inputs).step_ms
        worst_program = max(worst_program, program / best - 1)
        worst_list = max(worst_list, listed / best - 1)
    print(
        f"{args.cases} cases of {args.min_params}-{args.max_params} parameters (seed {args.seed}): against the best "
        f"split, the dynamic program alone was at worst {100 * worst_program:.3f} % slower, best_list "
        f"{100 * worst_list:.3f} %"
    )


if __name__ == "__main__":
    raise SystemExit(run_cli(main, PROG))
