"""Lightning's DDP strategies (the Trainer's and Fabric's), with DistributedDataParallel built on the current CUDA
stream, as plain DDP is.

Lightning (2.6 and earlier) builds DDP inside `torch.cuda.stream(torch.cuda.Stream())`, for whole-network CUDA
graph capture, which train.py never does. DDP creates every parameter's AccumulateGrad node in its
constructor, and autograd runs a node on the stream that was current when it was created. So every backward
then accumulates each gradient on that side stream: per parameter an event record, a cross-stream wait and
later an allocator event query (on the H200, resnet50: 176 stream waits, 330 event records and 182 event
queries per step, against 14, 14 and 22 for plain DDP; torch 2.10+ warns "The AccumulateGrad node's stream
does not match"). That is host work and GPU ordering a user of plain DDP does not pay, and it would be charged
to communication. Lightning-AI/pytorch-lightning#21746 makes the same change upstream.
"""

from __future__ import annotations

from lightning.fabric.strategies import DDPStrategy as FabricDDPStrategy
from lightning.pytorch.strategies import DDPStrategy
from torch import nn
from torch.nn.parallel import DistributedDataParallel


class SameStreamDDPStrategy(DDPStrategy):
    """The Trainer's DDPStrategy, with DistributedDataParallel constructed on the stream the training steps run on."""

    def _setup_model(self, model: nn.Module) -> DistributedDataParallel:
        return DistributedDataParallel(module=model, device_ids=self.determine_ddp_device_ids(), **self._ddp_kwargs)


class SameStreamFabricDDPStrategy(FabricDDPStrategy):
    """Fabric's DDPStrategy, with DistributedDataParallel constructed on the current stream. It keeps the DDP it
    built as `model`, where the Trainer's strategy keeps it, so the harness's callbacks find it in either loop."""

    model: DistributedDataParallel | None = None

    def setup_module(self, module: nn.Module) -> DistributedDataParallel:
        device_ids = self._determine_ddp_device_ids()
        self.model = DistributedDataParallel(module=module, device_ids=device_ids, **self._ddp_kwargs)
        return self.model
