"""Tests of the model registry: entries build at their known sizes, tiny ones train, batches are seeded."""

from __future__ import annotations

import math

import pytest
import torch

from harness.common.cli import UsageError
from models import MODEL_NAMES, MODELS, get_model_spec, trainable_parameters
from models.gpt import GPT, GPT_TINY

# Published parameter counts (torchvision's docs; GPT-2 with the lm_head tied to the token embedding).
EXPECTED_PARAMETERS = {
    "resnet18": 11_689_512,
    "resnet50": 25_557_032,
    "resnet101": 44_549_160,
    "resnet152": 60_192_808,
    "convnext_tiny": 28_589_128,
    "vit_b_16": 86_567_656,
    "gpt2": 124_439_808,
    "gpt2-medium": 354_823_168,
}
TINY_NAMES = ["resnet_tiny", "vit_tiny", "gpt_tiny"]
# Synthetic models with a designed timeline, tested on their own (tests/test_sleep_chain.py).
SYNTHETIC_NAMES = ["sleep_chain"]
TINY_PARAMETER_LIMIT = 1_000_000  # keeps forward+backward on two CPU cores in the tens of milliseconds


def test_registry_is_a_dict_keyed_by_each_specs_name():
    assert isinstance(MODELS, dict)
    assert sorted(MODELS) == MODEL_NAMES
    assert set(EXPECTED_PARAMETERS) | set(TINY_NAMES) | set(SYNTHETIC_NAMES) == set(MODEL_NAMES)
    for name, spec in MODELS.items():
        assert spec.name == name
        assert get_model_spec(name) is spec


@pytest.mark.parametrize("name", sorted(EXPECTED_PARAMETERS))
def test_full_size_model_builds_with_published_parameter_count(name):
    model = get_model_spec(name).build()
    assert trainable_parameters(model) == EXPECTED_PARAMETERS[name]


@pytest.mark.parametrize("name", TINY_NAMES)
def test_tiny_model_is_tiny(name):
    assert 0 < trainable_parameters(get_model_spec(name).build()) < TINY_PARAMETER_LIMIT


def test_defaults_and_kinds():
    for name in ["resnet18", "resnet50", "resnet101", "resnet152", "convnext_tiny", "vit_b_16"]:
        spec = get_model_spec(name)
        assert (spec.kind, spec.sample_unit, spec.default_image_size, spec.num_classes) == (
            "image",
            "image",
            224,
            1000,
        )
    for name in ["resnet_tiny", "vit_tiny"]:
        assert get_model_spec(name).default_image_size == 32
    for name in ["gpt2", "gpt2-medium"]:
        spec = get_model_spec(name)
        assert (spec.kind, spec.sample_unit, spec.num_classes) == ("token", "token", 50257)
        assert spec.max_seq_len == 1024 and spec.default_seq_len == 1024
    tiny = get_model_spec("gpt_tiny")
    assert (tiny.num_classes, tiny.max_seq_len, tiny.default_seq_len) == (256, 64, 64)


@pytest.mark.parametrize("name", TINY_NAMES)
def test_tiny_model_forward_backward_gives_finite_loss_and_every_gradient(name):
    torch.manual_seed(0)
    spec = get_model_spec(name)
    model = spec.build()
    loss = spec.loss(model, spec.make_batch(4, "cpu", 1234))
    assert loss.dim() == 0
    assert torch.isfinite(loss)
    loss.backward()
    # DDP's default (find_unused_parameters=False) needs a gradient for every parameter, every step.
    missing = [n for n, p in model.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    assert missing == []


def test_gpt_loss_starts_near_uniform():
    # Logits start near zero with GPT-2's init, so the loss is near ln(vocab): proof the loss is over the
    # right axis and the flattening lines targets up with their positions.
    torch.manual_seed(0)
    spec = get_model_spec("gpt_tiny")
    model = spec.build()
    with torch.no_grad():
        loss = spec.loss(model, spec.make_batch(4, "cpu", 0))
    assert abs(loss.item() - math.log(256)) < 0.1


def test_gpt_lm_head_is_tied_to_token_embedding():
    model = GPT(GPT_TINY)
    assert model.lm_head.weight is model.wte.weight
    names = [n for n, _ in model.named_parameters()]
    assert "wte.weight" in names and "lm_head.weight" not in names  # counted and reduced once


def test_gpt_is_causal():
    # Changing the last token must leave every earlier position's logits untouched.
    torch.manual_seed(0)
    model = GPT(GPT_TINY).eval()
    tokens = torch.randint(0, GPT_TINY.vocab_size, (1, 16))
    changed = tokens.clone()
    changed[0, -1] = (tokens[0, -1] + 1) % GPT_TINY.vocab_size
    with torch.no_grad():
        a, b = model(tokens), model(changed)
    assert torch.allclose(a[:, :-1], b[:, :-1], atol=1e-6)
    assert not torch.allclose(a[:, -1], b[:, -1])


def test_resnet18_forward_at_small_images():
    spec = get_model_spec("resnet18")
    model = spec.build(image_size=64)
    with torch.no_grad():
        loss = spec.loss(model, spec.make_batch(2, "cpu", 0, image_size=64))
    assert torch.isfinite(loss)


def test_image_batch_shapes_dtypes_and_label_range():
    spec = get_model_spec("resnet50")
    images, labels = spec.make_batch(3, "cpu", 7, image_size=48)
    assert images.shape == (3, 3, 48, 48) and images.dtype == torch.float32
    assert labels.shape == (3,) and labels.dtype == torch.int64
    labels = get_model_spec("resnet_tiny").make_batch(256, "cpu", 7)[1]
    assert labels.min() >= 0 and labels.max() < 10
    images, _ = spec.make_batch(1, "cpu", 7)
    assert images.shape == (1, 3, 224, 224)  # the default size


def test_token_batch_shapes_dtypes_and_shifted_targets():
    spec = get_model_spec("gpt_tiny")
    inputs, targets = spec.make_batch(5, "cpu", 7, seq_len=16)
    assert inputs.shape == targets.shape == (5, 16)
    assert inputs.dtype == targets.dtype == torch.int64
    assert inputs.min() >= 0 and inputs.max() < 256 and targets.max() < 256
    assert torch.equal(inputs[:, 1:], targets[:, :-1])  # targets are the next tokens
    assert spec.make_batch(2, "cpu", 7)[0].shape == (2, 64)  # the default seq_len


@pytest.mark.parametrize("name", TINY_NAMES)
def test_batches_are_deterministic_per_seed_and_differ_across_seeds(name):
    spec = get_model_spec(name)
    first = spec.make_batch(4, "cpu", 100)
    again = spec.make_batch(4, "cpu", 100)
    other = spec.make_batch(4, "cpu", 101)  # the next rank's seed
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    assert not torch.equal(first[0], other[0])
    assert not torch.equal(first[1], other[1])


def test_generator_gives_successive_different_batches_reproducibly():
    spec = get_model_spec("gpt_tiny")
    gen_a, gen_b = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    a1, a2 = spec.make_batch(2, "cpu", gen_a)[0], spec.make_batch(2, "cpu", gen_a)[0]
    b1, b2 = spec.make_batch(2, "cpu", gen_b)[0], spec.make_batch(2, "cpu", gen_b)[0]
    assert not torch.equal(a1, a2)
    assert torch.equal(a1, b1) and torch.equal(a2, b2)


def test_samples_per_batch():
    assert get_model_spec("resnet50").samples_per_batch(32) == 32
    assert get_model_spec("resnet_tiny").samples_per_batch(8, seq_len=99) == 8  # seq_len means nothing here
    assert get_model_spec("gpt2").samples_per_batch(8, 512) == 8 * 512
    assert get_model_spec("gpt2").samples_per_batch(8) == 8 * 1024
    assert get_model_spec("gpt_tiny").samples_per_batch(3) == 3 * 64


def test_unknown_model_lists_every_valid_name():
    with pytest.raises(UsageError, match="unknown model 'foo' for --model") as info:
        get_model_spec("foo")
    message = str(info.value)
    assert "choose one of: " + ", ".join(MODEL_NAMES) in message


def test_seq_len_beyond_block_size_is_a_usage_error():
    spec = get_model_spec("gpt_tiny")
    for bad in (65, 0):
        with pytest.raises(UsageError, match=r"--seq-len .*1 to 64"):
            spec.make_batch(2, "cpu", 0, seq_len=bad)
    with pytest.raises(UsageError, match="--seq-len 2048"):
        get_model_spec("gpt2").samples_per_batch(1, seq_len=2048)


def test_gpt_forward_rejects_sequences_longer_than_block():
    with pytest.raises(ValueError, match="block_size"):
        GPT(GPT_TINY)(torch.zeros(1, 65, dtype=torch.int64))


def test_vit_image_size_must_fit_patches():
    tiny = get_model_spec("vit_tiny")
    with pytest.raises(UsageError, match=r"--image-size 36 .*multiple of .*8"):
        tiny.build(image_size=36)
    with pytest.raises(UsageError, match=r"--image-size 100 .*multiple of .*16"):
        get_model_spec("vit_b_16").make_batch(1, "cpu", 0, image_size=100)
    model = tiny.build(image_size=48)  # another size builds with a matching position embedding
    loss = tiny.loss(model, tiny.make_batch(2, "cpu", 0, image_size=48))
    assert torch.isfinite(loss)


def test_image_size_too_small_and_bad_batch_size_are_usage_errors():
    with pytest.raises(UsageError, match="--image-size 16"):
        get_model_spec("convnext_tiny").resolve_image_size(16)
    with pytest.raises(UsageError, match="--batch-size"):
        get_model_spec("resnet_tiny").make_batch(0, "cpu", 0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", TINY_NAMES)
def test_batches_on_cuda_are_on_device_and_deterministic(name):
    spec = get_model_spec(name)
    first, again = spec.make_batch(4, "cuda", 5), spec.make_batch(4, "cuda", 5)
    assert first[0].is_cuda and first[1].is_cuda
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    assert not torch.equal(first[0], spec.make_batch(4, "cuda", 6)[0])
    model = spec.build().cuda()
    assert torch.isfinite(spec.loss(model, first))
    # A CPU generator also works: drawn on the host, then moved.
    inputs, _ = spec.make_batch(2, "cuda", torch.Generator().manual_seed(0))
    assert inputs.is_cuda
