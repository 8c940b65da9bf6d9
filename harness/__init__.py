"""Communication benchmark harness for PyTorch data-parallel training.

Commands, where users call them: `train.py` (timed DDP training), `python -m harness.raw_sweep` (collective
sweep), `python -m harness.compare` (runs side by side), `python -m harness.predict` (comm time from a
network model), `python -m harness.grid` (train.py over bucket caps and hooks).

Packages, lower layers first (tests/test_layering.py checks the imports):
    common    formulas, shared names and exit codes, CLI and failure helpers, launch; imports no other layer
    analysis  reading runs and sweeps, bucket layouts, the prediction model; common only, never torch
    train     one training rank: config, hook, statistics, Lightning callback, reports; never sweep
    sweep     one raw-sweep rank: collectives, sizes, timing loop, outputs; never train
"""
