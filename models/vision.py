"""Image classifiers (torchvision's, with random weights, plus tiny flavors) and synthetic image batches.

torchvision is imported where a model is built, not with this module: its import takes about 2 s (its ops import
torch._dynamo), which train.py's launcher, the CLIs that only read the registry, and the --help would otherwise
pay before doing anything.
"""

from __future__ import annotations

import torch
from torch import nn

IMAGENET_CLASSES = 1000
IMAGENET_SIZE = 224  # the side torchvision's models are published at
TINY_CLASSES = 10  # CIFAR-10's count: a small head keeps the tiny models tiny
TINY_SIZE = 32  # CIFAR's side, the smallest every model here accepts
# ConvNeXt downsamples by 4 × 2 × 2 × 2; below 32 pixels its last stage has nothing left to convolve.
MIN_IMAGE_SIZE = 32

TINY_RESNET_WIDTHS = (16, 32, 64, 128)  # CIFAR-ResNet widths: about 0.3M parameters instead of 4.9M
VIT_B_16_PATCH = 16  # the "16" in ViT-B/16: the image side must be a multiple of it
VIT_TINY_PATCH = 8


def build_torchvision(name: str, image_size: int) -> nn.Module:
    """torchvision's CNN `name` (torchvision.models.resnet50, ...) with random weights. Adaptive pooling lets it take
    any image size ≥ 32."""
    import torchvision

    del image_size  # the parameters do not depend on it
    return getattr(torchvision.models, name)(weights=None)


def build_vit_b_16(image_size: int) -> nn.Module:
    """torchvision's ViT-B/16 with random weights; its position embedding is sized for `image_size`."""
    import torchvision

    return torchvision.models.vit_b_16(weights=None, image_size=image_size)


def build_vit_tiny(image_size: int) -> nn.Module:
    """A two-layer torchvision VisionTransformer, 64 wide: the ViT code path at test size."""
    import torchvision

    return torchvision.models.VisionTransformer(
        image_size=image_size,
        patch_size=VIT_TINY_PATCH,
        num_layers=2,
        num_heads=2,
        hidden_dim=64,
        mlp_dim=128,
        num_classes=TINY_CLASSES,
    )


class TinyResNet(nn.Module):
    """A ResNet of torchvision BasicBlocks, one per stage, at CIFAR widths, with a 3×3 stem and no max-pool.

    torchvision's own ResNet fixes its widths at 64..512, so even one block per stage has 4.9M parameters;
    this keeps the same residual blocks and BatchNorm buffers at a size tests on two CPU cores can afford.
    """

    def __init__(self, num_classes: int = TINY_CLASSES, widths: tuple[int, ...] = TINY_RESNET_WIDTHS) -> None:
        from torchvision.models.resnet import BasicBlock

        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, widths[0], kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(widths[0]),
            nn.ReLU(inplace=True),
        )
        stages = []
        in_width = widths[0]
        for index, width in enumerate(widths):
            stride = 1 if index == 0 else 2
            downsample = None
            if stride != 1 or in_width != width:
                downsample = nn.Sequential(
                    nn.Conv2d(in_width, width, kernel_size=1, stride=stride, bias=False),
                    nn.BatchNorm2d(width),
                )
            stages.append(BasicBlock(in_width, width, stride=stride, downsample=downsample))
            in_width = width
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.stages(self.stem(x)))
        return self.fc(torch.flatten(x, 1))


def build_resnet_tiny(image_size: int) -> nn.Module:
    """TinyResNet with a 10-class head."""
    del image_size  # adaptive pooling: the parameters do not depend on it
    return TinyResNet(TINY_CLASSES)


def make_image_batch(
    batch_size: int, image_size: int, num_classes: int, device: torch.device, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random images float32 (B, 3, H, W) ~ N(0, 1) and int64 labels (B,) in [0, num_classes).

    Drawn on the generator's device and then moved to `device` (a no-op when they are the same).
    """
    images = torch.randn(batch_size, 3, image_size, image_size, generator=generator, device=generator.device)
    labels = torch.randint(0, num_classes, (batch_size,), generator=generator, device=generator.device)
    return images.to(device), labels.to(device)
