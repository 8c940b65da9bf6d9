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

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("common", "analysis", "train", "sweep")


def _modules(package: str) -> list[str]:
    folder = ROOT / "harness" / package
    return sorted(f"harness.{package}.{path.stem}" for path in folder.glob("*.py") if path.stem != "__init__")


def _imported_by(module: str) -> set[str]:
    """Every module in sys.modules after importing `module` alone in a new interpreter."""
    code = f"import json, sys; import {module}; print(json.dumps(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


def _harness_packages(modules: set[str]) -> set[str]:
    return {name.split(".")[1] for name in modules if name.startswith("harness.") and name.count(".") >= 1}


def test_every_package_has_modules():
    """The layout this file checks exists: a package that moved or emptied would make the checks below vacuous."""
    for package in PACKAGES:
        assert _modules(package), f"harness/{package}/ holds no modules"


@pytest.mark.parametrize("module", _modules("common"))
def test_common_imports_no_other_layer(module):
    assert _harness_packages(_imported_by(module)) <= {"common"}


@pytest.mark.parametrize("module", _modules("analysis"))
def test_analysis_imports_neither_torch_nor_train_nor_sweep(module):
    loaded = _imported_by(module)
    assert "torch" not in loaded, f"{module} loads torch"
    assert _harness_packages(loaded) <= {"common", "analysis"}


@pytest.mark.parametrize("module", _modules("train"))
def test_train_does_not_import_sweep(module):
    assert "sweep" not in _harness_packages(_imported_by(module))


@pytest.mark.parametrize("module", _modules("sweep"))
def test_sweep_does_not_import_train(module):
    assert "train" not in _harness_packages(_imported_by(module))


@pytest.mark.parametrize("module", ["harness.compare", "harness.predict"])
def test_analysis_commands_load_without_torch(module):
    """compare and predict answer (and refuse a mistake) without the seconds that loading torch takes."""
    assert "torch" not in _imported_by(module)


def test_the_check_sees_a_violation(tmp_path):
    """The probe itself can fail: a module that imports torch is seen to have loaded it."""
    (tmp_path / "probe_mod.py").write_text("import torch.distributed\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    code = "import json, sys; import probe_mod; print(json.dumps(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert "torch" in json.loads(proc.stdout.strip().splitlines()[-1])
