"""The base layer that every other package uses: it imports no other part of the harness.

metrics (bandwidth formulas, percentiles, α–β fit), names (files, units, exit codes), tags (TensorBoard's
sections, tags and HParams names), cli (UsageError,
one-line errors, help formatting, writability checks), failures (signals, failure lines), dist_env (which
launcher, which rank), local_launch (ranks started without a launcher), run_info (versions, recorded
variables, JSON-safe values), sweep_fits (the α–β fit record the sweep writes and predict reads), run_identity
(the settings that define a run's workload and their hash, which train.py names runs by and compare groups
by). cli, names, tags, metrics, failures, sweep_fits and run_identity load without torch; numbers holds the one
test of a usable number in a file.
"""
