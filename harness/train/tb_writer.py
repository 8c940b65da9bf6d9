"""Writes Summary protos through a SummaryWriter: one training step's scalars and bucket-time histogram as a
single event, a PNG as an image, Markdown as text, or any ready-made Summary.

`SummaryWriter.add_scalar` builds one event per scalar: about 40 µs each, over a millisecond a step for
the ~30 tags of a 5-bucket model, paid on the training loop's thread. One Summary holding every value of
the step costs a tenth of that, and TensorBoard reads it exactly as it reads separate events.

Every event record carries two CRC-32C checksums, which TensorBoard computes in pure Python where TensorFlow is
not installed: about 0.3 ms per KiB, on the event writer's thread but holding the GIL, so a 2 KiB step event
cost the training loop about 0.6 ms a step. `use_fast_event_checksums` hands them to google-crc32c's C code
(0.3 µs for 2 KiB); the bytes written are the same.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from tensorboard.compat.proto.summary_pb2 import HistogramProto, Summary
from tensorboard.compat.proto.tensor_pb2 import TensorProto
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
from tensorboard.compat.proto.types_pb2 import DT_STRING
from tensorboard.plugins.text import metadata as text_metadata
from tensorboard.summary.writer import record_writer


def histogram_proto(values: Sequence[float]) -> HistogramProto:
    """An exact histogram of a few values: one bucket per distinct value (right edges, as TensorBoard reads)."""
    ordered = sorted(values)
    limits: list[float] = []
    counts: list[float] = []
    for v in ordered:
        if limits and v == limits[-1]:
            counts[-1] += 1
        else:
            limits.append(v)
            counts.append(1)
    return HistogramProto(
        min=ordered[0],
        max=ordered[-1],
        num=len(ordered),
        sum=sum(ordered),
        sum_squares=sum(v * v for v in ordered),
        bucket_limit=limits,
        bucket=counts,
    )


def write_step(
    writer: Any, step: int, scalars: Mapping[str, float], histograms: Mapping[str, Sequence[float]] | None = None
) -> None:
    """Write `scalars` (non-finite values skipped) and `histograms` at `step` through a SummaryWriter."""
    if math.isfinite(sum(scalars.values())):  # every value is finite (a NaN or an infinity makes the sum one)
        values = [Summary.Value(tag=tag, simple_value=float(v)) for tag, v in scalars.items()]
    else:
        values = [Summary.Value(tag=tag, simple_value=float(v)) for tag, v in scalars.items() if math.isfinite(v)]
    for tag, data in (histograms or {}).items():
        if data:
            values.append(Summary.Value(tag=tag, histo=histogram_proto(data)))
    write_summary(writer, Summary(value=values), step)


def write_png(writer: Any, tag: str, png: bytes, step: int) -> None:
    """A PNG as it is, under `tag` in the Images tab (its width and height read from its header)."""
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    image = Summary.Image(height=height, width=width, colorspace=4, encoded_image_string=png)  # 4: RGBA
    write_summary(writer, Summary(value=[Summary.Value(tag=tag, image=image)]), step)


def write_text(writer: Any, tag: str, markdown: str, step: int) -> None:
    """Markdown under exactly `tag` in the TEXT tab (SummaryWriter.add_text would append "/text_summary")."""
    tensor = TensorProto(dtype=DT_STRING, string_val=[markdown.encode()], tensor_shape=TensorShapeProto())
    meta = text_metadata.create_summary_metadata(display_name=tag, description="")
    write_summary(writer, Summary(value=[Summary.Value(tag=tag, metadata=meta, tensor=tensor)]), step)


def write_summary(writer: Any, summary: Summary, step: int) -> None:
    """Write `summary` at `step`. SummaryWriter's file writer is where add_scalar itself ends up; going there
    directly skips the per-value event construction."""
    writer._get_file_writer().add_summary(summary, global_step=step)


def use_fast_event_checksums() -> bool:
    """Have TensorBoard's event writer (torch's SummaryWriter, and so Lightning's logger) checksum its records with
    google-crc32c's C code. False, and nothing changed, where that package or its C build is missing."""
    try:
        import google_crc32c
    except ImportError:
        return False
    if google_crc32c.implementation != "c":  # its pure-Python fallback is no faster than TensorBoard's
        return False

    def masked_crc32c(data: bytes) -> int:
        # TFRecord's masking of the CRC (tensorboard.compat.tensorflow_stub.pywrap_tensorflow.masked_crc32c).
        crc = google_crc32c.value(data)
        return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF

    record_writer.masked_crc32c = masked_crc32c
    return True
