"""The base layer that every other package uses: it imports no other part of the harness.

metrics (bandwidth formulas, percentiles, α–β fit), names (files, units, exit codes), tags (TensorBoard's
sections, tags and HParams names), cli (UsageError,
one-line errors, help formatting, writability checks), failures (signals, failure lines), dist_env (which
launcher, which rank), local_launch (ranks started without a launcher), run_info (versions, recorded
variables, JSON-safe values), sweep_fits (the α–β fit record the sweep writes and predict reads). cli, names,
tags, metrics, failures and sweep_fits load without torch; numbers holds the one test of a usable number in a file.
"""
