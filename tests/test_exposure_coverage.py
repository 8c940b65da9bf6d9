"""bench.exposure_coverage --reanalyze reads the runs an earlier --out kept: a file it cannot use is refused in one
line naming the file, the line and the field, before anything is computed."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench.exposure_coverage import main
from harness.common.cli import UsageError
from tests.train_runs import REPO

# A run as `record` writes it: eight measured steps, three calibration samples around them.
RUN = {
    "run_dir": "runs/noop0/v0",
    "seconds": 41.5,
    "exposed_ms_p50": 0.1,
    "exposed_ms_ci95": [-0.4, 0.6],
    "resolved": False,
    "step_ms_p50": 30.0,
    "steps": [5, 6, 7, 8, 9, 10, 11, 12],
    "fwd_bwd_ms": [20.1, 19.8, 20.3, 20.0, 19.9, 20.2, 20.0, 20.1],
    "calibration": [[2, 20.0], [3, 19.9], [4, 20.1]],
}


def test_reanalyze_reads_back_the_runs_out_kept(tmp_path, capsys):
    path = tmp_path / "coverage.jsonl"
    path.write_text(json.dumps(RUN) + "\n\n" + json.dumps(RUN) + "\n")  # a blank line between runs is skipped
    assert main(["--reanalyze", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out] == ["# run 0", "# run 1", "# coverage"]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (None, "{path}: cannot be read (No such file or directory); expected a regular file"),
        ("", "{path} holds no runs; expected one JSON line per run, as --out writes them"),
        ("\n\n", "{path} holds no runs; expected one JSON line per run, as --out writes them"),
        ("run 0: 12 ms\n", "{path} line 1 is not JSON (Expecting value: line 1 column 1 (char 0))"),
        (json.dumps(RUN) + "\n[1, 2]\n", "{path} line 2 holds a list; expected a JSON object"),
        ('{"seconds": 1}\n', "{path} line 1: step_ms_p50 is missing; expected a number >= 0"),
        (
            json.dumps({**RUN, "fwd_bwd_ms": "20.1"}),
            "{path} line 1: fwd_bwd_ms is the string '20.1'; expected a list of numbers",
        ),
        (
            json.dumps({**RUN, "steps": [5, 6]}),
            "{path} line 1: steps and fwd_bwd_ms differ in length; expected one forward + backward a step",
        ),
        (
            json.dumps({**RUN, "calibration": [[2, 20.0, 1]]}),
            "{path} line 1: calibration is a list; expected a list of [step, ms] pairs",
        ),
    ],
)
def test_reanalyze_refuses_a_file_it_cannot_use(tmp_path, text, says):
    """Each was a traceback (FileNotFoundError, JSONDecodeError, KeyError, TypeError) or, for no runs, a
    ZeroDivisionError."""
    path = tmp_path / "coverage.jsonl"
    if text is not None:
        path.write_text(text)
    with pytest.raises(UsageError) as refused:
        main(["--reanalyze", str(path)])
    assert str(refused.value) == "--reanalyze: " + says.format(path=path)


def test_reanalyze_of_a_directory_is_one_line_and_exit_2(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "bench.exposure_coverage", "--reanalyze", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    says = f"--reanalyze: {tmp_path} is a directory; expected a regular file"
    assert proc.returncode == 2 and proc.stderr == f"python -m bench.exposure_coverage: error: {says}\n", proc.stderr
