"""Where the raw sweep's results go: nccl-tests' table on stdout, JSON Lines, CSV, TensorBoard, and fits.

Only rank 0 writes; other ranks get NullOutput, so the sweep never checks the rank. Every row is written
and flushed as soon as it is measured, so a killed run keeps its rows.

An output that can no longer be written (a full disk, /dev/full, a file or directory removed during the sweep,
a closed stdout) is never lost without a word: its first failure is kept in `failure` (an OutputFailed naming
it), nothing more is written to it, and the others go on; the engine then stops the sweep on every rank.

JSON Lines records, each with a `record` key:
    header  versions, devices per rank, world, backend, recorded NCCL/TORCH/CUDA variables, the plan,
            notes on reading the rows, and what each `timing` method means
    row     one per (collective, size, placement, mode, cuda_graph): ROW_FIELDS
    fit     per (collective, placement, mode, cuda_graph): time = alpha + S/beta (harness.common.metrics)
    end     how the sweep ended: status ok, wrong, failed or interrupted, the reason and where, rows written
The CSV holds the rows, with ROW_FIELDS as columns. Nothing here is ever unpickled: JSON only.

harness.common.sweep_fits defines the fit record and reads it back (`load_fits`), for predictions.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import stat
import sys
from collections.abc import Iterable
from typing import Any, TextIO

from harness.common.failures import OutputFailed, abandon_writer, silence_stdout
from harness.common.run_info import json_safe
from harness.common.sweep_fits import fit_record

ROW_FIELDS = (
    "collective", "size_bytes", "count", "dtype", "world_size", "nodes", "placement", "mode", "cuda_graph",
    "op", "root", "iters", "time_us", "algbw_gbps", "busbw_gbps", "wrong", "p50_us", "p90_us", "p99_us",
    "min_us", "max_us", "skew_us", "host_overhead_us", "emulated", "backend", "device", "skipped", "timing",
    "note",
)  # fmt: skip
# ---- the table ------------------------------------------------------------------------------------------


def format_time(us: float | None) -> str:
    """nccl-tests' time column: fewer decimals as the time grows."""
    if us is None or not math.isfinite(us):
        return "N/A"
    return f"{us:7.0f}" if us >= 10000 else f"{us:7.1f}" if us >= 100 else f"{us:7.2f}"


def _bw(value: float | None) -> str:
    return "N/A" if value is None or not math.isfinite(value) else f"{value:.2f}"


def _wrong(value: int | None) -> str:
    return "N/A" if value is None else str(value)


class Table:
    """nccl-tests' columns and units. Throughput: one line per size, out-of-place then in-place, as
    nccl-tests prints. Latency: one line per size and placement, with the distribution."""

    def __init__(self, stream: TextIO):
        self.stream = stream
        self.lines: list[str] = []
        self.pending: dict[int, dict[str, dict]] = {}
        self.failure: OutputFailed | None = None
        self.rows = 0  # how many rows the table has shown, for the failure's message

    def emit(self, line: str) -> None:
        self.lines.append(line)
        if self.failure is not None:
            return
        try:
            print(line, file=self.stream, flush=True)
        except OSError as err:
            self.failure = OutputFailed("the table to stdout", err, f"after {self.rows} rows")
            if self.stream is sys.stdout:
                silence_stdout()

    def begin(self, title: str, mode: str, cuda_graph: bool, placements: list[str]) -> None:
        self.mode, self.graph, self.placements = mode, cuda_graph, placements
        self.emit("#")
        self.emit(f"# {title}")
        host = cuda_graph  # graph tables add the host overhead that graph replay removed
        if host:
            self.emit("# host: eager time - graph time, the per-call host overhead that graph replay removes")
        if mode == "throughput":
            groups = [p.replace("_", "-") for p in placements]
            width = 32 + (9 if host else 0)  # the cells of one placement, below
            self.emit("# " + " " * 50 + "".join(f"{g:^{width}}" for g in groups))
            cols = "  %7s  %6s  %6s %6s" + ("  %7s" if host else "")
            names = ("time", "algbw", "busbw", "#wrong") + (("host",) if host else ())
            units = ("(us)", "(GB/s)", "(GB/s)", "") + (("(us)",) if host else ())
            head = f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}"
            unit = f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}"
            self.emit(head + "".join(cols % names for _ in placements))
            self.emit(unit + "".join(cols % units for _ in placements))
        else:
            stats = ("p50", "p90", "p99", "min", "max", "skew")
            head = f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}  {'placement':>12}"
            head += "".join(f"  {s:>7}" for s in stats) + f"  {'algbw':>6}  {'busbw':>6}  {'#wrong':>6}"
            unit = f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}  {'':>12}"
            unit += "".join(f"  {'(us)':>7}" for _ in stats) + f"  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>6}"
            if host:
                head, unit = head + f"  {'host':>7}", unit + f"  {'(us)':>7}"
            self.emit(head)
            self.emit(unit)

    def add(self, row: dict, type_name: str) -> None:
        self.rows += 1
        if self.mode != "throughput":
            self.emit(self._lead(row, type_name) + f"  {row['placement']:>12}" + self._latency_cells(row))
            return
        by_placement = self.pending.setdefault(row["size_bytes"], {})
        by_placement[row["placement"]] = row
        if len(by_placement) == len(self.placements):
            self._emit_size(row["size_bytes"], type_name)

    def flush(self, type_name: str) -> None:
        """Print sizes still waiting for a placement (the sweep stopped between them); '-' where none ran."""
        for size in list(self.pending):
            self._emit_size(size, type_name)

    def _emit_size(self, size: int, type_name: str) -> None:
        by_placement = self.pending.pop(size)
        cells = "".join(self._throughput_cells(by_placement[p]) if p in by_placement else self._no_cells()
                        for p in self.placements)  # fmt: skip
        self.emit(self._lead(next(iter(by_placement.values())), type_name) + cells)

    @staticmethod
    def _lead(row: dict, type_name: str) -> str:
        return f"{row['size_bytes']:12d}  {row['count']:12d}  {type_name:>8}  {row['op']:>6}  {row['root']:6d}"

    def _no_cells(self) -> str:
        return f"  {'-':>7}  {'-':>6}  {'-':>6}  {'-':>5}" + (f"  {'-':>7}" if self.graph else "")

    def _throughput_cells(self, row: dict) -> str:
        cells = f"  {format_time(row['time_us']):>7}  {_bw(row['algbw_gbps']):>6}  {_bw(row['busbw_gbps']):>6}"
        cells += f"  {_wrong(row['wrong']):>5}"
        if self.graph:
            cells += f"  {format_time(row['host_overhead_us']):>7}"
        return cells

    def _latency_cells(self, row: dict) -> str:
        stats = ("p50_us", "p90_us", "p99_us", "min_us", "max_us", "skew_us")
        cells = "".join(f"  {format_time(row[s]):>7}" for s in stats)
        cells += f"  {_bw(row['algbw_gbps']):>6}  {_bw(row['busbw_gbps']):>6}  {_wrong(row['wrong']):>6}"
        if self.graph:
            cells += f"  {format_time(row['host_overhead_us']):>7}"
        return cells


# ---- writers --------------------------------------------------------------------------------------------


class NullOutput:
    """What ranks other than 0 write: nothing."""

    failure: OutputFailed | None = None

    def header(self, record: dict, preamble: Iterable[str]) -> None:
        pass

    def begin_table(self, collective: str, mode: str, cuda_graph: bool, placements: list[str]) -> None:
        pass

    def row(self, row: dict, type_name: str) -> None:
        pass

    def end_table(self, factor: float) -> None:
        pass

    def close(self, end: dict | None = None) -> None:
        pass


class _File:
    """One output file (--json or --csv), each piece written and flushed at once. The first failure is kept
    and ends the file's writing: an error, or the file removed (with its directory, perhaps) while open, which
    on Linux takes every later write without a word."""

    def __init__(self, path: str, option: str):
        self.name = f"{option} {path!r}"
        self.handle = open(path, "w", newline="")  # noqa: SIM115 (closed in close())
        self.pieces = 0  # rows written, for the failure's message
        self.failure: OutputFailed | None = None

    def write(self, text: str, row: bool = False) -> None:
        if self.failure is not None:
            return
        try:
            self.handle.write(text)
            self.handle.flush()
        except OSError as err:
            self.failure = OutputFailed(self.name, err, f"after {self.pieces} rows")
            return
        info = os.fstat(self.handle.fileno())
        if stat.S_ISREG(info.st_mode) and info.st_nlink == 0:
            self.failure = OutputFailed(self.name, "it was removed during the sweep, with the rows in it")
        self.pieces += row

    def close(self) -> None:
        try:
            self.handle.close()
        except OSError as err:  # the last flush: what was pending is lost, and the file says so
            self.failure = self.failure or OutputFailed(self.name, err, f"after {self.pieces} rows")


def _csv_line(values: dict | None = None) -> str:
    """One CSV line of ROW_FIELDS (the header without `values`), as text for _File."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, ROW_FIELDS, extrasaction="ignore")
    if values is None:
        writer.writeheader()
    else:
        writer.writerow(values)
    return buffer.getvalue()


class SweepOutput(NullOutput):
    """Rank 0's outputs: the table on `stream`, and JSON Lines, CSV and TensorBoard where asked for."""

    def __init__(self, json_path: str | None, csv_path: str | None, logdir: str | None, log2_x: bool, stream: TextIO):
        self.table = Table(stream)
        self.stream = stream
        self.jsonl = _File(json_path, "--json") if json_path else None
        self.csv = _File(csv_path, "--csv") if csv_path else None
        if self.csv:
            self.csv.write(_csv_line())
        self.tb = _TensorBoard(logdir, log2_x) if logdir else None
        self.rows: list[dict] = []
        self.rows_written = 0
        self.type_name = ""
        self.failed_rows = 0
        self.busbw_sum, self.busbw_count = 0.0, 0

    @property
    def failure(self) -> OutputFailed | None:
        """The first output that could not be written, if any (the engine then stops the sweep)."""
        outputs = (self.jsonl, self.csv, self.tb, self.table)
        return next((out.failure for out in outputs if out is not None and out.failure is not None), None)

    def _json(self, record: dict) -> None:
        if self.jsonl:
            self.jsonl.write(json.dumps(json_safe(record)) + "\n", row=record["record"] == "row")

    def header(self, record: dict, preamble: Iterable[str]) -> None:
        self._json(record)
        for line in preamble:
            self.table.emit(line)
        if self.tb:
            self.tb.text("raw_sweep/header", "    " + json.dumps(record, indent=1).replace("\n", "\n    "))

    def begin_table(self, collective: str, mode: str, cuda_graph: bool, placements: list[str]) -> None:
        title = f"{collective}, mode {mode}" + (" (CUDA graph replay)" if cuda_graph else " (eager)")
        self.table.begin(title, mode, cuda_graph, placements)
        self.rows = []

    def row(self, row: dict, type_name: str) -> None:
        self.rows.append(row)
        self.rows_written += 1
        self.type_name = type_name
        self._json({"record": "row", **row})
        if self.csv:
            self.csv.write(_csv_line(json_safe(row)), row=True)
        if self.tb:
            self.tb.row(row)
        self.table.add(row, type_name)

    def end_table(self, factor: float) -> None:
        measured = [row for row in self.rows if row["time_us"] is not None]
        wrong_rows = sum(1 for row in self.rows if row["wrong"])
        busbw = [row["busbw_gbps"] for row in measured if row["busbw_gbps"] is not None]
        busbw = [value for value in busbw if math.isfinite(value)]  # 0.0 counts: world size 1
        self.failed_rows += wrong_rows
        self.busbw_sum, self.busbw_count = self.busbw_sum + sum(busbw), self.busbw_count + len(busbw)
        avg = sum(busbw) / len(busbw) if busbw else math.nan
        self.table.emit(f"# Out of bounds values : {wrong_rows} {'FAILED' if wrong_rows else 'OK'}")
        self.table.emit(f"# Avg bus bandwidth    : {avg:g} (nccl-tests' mean of the rows' busbw)")
        for placement in dict.fromkeys(row["placement"] for row in measured):
            record = fit_record([row for row in measured if row["placement"] == placement], factor)
            if record is None:
                continue
            self._json(record)
            beta, bus = record["beta_gbps"], record["beta_busbw_gbps"]
            if math.isfinite(beta):
                rate = f"beta = {beta:.3g} GB/s (busbw {bus:.3g} GB/s)"
            else:  # the JSON record says null
                rate = "no beta (the time did not grow with size over these sizes)"
            self.table.emit(
                f"# Fit {placement}: time = alpha + S/beta, alpha = {record['alpha_us']:.2f} us, {rate}, max error "
                f"{100 * record['max_rel_error']:.0f}% over {record['points']} sizes"
            )
        for placement, reason in dict.fromkeys((r["placement"], r["skipped"]) for r in self.rows if r["skipped"]):
            self.table.emit(f"# Skipped {placement}: {reason}")
        for note in dict.fromkeys(r["note"] for r in self.rows if r.get("note")):
            self.table.emit(f"# Note: {note}")

    def close(self, end: dict | None = None) -> None:
        """Flush a half-printed size, write the `end` record, close every file."""
        self.table.flush(self.type_name)
        if end is not None:
            self._json({"record": "end", **end, "rows": self.rows_written})
            if end.get("status") in ("failed", "interrupted"):
                at = f" at {end['at']}" if end.get("at") else ""
                self.table.emit(
                    f"# Sweep {end['status']} ({end.get('reason', '')}){at}: {self.rows_written} rows written"
                )
        if self.tb:
            self.tb.text("raw_sweep/table", "    " + "\n    ".join(self.table.lines))
            self.tb.close()
        for output in (self.jsonl, self.csv):
            if output:
                output.close()


class _TensorBoard:
    """busbw and time against size per collective; x is log2(size in bytes) when every size is a power
    of two (rounded), else the size in bytes. TensorBoard's step axis cannot be made logarithmic."""

    def __init__(self, logdir: str, log2_x: bool):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(logdir)
        self.name = f"--logdir {logdir!r}"
        self.log2_x = log2_x
        self.rows = 0  # rows written, for the failure's message
        self.failure: OutputFailed | None = None
        axis = "log2(size in bytes)" if log2_x else "size in bytes"
        self.text("raw_sweep/x_axis", f"x axis of every raw_sweep chart: {axis}")

    def row(self, row: dict[str, Any]) -> None:
        if row["time_us"] is None or row["size_bytes"] <= 0:
            return
        step = round(math.log2(row["size_bytes"])) if self.log2_x else row["size_bytes"]
        variant = row["mode"] + ("_graph" if row["cuda_graph"] else "")
        prefix = f"raw_sweep/{row['collective']}/{variant}/{row['placement']}"

        def write() -> None:
            self.writer.add_scalar(f"{prefix}/time_us", row["time_us"], step)
            if math.isfinite(row["busbw_gbps"]):
                self.writer.add_scalar(f"{prefix}/busbw_gbps", row["busbw_gbps"], step)
            self.writer.flush()  # raises what the writer's thread met since the last row

        self._guarded(write)
        self.rows += 1

    def text(self, tag: str, text: str) -> None:
        self._guarded(lambda: self.writer.add_text(tag, text))

    def close(self) -> None:
        self._guarded(self.writer.close)

    def _guarded(self, write) -> None:
        if self.failure is not None:
            return
        try:
            write()
        except OSError as err:
            self.failure = OutputFailed(self.name, err, f"after {self.rows} rows")
            abandon_writer(self.writer)
