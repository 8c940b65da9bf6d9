"""The models the harness trains: real architectures by name, each with synthetic batches and a loss.

spec = get_model_spec("resnet50")
model = spec.build()
batch = spec.make_batch(batch_size, device, base_seed + rank)
spec.loss(model, batch).backward()
"""

from models.registry import MODEL_NAMES, MODELS, ModelSpec, get_model_spec, gradient_bytes, trainable_parameters

__all__ = ["MODELS", "MODEL_NAMES", "ModelSpec", "get_model_spec", "gradient_bytes", "trainable_parameters"]
