"""The package layering holds in the real import graph: each module is imported in a fresh interpreter and
`sys.modules` is read back, so an import hidden in a package `__init__` or a chain of modules counts too.

    harness.common    imports nothing else of the harness (the base layer)
    harness.analysis  imports harness.common only, and never torch (compare and predict answer without it)
    harness.train     never imports harness.sweep
    harness.sweep     never imports harness.train
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("common", "analysis", "train", "sweep")


def _modules(package: str) -> list[str]:
    folder = ROOT / "harness" / package
    return sorted(f"harness.{package}.{path.stem}" for path in folder.glob("*.py") if path.stem != "__init__")


def _imported_by(*modules: str) -> set[str]:
    """Every module in sys.modules after importing `modules` (and nothing else) in a new interpreter. A layer's
    modules are imported together: the union holds a forbidden module exactly when one of them imports it."""
    code = f"import json, sys; import {', '.join(modules)}; print(json.dumps(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


def _harness_packages(modules: set[str]) -> set[str]:
    """The harness subpackages among `modules` (harness.train.hook -> "train")."""
    return {name.split(".")[1] for name in modules if name.startswith("harness.") and name.count(".") >= 2}


def test_every_package_has_modules():
    """The layout this file checks exists: a package that moved or emptied would make the checks below vacuous."""
    for package in PACKAGES:
        assert _modules(package), f"harness/{package}/ holds no modules"


def test_common_imports_no_other_layer():
    assert _harness_packages(_imported_by(*_modules("common"))) == {"common"}


def test_analysis_imports_neither_torch_nor_train_nor_sweep():
    loaded = _imported_by(*_modules("analysis"))
    assert "torch" not in loaded
    assert _harness_packages(loaded) <= {"common", "analysis"}


def test_train_does_not_import_sweep():
    packages = _harness_packages(_imported_by(*_modules("train")))
    assert "train" in packages and "sweep" not in packages


def test_sweep_does_not_import_train():
    packages = _harness_packages(_imported_by(*_modules("sweep")))
    assert "sweep" in packages and "train" not in packages


def test_analysis_commands_load_without_torch():
    """compare and predict answer (and refuse a mistake) without the seconds that loading torch takes."""
    assert "torch" not in _imported_by("harness.compare", "harness.predict")


def test_launchers_check_their_arguments_without_torch():
    """The programs that only start train.py or another program (the grid, the advisor's validation, the GC-pause
    profiler) refuse a mistake without loading torch; the grid loads it only to check --model, last."""
    assert "torch" not in _imported_by("harness.grid", "bench.advisor_validation", "bench.gc_pauses")


def test_train_py_parses_its_options_without_torch():
    """train.py refuses a mistyped option in the parse, before the checks that need the model and the machine load
    torch: its module, the options' dataclass and the calibration schedule they read load none of it."""
    assert "torch" not in _imported_by("train", "harness.train.config", "harness.train.calibration")


def test_the_check_sees_a_violation(tmp_path):
    """The probe itself can fail: a module that imports torch is seen to have loaded it."""
    (tmp_path / "probe_mod.py").write_text("import torch.distributed\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    code = "import json, sys; import probe_mod; print(json.dumps(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert "torch" in json.loads(proc.stdout.strip().splitlines()[-1])
