"""The old name of harness.grid (a grid of train.py runs), kept so existing commands and scripts still work.

python -m harness.sweep_settings ...   is   python -m harness.grid ...
"""

from harness.common.cli import run_cli
from harness.grid import PROG, main

if __name__ == "__main__":
    raise SystemExit(run_cli(main, PROG))
