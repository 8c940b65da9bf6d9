"""A raw sweep's α–β fits: the `fit` record the sweep writes into its JSON Lines, and reading it back.

The sweep (harness.sweep.output) writes one fit record per (collective, placement, mode, cuda_graph):
time = alpha + S/beta over the sizes it measured, fitted by harness.common.metrics.fit_alpha_beta.
harness.predict reads the all_reduce fit back to predict a training step's communication. Writer and reader
share this file, in the base layer, so that the record's fields have one definition; it is plain JSON,
without torch.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from harness.common.metrics import alpha_beta_time_us, fit_alpha_beta

FIT_METHOD = "least squares on relative error: minimise sum(((alpha + S/beta - t)/t)^2), alpha >= 0"


@dataclass(frozen=True)
class Fit:
    """time = alpha + S/beta for one collective, fitted over a sweep's sizes."""

    collective: str
    placement: str
    mode: str
    cuda_graph: bool
    alpha_us: float
    beta_gbps: float
    max_rel_error: float
    world_size: int
    dtype: str

    def predict_time_us(self, size_bytes: float) -> float:
        """The fitted time of one operation of `size_bytes`, in µs."""
        return alpha_beta_time_us(size_bytes, self.alpha_us, self.beta_gbps)


def fit_record(rows: list[dict[str, Any]], factor: float) -> dict[str, Any] | None:
    """The fit record for rows of one (collective, placement, mode, cuda_graph); None if it can't be fitted.

    `factor` is the collective's busbw factor at the sweep's world size, for the record's beta_busbw_gbps.
    """
    usable = [row for row in rows if row["time_us"] is not None and row["size_bytes"] > 0]
    fitted = fit_alpha_beta([row["size_bytes"] for row in usable], [row["time_us"] for row in usable])
    if fitted is None:
        return None
    alpha, beta, worst = fitted
    first = rows[0]
    keys = ("collective", "placement", "mode", "cuda_graph", "dtype", "world_size", "nodes", "backend")
    return {
        "record": "fit",
        **{key: first[key] for key in keys},
        "alpha_us": alpha,
        "beta_gbps": beta,
        "beta_busbw_gbps": beta * factor,
        "max_rel_error": worst,
        "points": len(usable),
        "min_size_bytes": min(row["size_bytes"] for row in usable),
        "max_size_bytes": max(row["size_bytes"] for row in usable),
        "method": FIT_METHOD,
    }


def load_fits(
    path: str, mode: str = "throughput", placement: str = "in_place", cuda_graph: bool = False
) -> dict[str, Fit]:
    """{collective: Fit} from a sweep's JSON Lines, for one (mode, placement, cuda_graph).

    The defaults match what DDP does in training: an eager, in-place all_reduce. all_to_all and send_recv
    have no in-place rows; ask for placement="out_of_place" for them.
    """
    fits = {}
    with open(path) as lines:
        for line in lines:
            record = json.loads(line)
            if record.get("record") != "fit":
                continue
            if (record["mode"], record["placement"], record["cuda_graph"]) != (mode, placement, cuda_graph):
                continue
            # json_safe wrote an infinite beta (time that does not grow with size) as null.
            beta = math.inf if record["beta_gbps"] is None else record["beta_gbps"]
            fits[record["collective"]] = Fit(
                record["collective"], record["placement"], record["mode"], record["cuda_graph"],
                record["alpha_us"], beta, record["max_rel_error"], record["world_size"], record["dtype"],
            )  # fmt: skip
    return fits
