"""DDP's gradient buckets without running DDP: which parameters share a bucket, and how many elements each holds.

DDP rebuilds its buckets once, after step 0, in the order the gradients became ready. Without running a
backward that order is not known; this module takes it as the reverse of the parameters' registration
order (the last layers' gradients are ready first), and groups with torch's own function
`torch.distributed._compute_bucket_assignment_by_size`, given the same size limits DDP's rebuild uses: a
first bucket of `dist._DEFAULT_FIRST_BUCKET_BYTES` (1 MiB) while the cap is left at its default of 25 MiB,
then the cap. A bucket closes once it reaches its limit, so it can exceed the limit by one tensor.

For the torchvision models and the GPTs of the registry this gives exactly the bucket sizes that DDP
reports after its rebuild (`_get_ddp_logging_data()["rebuilt_bucket_sizes"]`; tests/test_predict.py).
A model whose backward produces gradients far out of registration order would differ. A run's
summary.json holds the measured layout; `layout_from_summary` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.common.names import DEFAULT_BUCKET_CAP_MB, MIB

if TYPE_CHECKING:
    from torch import nn

# torch is imported where it is used, so that the command line answers a mistake without loading it.


@dataclass(frozen=True)
class PlannedBucket:
    """One gradient bucket as the prediction sees it, in launch order (bucket 0 holds the last layers and is
    reduced first): its size and parameter range, from DDP's rule or a run's summary.json. Not the hook's
    record of a live bucket's contents (harness.train.hook)."""

    index: int
    numel: int
    """Gradient elements in the bucket."""
    grad_itemsize: int
    """Bytes per gradient element (4 for fp32 parameters)."""
    num_params: int
    first_param: str
    last_param: str


def bucket_limits_bytes(bucket_cap_mb: float | None) -> list[int]:
    """The size limits DDP's rebuild uses: [first bucket, every later bucket], in bytes."""
    import torch.distributed as dist

    if bucket_cap_mb is None:
        return [dist._DEFAULT_FIRST_BUCKET_BYTES, int(DEFAULT_BUCKET_CAP_MB * MIB)]
    cap = int(bucket_cap_mb * MIB)
    return [cap, cap]


def ddp_bucket_layout(model: nn.Module, bucket_cap_mb: float | None = None) -> list[PlannedBucket]:
    """The buckets DDP would build for `model` after its rebuild, gradients taken as ready in reverse order.

    The model may live on the meta device: only shapes and dtypes are read.
    """
    import torch.distributed as dist

    named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    if not named:
        return []
    order = list(reversed(range(len(named))))  # the assumed gradient-ready order
    groups, _ = dist._compute_bucket_assignment_by_size(
        [named[i][1] for i in order], bucket_limits_bytes(bucket_cap_mb), [], order
    )
    buckets = []
    for index, indices in enumerate(groups):
        params = [named[i][1] for i in indices]
        buckets.append(
            PlannedBucket(
                index=index,
                numel=sum(p.numel() for p in params),
                grad_itemsize=params[0].element_size(),
                num_params=len(params),
                first_param=named[indices[0]][0],
                last_param=named[indices[-1]][0],
            )
        )
    return buckets


def model_bucket_layout(model_name: str, bucket_cap_mb: float | None = None) -> list[PlannedBucket]:
    """`ddp_bucket_layout` of a registered model, built on the meta device (no memory, no download)."""
    import torch

    from models import get_model_spec

    spec = get_model_spec(model_name)
    with torch.device("meta"):
        model = spec.build()
    return ddp_bucket_layout(model, bucket_cap_mb)


def layout_from_summary(summary: dict[str, Any]) -> list[PlannedBucket]:
    """The measured buckets of a train.py run (its summary.json), in launch order."""
    buckets = []
    for b in sorted(summary.get("buckets", []), key=lambda b: b["index"]):
        # `bytes` is what travelled; the gradients themselves are fp32 unless the run reduced them unhooked.
        itemsize = b["bytes"] // b["numel"] if b.get("numel") else 4
        grad_itemsize = itemsize if summary.get("settings", {}).get("comm_hook") == "allreduce" else 4
        buckets.append(
            PlannedBucket(
                index=b["index"],
                numel=b["numel"],
                grad_itemsize=grad_itemsize,
                num_params=b.get("num_params", 0),
                first_param=b.get("first_param", ""),
                last_param=b.get("last_param", ""),
            )
        )
    return buckets
