"""One training rank of train.py: config, the model's LightningModule, the timed DDP hook and its stamps,
per-step statistics and calibration, gradient-ready times and the codec probe, the Lightning callback,
TensorBoard (per-step scalars, its dashboards, the step timeline) and summary.json, rank gathers, the training
loops (Lightning Fabric with a loop of its own, or the Trainer),
the quiet console, and one rank's life from rendezvous to exit.

It imports harness.common and models (the architectures), never harness.sweep.
"""
