"""Reading what train.py and the raw sweep wrote, and predicting communication from it: torch-free.

Runs and their comparison (what `python -m harness.compare` shows, and its step-bar plot, which imports
matplotlib only when it draws), DDP's bucket layout without running DDP, and the prediction model (what
`python -m harness.predict` shows). It imports harness.common only, and never torch at import time (a
function that needs it, such as the layout of a registry model, imports it itself).
"""
