"""Communication benchmark harness for PyTorch data-parallel training.

Entry points: `train.py` (timed DDP training), `python -m harness.raw_sweep` (collective sweep).
"""
