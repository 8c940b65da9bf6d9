"""harness.train.tb_writer's fast event checksums: the same CRC-32C as TensorBoard's own pure-Python code, and event
files that TensorBoard's reader (which checks every record's checksums with that code) reads back."""

from __future__ import annotations

import os
import random

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow
from tensorboard.summary.writer import record_writer
from torch.utils.tensorboard import SummaryWriter

from harness.train.tb_writer import use_fast_event_checksums, write_step


@pytest.fixture(scope="module")
def fast_checksums():
    original = record_writer.masked_crc32c
    assert use_fast_event_checksums(), "google-crc32c (requirements.txt) with its C build"
    yield record_writer.masked_crc32c
    record_writer.masked_crc32c = original


def test_the_checksum_is_tensorboards(fast_checksums):
    assert fast_checksums is not pywrap_tensorflow.masked_crc32c
    rng = random.Random(0)
    for length in [0, 1, 2, 3, 7, 8, 15, 16, 17, 255, 1024, 2048, 4099, *(rng.randrange(1, 70_000) for _ in range(20))]:
        data = os.urandom(length)
        assert fast_checksums(data) == pywrap_tensorflow.masked_crc32c(data), length


def test_tensorboards_reader_checks_and_reads_what_was_written(fast_checksums, tmp_path):
    writer = SummaryWriter(str(tmp_path))
    for step in range(50):
        write_step(writer, step, {f"comm/tag_{i:02d}": step + i / 100 for i in range(40)}, {"h": [1.0, 2.0, 2.0]})
    writer.close()
    (path,) = tmp_path.glob("events.out.tfevents.*")
    assert read_records(path) == 51  # the file's version record and the 50 steps
    events = EventAccumulator(str(path))
    events.Reload()
    assert [e.value for e in events.Scalars("comm/tag_39")] == pytest.approx([s + 0.39 for s in range(50)])
    # ...and the reader does check: one flipped byte in the last record's data is a DataLossError.
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(errors.DataLossError):
        read_records(path)


def read_records(path) -> int:
    """How many records TensorBoard's reader reads, each after checking both of its checksums with TensorBoard's
    own CRC-32C code (it raises DataLossError on a mismatch)."""
    reader = pywrap_tensorflow.PyRecordReader_New(str(path))
    count = 0
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            return count
        count += 1
