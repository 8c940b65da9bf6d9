"""One rank of the raw collective sweep (python -m harness.raw_sweep), with nccl-tests' semantics: the
collectives' definitions, sizes, the timing loop, memory and CUDA-graph capacity, outputs (table, JSON Lines,
CSV, TensorBoard), and one rank's life from rendezvous to exit.

It imports harness.common only, never harness.train.
"""
