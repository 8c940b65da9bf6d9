"""The model registry: every architecture the harness trains, by name, with its batch, loss and sizes.

`MODELS` is a plain dict literal. To add a model, add one `ModelSpec` entry here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from harness.common.cli import UsageError
from models import gpt, synthetic, vision

KINDS = ("image", "token")


@dataclass(frozen=True)
class ModelSpec:
    """One trainable architecture and how to feed it synthetic data."""

    name: str
    """The name given to --model."""
    kind: str
    """"image": inputs are float images (B, 3, H, W). "token": inputs are token ids (B, T)."""
    builder: Callable[..., nn.Module]
    """Image models: builder(image_size) -> module. Token models: builder() -> module."""
    num_classes: int
    """Width of the logits: the class count for images, the vocabulary size for tokens."""
    default_image_size: int | None = None
    """Image models: the side used when the user gives none."""
    image_size_multiple: int = 1
    """Image models: the side must be a multiple of this (a ViT's patch size)."""
    default_seq_len: int | None = None
    """Token models: the sequence length used when the user gives none."""
    max_seq_len: int | None = None
    """Token models: the longest sequence the model takes (its block size)."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"model {self.name!r}: kind must be one of {KINDS}, got {self.kind!r}")
        if self.kind == "image" and self.default_image_size is None:
            raise ValueError(f"image model {self.name!r} needs default_image_size")
        if self.kind == "token" and (self.default_seq_len is None or self.max_seq_len is None):
            raise ValueError(f"token model {self.name!r} needs default_seq_len and max_seq_len")

    @property
    def sample_unit(self) -> str:
        """What one sample is ("image" or "token"), so throughput reads as images/s or tokens/s."""
        return self.kind

    def resolve_image_size(self, image_size: int | None = None) -> int:
        """The image side to use: the default when None, else `image_size` once checked."""
        if image_size is None:
            assert self.default_image_size is not None  # guaranteed by __post_init__ for image models
            return self.default_image_size
        if image_size < vision.MIN_IMAGE_SIZE:
            raise UsageError(f"--image-size {image_size} is too small; the smallest is {vision.MIN_IMAGE_SIZE}")
        if image_size % self.image_size_multiple != 0:
            raise UsageError(
                f"--image-size {image_size} does not suit {self.name}: it must be a multiple of its "
                f"patch size {self.image_size_multiple}"
            )
        return image_size

    def resolve_seq_len(self, seq_len: int | None = None) -> int:
        """The sequence length to use: the default when None, else `seq_len` once checked."""
        assert self.default_seq_len is not None and self.max_seq_len is not None  # token models only
        if seq_len is None:
            return self.default_seq_len
        if not 1 <= seq_len <= self.max_seq_len:
            raise UsageError(f"--seq-len {seq_len} is out of range for {self.name}: 1 to {self.max_seq_len}")
        return seq_len

    def build(self, image_size: int | None = None, seq_len: int | None = None) -> nn.Module:
        """A freshly initialised model with random weights; nothing is downloaded.

        The argument that does not apply to this kind of model is ignored; the one that does is checked.
        """
        if self.kind == "image":
            return self.builder(self.resolve_image_size(image_size))
        self.resolve_seq_len(seq_len)  # the architecture is fixed; this only rejects a bad --seq-len early
        return self.builder()

    def make_batch(
        self,
        batch_size: int,
        device: torch.device | str,
        generator_or_seed: torch.Generator | int,
        image_size: int | None = None,
        seq_len: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A synthetic (inputs, targets) batch on `device`, the same every time for the same seed.

        Pass a seed (base_seed + rank, so ranks differ) or a generator to draw successive batches from.
        A seed makes a generator on `device` itself, so no host-to-device copy is needed.
        """
        if batch_size < 1:
            raise UsageError(f"--batch-size must be at least 1, got {batch_size}")
        device = _concrete_device(device)
        generator = _as_generator(generator_or_seed, device)
        if self.kind == "image":
            size = self.resolve_image_size(image_size)
            return vision.make_image_batch(batch_size, size, self.num_classes, device, generator)
        length = self.resolve_seq_len(seq_len)
        return gpt.make_token_batch(batch_size, length, self.num_classes, device, generator)

    def loss(self, model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """Mean cross-entropy of the model's logits against the targets (over every token, for GPT)."""
        inputs, targets = batch
        logits = model(inputs)
        # (B, C) stays as it is; (B, T, V) becomes (B*T, V): one classification per position.
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))

    def samples_per_batch(self, batch_size: int, seq_len: int | None = None) -> int:
        """Samples in one batch, in `sample_unit`: images, or tokens (batch_size × seq_len)."""
        if self.kind == "image":
            return batch_size
        return batch_size * self.resolve_seq_len(seq_len)


def _concrete_device(device: torch.device | str) -> torch.device:
    """Pin a bare "cuda" to the current device, so the generator lives where this rank's batches go."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def _as_generator(generator_or_seed: torch.Generator | int, device: torch.device) -> torch.Generator:
    if isinstance(generator_or_seed, torch.Generator):
        return generator_or_seed
    generator = torch.Generator(device=device)
    generator.manual_seed(generator_or_seed)
    return generator


def _torchvision_cnn(name: str) -> ModelSpec:
    """torchvision.models.<name>, built with random weights (imported only then: vision.py says why)."""
    return ModelSpec(
        name=name,
        kind="image",
        builder=functools.partial(vision.build_torchvision, name),
        num_classes=vision.IMAGENET_CLASSES,
        default_image_size=vision.IMAGENET_SIZE,
    )


def _gpt(name: str, config: gpt.GPTConfig) -> ModelSpec:
    return ModelSpec(
        name=name,
        kind="token",
        builder=functools.partial(gpt.GPT, config),
        num_classes=config.vocab_size,
        default_seq_len=config.block_size,
        max_seq_len=config.block_size,
    )


MODELS: dict[str, ModelSpec] = {
    "resnet18": _torchvision_cnn("resnet18"),
    "resnet50": _torchvision_cnn("resnet50"),
    "resnet101": _torchvision_cnn("resnet101"),
    "resnet152": _torchvision_cnn("resnet152"),
    "convnext_tiny": _torchvision_cnn("convnext_tiny"),
    "vit_b_16": ModelSpec(
        name="vit_b_16",
        kind="image",
        builder=vision.build_vit_b_16,
        num_classes=vision.IMAGENET_CLASSES,
        default_image_size=vision.IMAGENET_SIZE,
        image_size_multiple=vision.VIT_B_16_PATCH,
    ),
    "gpt2": _gpt("gpt2", gpt.GPT2),
    "gpt2-medium": _gpt("gpt2-medium", gpt.GPT2_MEDIUM),
    # Tiny flavors for tests and CPU runs: each well under 1M parameters.
    "resnet_tiny": ModelSpec(
        name="resnet_tiny",
        kind="image",
        builder=vision.build_resnet_tiny,
        num_classes=vision.TINY_CLASSES,
        default_image_size=vision.TINY_SIZE,
    ),
    "vit_tiny": ModelSpec(
        name="vit_tiny",
        kind="image",
        builder=vision.build_vit_tiny,
        num_classes=vision.TINY_CLASSES,
        default_image_size=vision.TINY_SIZE,
        image_size_multiple=vision.VIT_TINY_PATCH,
    ),
    "gpt_tiny": _gpt("gpt_tiny", gpt.GPT_TINY),
    # A model whose backward timeline is set by sleeps, not compute: the known-answer case (models/synthetic.py).
    "sleep_chain": ModelSpec(
        name="sleep_chain",
        kind="image",
        builder=synthetic.build_sleep_chain,
        num_classes=synthetic.CHAIN_CLASSES,
        default_image_size=vision.MIN_IMAGE_SIZE,  # the image is averaged away: any side does
    ),
}

MODEL_NAMES: list[str] = sorted(MODELS)


def get_model_spec(name: str) -> ModelSpec:
    """The registry entry for `name`; a UsageError naming every valid choice if there is none."""
    try:
        return MODELS[name]
    except KeyError:
        raise UsageError(f"unknown model {name!r} for --model; choose one of: {', '.join(MODEL_NAMES)}") from None


def trainable_parameters(model: nn.Module) -> int:
    """Elements in parameters that take gradients; a tied weight counts once, as DDP reduces it once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def gradient_bytes(model: nn.Module) -> int:
    """Bytes of the gradients DDP reduces each step (its parameters' own dtypes); a tied weight counts once."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
