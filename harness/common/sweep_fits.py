"""A raw sweep's α–β fits: the `fit` record the sweep writes into its JSON Lines, and reading it back.

The sweep (harness.sweep.output) writes one fit record per (collective, placement, mode, cuda_graph):
time = alpha + S/beta over the sizes it measured, fitted by harness.common.metrics.fit_alpha_beta.
harness.predict reads the all_reduce fit back to predict a training step's communication. Writer and reader
share this file, in the base layer, so that the record's fields have one definition; it is plain JSON,
without torch.

The reader checks what it reads (FIT_FIELDS): a line that is not JSON (a sweep killed mid-write), a fit record
missing a field or holding the wrong type, or a fit that cannot describe a network (β <= 0, α < 0, a value
that is not finite) is a FitRecordError of one line naming the file, the line, the field and what was
expected. β = ∞, written as null, is a fit whose time did not grow with size over the sizes measured: valid
there, and no evidence about larger sizes (predict refuses to extrapolate it).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from harness.common.metrics import alpha_beta_time_us, fit_alpha_beta
from harness.common.numbers import is_number

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
    min_size_bytes: int | None = None
    """The smallest size the fit was made over: outside [min_size_bytes, max_size_bytes] it is extrapolation;
    None where the record does not say (a hand-made one)."""
    max_size_bytes: int | None = None

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


class FitRecordError(ValueError):
    """A sweep file whose fit records cannot be used; the message is one line: file, line, field, expectation."""


def _number(integer: bool = False, minimum: float | None = None, above: float | None = None) -> Any:
    return lambda value: is_number(value, integer, minimum, above)


# Each field the reader uses: (check, what was expected). α >= 0 and β > 0 are what the fit itself ensures;
# anything else cannot describe a network.
FIT_FIELDS: dict[str, tuple[Any, str]] = {
    "collective": (lambda v: isinstance(v, str), "a string"),
    "placement": (lambda v: isinstance(v, str), "a string"),
    "mode": (lambda v: isinstance(v, str), "a string"),
    "cuda_graph": (lambda v: isinstance(v, bool), "true or false"),
    "dtype": (lambda v: isinstance(v, str), "a string"),
    "world_size": (_number(integer=True, minimum=1), "an integer >= 1"),
    "alpha_us": (_number(minimum=0), "a finite number >= 0 (µs)"),
    "beta_gbps": (
        lambda v: v is None or _number(above=0)(v),
        "a finite number > 0 (GB/s), or null where time did not grow with size",
    ),
    "max_rel_error": (_number(minimum=0), "a finite number >= 0"),
}
# The sizes the fit covers: written by every sweep, but a hand-made record may lack them (None: unknown).
FIT_RANGE_FIELDS = ("min_size_bytes", "max_size_bytes")


def fit_from_record(record: dict[str, Any], where: str) -> Fit:
    """The Fit of one fit record, every field checked; a FitRecordError naming `where` (file and line)."""
    for key, (check, expected) in FIT_FIELDS.items():
        if key not in record or not check(record[key]):
            got = "missing" if key not in record else json.dumps(record[key])[:40]
            raise FitRecordError(f"{where}: fit record's {key} is {got}; expected {expected}")
    low, high = (record.get(key) for key in FIT_RANGE_FIELDS)
    for key, value in zip(FIT_RANGE_FIELDS, (low, high), strict=True):
        if value is not None and not _number(integer=True, minimum=1)(value):
            raise FitRecordError(f"{where}: fit record's {key} is {json.dumps(value)[:40]}; expected an integer >= 1")
    if (low is None) != (high is None) or (low is not None and low > high):
        raise FitRecordError(
            f"{where}: fit record's min_size_bytes {json.dumps(low)} and max_size_bytes {json.dumps(high)}; "
            "expected both, min <= max, or neither"
        )
    # json_safe wrote an infinite beta (time that does not grow with size) as null.
    beta = math.inf if record["beta_gbps"] is None else record["beta_gbps"]
    return Fit(
        record["collective"], record["placement"], record["mode"], record["cuda_graph"], record["alpha_us"], beta,
        record["max_rel_error"], record["world_size"], record["dtype"], low, high,
    )  # fmt: skip


def load_fits(
    path: str, mode: str = "throughput", placement: str = "in_place", cuda_graph: bool = False
) -> dict[str, Fit]:
    """{collective: Fit} from a sweep's JSON Lines, for one (mode, placement, cuda_graph).

    The defaults match what DDP does in training: an eager, in-place all_reduce. all_to_all and send_recv
    have no in-place rows; ask for placement="out_of_place" for them. Every line must be JSON and every fit
    record valid (a FitRecordError otherwise); OSError where the file cannot be opened.
    """
    fits = {}
    with open(path, "rb") as lines:
        for number, raw in enumerate(lines, start=1):
            where = f"{path} line {number}"
            if not raw.strip():
                continue
            try:
                record = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError:
                raise FitRecordError(f"{where} is not UTF-8 text; expected one JSON object per line") from None
            except json.JSONDecodeError as err:
                # An unterminated string is reported where it starts, yet it is the end of the line that is missing.
                cut = err.pos >= len(raw.rstrip()) or err.msg.startswith("Unterminated string")
                cut_text = "; cut short: a sweep stopped while writing it?" if cut else ""
                raise FitRecordError(
                    f"{where} is not JSON (column {err.colno}: {err.msg}{cut_text}); expected one JSON object per line"
                ) from None
            except (RecursionError, ValueError) as err:
                reason = str(err).split(";")[0]  # the first clause; Python's advice on int digits is not the user's
                raise FitRecordError(
                    f"{where} cannot be parsed ({reason}); expected one JSON object per line"
                ) from None
            if not isinstance(record, dict):
                raise FitRecordError(f"{where} holds {json.dumps(record)[:40]}; expected a JSON object")
            if record.get("record") != "fit":
                continue
            fit = fit_from_record(record, where)
            if (fit.mode, fit.placement, fit.cuda_graph) == (mode, placement, cuda_graph):
                fits[fit.collective] = fit
    return fits
