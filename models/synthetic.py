"""sleep_chain: a synthetic model whose backward timeline is known in advance (DRAFT docstring)."""

from __future__ import annotations

import time

import torch
from torch import nn

CHAIN_BLOCKS = 8
CHAIN_WIDTH = 1024
BACKWARD_SLEEP_S = 0.080
CHAIN_CLASSES = 10


class _SleepInBackward(torch.autograd.Function):
    """Identity in forward; in backward, time.sleep(BACKWARD_SLEEP_S) before passing the gradient on."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        time.sleep(BACKWARD_SLEEP_S)
        return grad


class SleepChain(nn.Module):
    def __init__(self, blocks: int = CHAIN_BLOCKS, width: int = CHAIN_WIDTH, num_classes: int = CHAIN_CLASSES) -> None:
        super().__init__()
        self.inp = nn.Linear(3, width)
        self.blocks = nn.ModuleList(nn.Linear(width, width) for _ in range(blocks))
        self.head = nn.Linear(width, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.inp(images.mean(dim=(2, 3)))
        for block in self.blocks:
            x = _SleepInBackward.apply(block(x))
        return self.head(x)


def build_sleep_chain(image_size: int) -> nn.Module:
    del image_size
    return SleepChain()
