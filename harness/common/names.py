"""Names and numbers that several layers share, in one torch-free home: files, units, exit codes.

compare and predict read what train.py wrote without loading torch, so what both sides must agree on
lives here rather than in the modules that import torch (TensorBoard's tags: harness.common.tags). Definitions:
docs/METRICS.md.
"""

from __future__ import annotations

# -- what train.py writes, and compare reads --------------------------------------------------------------
SUMMARY_FILE = "summary.json"
EVENT_FILE_PREFIX = "events.out.tfevents."  # TensorBoard's event files
# Steps 0 and 1 are warm-up: step 0 runs with DDP's single bucket, then DDP rebuilds its buckets once.
WARMUP_STEPS = 2

# -- the communication hooks train.py offers (harness.train.hook implements them) -------------------------
HOOK_NAMES = ("allreduce", "fp16", "bf16", "powersgd", "noop")
COMPRESS_HOOKS = ("fp16", "bf16")  # cast each bucket, send it, copy it back in the collective's callback

# -- units --------------------------------------------------------------------------------------------------
MB = 1e6  # tables give sizes in decimal MB, matching the decimal GB/s of the bandwidths
MIB = 2**20  # DDP's bucket_cap_mb is in MiB
DEFAULT_BUCKET_CAP_MB = 25.0  # DDP's default cap (torch.nn.parallel.distributed._DEFAULT_BUCKET_CAP_MB)
# How many collectives a gloo process group runs at once: its worker threads, each taking the next queued
# collective (ProcessGroupGloo's options, `_threads`, 2 unless the group was made with others). NCCL runs one
# communicator's collectives in order on one stream: 1.
GLOO_DEFAULT_THREADS = 2

# -- exit codes, alike for every command ---------------------------------------------------------------------
EXIT_WRONG = 1  # the raw sweep's check found wrong elements
EXIT_USAGE = 2  # a mistake in what the user asked for (argparse's own code)
EXIT_FAILED = 3  # cut short: a collective failed or timed out, or a peer died
EXIT_BROKEN_PIPE = 141  # the reader of stdout went away (128 + SIGPIPE, as a shell reports it)
# Beyond --timeout, how long ranks started by the harness itself have to stop on their own after one died.
GRACE_S = 5.0
