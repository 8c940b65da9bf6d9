"""train.py --data-dir reads a real ImageFolder (made here from random pixels) instead of synthetic images."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from PIL import Image

REPO = Path(__file__).resolve().parent.parent


def make_image_folder(root: Path, classes: int = 2, per_class: int = 8, side: int = 40) -> Path:
    gen = torch.Generator().manual_seed(0)
    for c in range(classes):
        folder = root / f"class{c}"
        folder.mkdir(parents=True)
        for i in range(per_class):
            pixels = torch.randint(0, 256, (side, side, 3), generator=gen, dtype=torch.uint8).numpy()
            Image.fromarray(pixels).save(folder / f"{i}.png")
    return root


@pytest.mark.slow
def test_train_reads_an_image_folder(tmp_path):
    data = make_image_folder(tmp_path / "images")
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo"}
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "train.py"),
            "--model",
            "resnet_tiny",
            "--data-dir",
            str(data),
            "--batch-size",
            "2",
            "--max-steps",
            "3",
            "--calibration-steps",
            "0",
            "--logdir",
            str(tmp_path / "runs"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(next((tmp_path / "runs").glob("*/*/summary.json")).read_text())
    assert summary["settings"]["data_dir"] == str(data)
    assert summary["completed"] and summary["totals"]["steps_measured"] == 1
