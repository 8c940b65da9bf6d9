"""bench.op_census counts what torch.profiler recorded: a step of a known model has a known number of each
operator, and a step with one more operator shows exactly that one in the difference."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from bench.op_census import Window, differences, read_census, report
from harness.common.cli import UsageError
from tests.train_runs import REPO


def profiled_census(tmp_path, name: str, extra_relu: bool) -> dict:
    """Nine steps of a two-layer MLP: the profiler's window over steps 3-5, the Python calls' over steps 6-8; with
    `extra_relu`, one more relu a step."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    out = tmp_path / f"{name}.json"
    handle = register_optimizer_step_post_hook(Window(start=2, steps=3, out=out))
    try:
        for _ in range(9):
            hidden = model(torch.randn(4, 8))
            loss = (torch.relu(hidden) if extra_relu else hidden).sum()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    finally:
        handle.remove()
    return {**json.loads(out.read_text()), "variant": name}


def test_the_census_counts_each_operator_of_a_step_exactly(tmp_path):
    census = profiled_census(tmp_path, "mlp", extra_relu=False)
    main = census["threads"]["main"]
    assert census["steps"] == 3 and census["start"] == 2
    # Two Linear layers: two addmm a step forward; one ReLU, and its backward (on the CPU backward runs on this thread).
    assert main["aten::addmm"][0] == pytest.approx(2.0)
    assert main["aten::relu"][0] == pytest.approx(1.0)
    assert main["aten::threshold_backward"][0] == pytest.approx(1.0)
    assert main["aten::addmm"][1] > 0  # µs per step, from the profiler's own durations


def test_a_step_with_one_more_operator_differs_by_exactly_that_one(tmp_path):
    base = profiled_census(tmp_path, "base", extra_relu=False)
    more = profiled_census(tmp_path, "more", extra_relu=True)
    lines = differences(base, more, top=10)
    changed = [line.split(maxsplit=3) for line in lines[1:]]
    names = {parts[-1] for parts in changed}
    assert "aten::relu" in names
    relu = next(parts for parts in changed if parts[-1] == "aten::relu")
    assert relu[0] == "+1.0"
    assert "aten::addmm" not in names  # the same two a step in both
    # The main thread's Python: the one more call, torch.relu, and no other.
    python = lines[lines.index("  main, Python calls: 1 names differ by half a call a step or more") + 1 :]
    assert [line.split(maxsplit=3)[0] for line in python] == ["+1.0"] and python[0].endswith(".relu")
    printed = report([base, more])
    assert "# more against base" in printed and "main" in printed


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--variants", "plain,nope"], "--variants: nope; choose from: plain"),
        (["--steps", "0"], "--steps must be at least 1, got 0"),
        (["--report", "/nonexistent/census.json"], "--report: "),
    ],
)
def test_mistakes_are_one_line(args, message):
    proc = subprocess.run(
        [sys.executable, "-m", "bench.op_census", *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("python -m bench.op_census: error: ") and message in lines[0]


def test_report_reads_back_a_census_as_out_keeps_it(tmp_path):
    census = profiled_census(tmp_path, "mlp", extra_relu=False)
    kept = tmp_path / "kept.json"
    kept.write_text(json.dumps(census))
    assert read_census(kept) == census


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[]", "holds a list; expected a JSON object"),
        ('{"start": 2, "steps": 3, "wall_ms_per_step": 1.0, "threads": {}}', "variant is missing; expected a string"),
        (
            '{"variant": "a", "start": 2, "steps": 3, "wall_ms_per_step": 1.0}',
            "threads is missing; expected a JSON object",
        ),
        (
            '{"variant": "a", "start": 2, "steps": 3, "wall_ms_per_step": 1.0, "threads": {"main": {"aten::add": 1}}}',
            "threads.main.aten::add is 1; expected [calls per step, µs per step]",
        ),
    ],
)
def test_report_refuses_a_file_that_is_not_a_census_in_one_line(tmp_path, text, says):
    """Each was a KeyError or TypeError traceback in the table."""
    path = tmp_path / "census.json"
    path.write_text(text)
    with pytest.raises(UsageError) as refused:
        read_census(path)
    assert str(refused.value) == f"--report: {path}{'' if text == '[]' else ':'} {says}"
