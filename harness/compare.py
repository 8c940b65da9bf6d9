"""Compare training runs side by side: one row per run, and each run's change against a baseline run.

    python -m harness.compare runs/                                    # every run under runs/
    python -m harness.compare runs/ ../other/runs/resnet50-.../20260101-120000   # directories and single runs
    python -m harness.compare runs/ --baseline bucket0.5               # baseline: a name or a unique substring
    python -m harness.compare runs/ --baseline runs/resnet50-.../20260101-120000   # or a run's directory
    python -m harness.compare runs/ --sort samples_per_s --descending
    python -m harness.compare runs/ --markdown cmp.md --csv cmp.csv    # a GitHub table for a pull request
    python -m harness.compare runs/ --group-repeats                    # one row per run name: median of repeats
    python -m harness.compare runs/ --plot steps.png                   # a stacked bar per run: what a step is

A run is a directory holding summary.json and/or TensorBoard event files (`<logdir>/<run_name>/<version>/`
as train.py writes them); directories are searched recursively and a run is named by its path relative to
the directory given. Each number comes from summary.json's totals; where summary.json lacks it (a killed
run has no summary.json at all), it is the median of the event file's per-step scalars over the steps
summary.json counts (warm-up and calibration steps left out). Such a run is marked incomplete. Values that
neither holds show as "—".

Files are read defensively: only regular files (a FIFO named like an event file is not opened), and
summary.json's fields are checked for type and range. A file that fails is named in a note under the table
and in a warning on stderr, with the field and what was expected, and its run is shown from what else it has
(a damaged summary.json: from its event file), never with the damaged numbers; the other runs are compared
as usual. --markdown, --csv and --plot are written before the table is printed, so `| head` loses none.

Runs are ordered by name with numbers compared by value (bucket1, bucket5, bucket25, bucket100). Repeats
of one configuration (train.py run again with the same settings, or harness.grid --repeat) are versions
under one run name; `--group-repeats` shows one row per run name and workload instead (runs of one name whose
workload settings differ, as summary.json records them, are never taken as repeats: docs/METRICS.md, run
identity): the median over its runs of each column, how many runs, and how far their step times spread
((max − min) / median), which says whether a difference between rows is larger than the run-to-run noise.

Changes against the baseline (default: the first row by name; --baseline takes a row's name, a unique part
of it, or a run's directory) are relative, in %, for samples/s, step ms, comm ms and exposed ms, and
absolute, in percentage points, for overlap. Rows that train something else than the baseline (another model,
image size, sequence length, batch size or data source) are compared all the same, with a warning line on
stderr and under the table for each kind that differs: their Δ measures more than the communication. Units
as in docs/METRICS.md: ms, decimal GB/s. Nothing is unpickled: summary.json is JSON and event files are
protocol buffers.

--plot FILE.png (or .svg, .pdf) draws one stacked bar per row: compute-only | exposed communication (its
95 % interval as a whisker) | the rest of the step, each bar with its step time and change against the
baseline (harness.analysis.step_bars_plot; matplotlib is loaded only then).

This file is the command line alone: harness.analysis.runs finds and loads the runs, .comparison does the
arithmetic and .comparison_tables writes the text, Markdown and CSV tables.
"""

from __future__ import annotations

import argparse

from harness.analysis.checked import check_outputs, write_output
from harness.analysis.comparison import SORT_KEYS, build_rows, mixed_workloads, sort_rows
from harness.analysis.comparison_tables import format_csv, format_markdown, format_text
from harness.analysis.runs import load_runs, run_files, runs_in_directory
from harness.analysis.step_bars_plot import check_plot_path, render_step_bars
from harness.common.cli import DefaultsHelpFormatter, OneLineParser, run_cli
from harness.common.failures import say

PROG = "python -m harness.compare"


def build_parser() -> argparse.ArgumentParser:
    """The command line; a mistake is one line and exit 2 (OneLineParser, through run_cli)."""
    parser = OneLineParser(
        prog=PROG,
        description="Compare training runs: one row per run, with changes against a baseline run.",
        formatter_class=DefaultsHelpFormatter,
    )
    parser.add_argument("paths", nargs="+", metavar="DIR", help="log directories (searched recursively) or runs")
    parser.add_argument(
        "--baseline",
        metavar="NAME|DIR",
        help="baseline row: its name, a unique part of it, or a run's directory (a version's, or a run name's: its "
        "one version, or its repeats with --group-repeats; default: the first row by name). Rows that train another "
        "model, image size, sequence length, batch size or data source than the baseline are compared all the same, "
        "with one warning line per kind that differs (stderr and the table's notes)",
    )
    parser.add_argument("--sort", choices=SORT_KEYS, default="run", help="order rows by this column")
    parser.add_argument("--descending", action="store_true", help="sort from the largest value")
    parser.add_argument("--markdown", metavar="PATH", help="also write a GitHub Markdown table here")
    parser.add_argument("--csv", metavar="PATH", help="also write the rows as CSV here")
    parser.add_argument(
        "--plot",
        metavar="FILE.png",
        help="also draw one stacked bar per row here (.png, .svg or .pdf): compute-only | exposed communication "
        "(95 %% interval) | the rest of the step, with its step time and change against the baseline",
    )
    parser.add_argument(
        "--group-repeats",
        action="store_true",
        help="one row per run name and workload: the median of its runs (repeats: equal settings), their count "
        "and step-time spread",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Print the table (and write --markdown and --csv); 0, or a UsageError for run_cli to report."""
    args = build_parser().parse_args(argv)
    outputs = {"--markdown": args.markdown, "--csv": args.csv, "--plot": args.plot}
    # Checked before the runs are read, so that a typo in an output path costs nothing.
    if args.plot:
        check_plot_path(args.plot)
    check_outputs(outputs)
    runs = load_runs(args.paths)
    check_outputs(outputs, [path for run in runs if run.directory for path in run_files(run.directory)])
    for run in runs:  # the table's notes say it too; stderr is for whoever reads only that
        for problem in filter(None, [run.summary_problem, *run.problems]):
            say(PROG, f"warning: {problem}")
    in_directory = runs_in_directory(runs, args.baseline) if args.baseline else None
    rows = sort_rows(build_rows(runs, args.baseline, args.group_repeats, in_directory), args.sort, args.descending)
    for line in mixed_workloads(rows):
        say(PROG, f"warning: {line}")
    if args.plot:
        write_output(args.plot, render_step_bars(rows, args.plot), "--plot")
    if args.markdown:
        write_output(args.markdown, format_markdown(rows), "--markdown")
    if args.csv:
        write_output(args.csv, format_csv(rows), "--csv")
    print(format_text(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, PROG))
