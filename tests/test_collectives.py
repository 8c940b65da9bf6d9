"""The collective registry: nccl-tests' S and factors (pure), exact check data (pure), and every collective
giving the exact expected result in real gloo processes, in place and out of place."""

from __future__ import annotations

import json

import pytest
import torch
import torch.distributed as dist

from harness.common.cli import UsageError
from harness.common.local_launch import spawn_local
from harness.common.metrics import algbw_gbps, busbw_gbps
from harness.sweep import collectives
from harness.sweep.collectives import (
    COLLECTIVES,
    DTYPES,
    EXACT_INT_LIMIT,
    CallArgs,
    count_wrong,
    fill_input,
    input_values,
    layout,
    make_buffers,
    parse_collectives,
    parse_dtype,
    reduced_values,
    skip_reason,
)

# nccl-tests, written out again from its sources (src/<collective>.cu): getCollByteCount(count, nranks)
# gives (sendcount, recvcount, paramcount); the printed size is max(send, recv) × wordSize, the count
# column is paramcount; getBw's baseBw is paramcount × wordSize × (nranks for gather, scatter and
# alltoall) / sec, and busBw = baseBw × factor.
NCCL_TESTS = {
    "all_reduce": (lambda c, n: (c, c, c), 1, lambda n: 2 * (n - 1) / n),
    "all_gather": (lambda c, n: (c // n, (c // n) * n, c // n), "n", lambda n: (n - 1) / n),
    "reduce_scatter": (lambda c, n: ((c // n) * n, c // n, c // n), "n", lambda n: (n - 1) / n),
    "all_to_all": (lambda c, n: ((c // n) * n, (c // n) * n, c // n), "n", lambda n: (n - 1) / n),
    "broadcast": (lambda c, n: (c, c, c), 1, lambda n: 1.0),
    "reduce": (lambda c, n: (c, c, c), 1, lambda n: 1.0),
    "send_recv": (lambda c, n: (c, c, c), 1, lambda n: 1.0),
}


def test_registry_is_the_seven_collectives():
    assert set(COLLECTIVES) == set(NCCL_TESTS)


@pytest.mark.parametrize("name", list(NCCL_TESTS))
@pytest.mark.parametrize("n", [2, 3, 4, 8, 24])
@pytest.mark.parametrize("size_bytes", [8, 1000, 4096, 1 << 20, (1 << 20) + 12])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int8, torch.float64])
def test_size_count_and_bandwidth_match_nccl_tests(name, n, size_bytes, dtype):
    byte_count, scale, factor = NCCL_TESTS[name]
    word = torch.empty((), dtype=dtype).element_size()
    send, recv, param = byte_count(size_bytes // word, n)
    lay = layout(name, size_bytes, dtype, n)
    assert (lay.send_numel, lay.recv_numel, lay.count) == (send, recv, param)
    assert lay.size_bytes == max(send, recv) * word
    seconds = 1e-4
    base_bw = param * word * (n if scale == "n" else 1) / 1e9 / seconds
    assert algbw_gbps(lay.size_bytes, seconds) == pytest.approx(base_bw, rel=1e-12, abs=0)
    assert busbw_gbps(name, lay.size_bytes, seconds, n) == pytest.approx(base_bw * factor(n), rel=1e-12, abs=0)
    assert COLLECTIVES[name].busbw_factor(n) == pytest.approx(factor(n))


@pytest.mark.parametrize("name", list(NCCL_TESTS))
def test_world_size_one_busbw_is_zero(name):
    # docs/METRICS.md: with one rank busbw is 0 by definition (nccl-tests would print algbw × 1 for broadcast).
    assert busbw_gbps(name, 1 << 20, 1e-3, 1) == 0.0


OPS = ["sum", "prod", "max", "min", "avg"]


DTYPE_OPS = [(d, op) for d in DTYPES for op in (None, *OPS) if op != "avg" or DTYPES[d].is_floating_point]


@pytest.mark.parametrize(("dtype_name", "op"), DTYPE_OPS)
@pytest.mark.parametrize("n", [1, 2, 3, 8, 64, 300])
def test_check_data_is_exact_in_the_dtype(dtype_name, op, n):
    dtype = DTYPES[dtype_name]
    idx = torch.arange(0, 3000)
    limit = EXACT_INT_LIMIT[dtype]
    values = [input_values(rank, idx, n, op, dtype) for rank in range(n)]
    for value in values:
        assert int(value.min()) >= 0 and int(value.max()) <= limit
        assert torch.equal(value.to(dtype).long(), value)  # every input is exact in the dtype
    if n > 1 and n * 8 <= limit:
        assert not all(torch.equal(values[0], v) for v in values[1:])  # inputs depend on the rank
    if op is not None:
        result = reduced_values(idx, n, op, dtype)
        assert int(result.max()) <= (2 ** (126 if dtype.is_floating_point else 62))
        assert torch.equal(result.to(dtype).to(torch.float64), result.double())  # the result is exact too


def _supported(name: str) -> list[str]:
    return [p for p in ("out_of_place", "in_place") if skip_reason(name, p, "gloo", 3) is None]


@pytest.mark.parametrize("name", list(COLLECTIVES))
def test_check_catches_a_call_that_does_nothing_and_one_wrong_element(name):
    n, dtype, coll = 3, torch.float32, COLLECTIVES[name]
    rank = 0 if name == "reduce" else 1  # reduce's result is defined on its root only
    args = CallArgs(rank, n, "sum" if coll.reduces else None, root=0)
    lay = layout(name, 4 * 1001, dtype, n)
    for placement in _supported(name):
        bufs = make_buffers(name, lay, placement, rank, dtype, torch.device("cpu"))
        fill_input(name, bufs, args)
        assert count_wrong(name, bufs, lay, args) > 0, placement  # no call: the check fails
        pos = torch.arange(bufs.recv.numel())
        bufs.recv.copy_(coll.expected(pos, lay, args, dtype).to(dtype))
        assert count_wrong(name, bufs, lay, args) == 0, placement
        bufs.recv[-1] += 1
        assert count_wrong(name, bufs, lay, args) == 1, placement


def test_avg_allows_rounding_only_where_n_is_not_a_power_of_two():
    lay = layout("all_reduce", 4 * 64, torch.float32, 2)
    for n, off_by_ulp_ok in ((2, False), (3, True)):
        args = CallArgs(0, n, "avg", root=0)
        bufs = make_buffers("all_reduce", lay, "in_place", 0, torch.float32, torch.device("cpu"))
        exact = reduced_values(torch.arange(64), n, "avg", torch.float32).double() / n
        bufs.recv.copy_(exact.float())
        bufs.recv[0] = torch.nextafter(bufs.recv[0], torch.tensor(1e9))
        assert (count_wrong("all_reduce", bufs, lay, args) == 0) is off_by_ulp_ok


@pytest.mark.parametrize("numel", [1, 7, 8, 9, 64])
def test_emulated_copy_in_pieces_is_exact(numel, monkeypatch):
    monkeypatch.setattr(collectives, "COPY_PIECE_BYTES", 32)  # 8 float32 elements a piece
    src, dst = torch.arange(numel, dtype=torch.float32), torch.zeros(numel)
    collectives.copy_in_pieces(dst, src)
    assert torch.equal(dst, src)


def test_parse_names():
    assert parse_collectives("all") == list(COLLECTIVES)
    assert parse_collectives("allreduce,send-recv,AllToAll,all_reduce") == ["all_reduce", "send_recv", "all_to_all"]
    assert parse_dtype("half") == "float16" and parse_dtype("bf16") == "bfloat16" and parse_dtype("float") == "float32"
    with pytest.raises(UsageError, match="unknown collective 'allreduse'"):
        parse_collectives("allreduse")
    with pytest.raises(UsageError, match="--dtype"):
        parse_dtype("float8")


# ---- real processes ---------------------------------------------------------------------------------------

ELEMENTS = 1001  # not a multiple of 2 or 3: exercises nccl-tests' rounding down


def _cases() -> list[tuple[str, str, str, str]]:
    cases = []
    for name, coll in COLLECTIVES.items():
        for placement in ("out_of_place", "in_place"):
            for dtype in ("float32", "int32"):
                cases.append((name, placement, dtype, "sum"))
            if coll.reduces:
                cases += [(name, placement, d, op) for d in ("float32", "int32") for op in ("prod", "max", "min")]
                cases.append((name, placement, "float32", "avg"))
    cases += [("all_reduce", "in_place", d, "sum") for d in ("bfloat16", "float16", "int8", "uint8", "int64")]
    cases += [("all_reduce", "out_of_place", "bfloat16", op) for op in ("prod", "max", "avg")]
    cases += [("reduce_scatter", "in_place", "float64", "sum"), ("all_gather", "in_place", "bfloat16", "sum")]
    return cases


def _run_cases(out_path: str, cases: list) -> None:
    rank, n = dist.get_rank(), dist.get_world_size()
    results = []
    for name, placement, dtype_name, op in cases:
        result = {"case": [name, placement, dtype_name, op], "skipped": skip_reason(name, placement, "gloo", n)}
        if result["skipped"] is None:
            coll, dtype = COLLECTIVES[name], DTYPES[dtype_name]
            lay = layout(name, ELEMENTS * torch.empty((), dtype=dtype).element_size(), dtype, n)
            bufs = make_buffers(name, lay, placement, rank, dtype, torch.device("cpu"))
            args = CallArgs(rank, n, op if coll.reduces else None, root=n - 1)  # a root other than 0
            fill_input(name, bufs, args)
            coll.run(bufs, args)
            wrong = torch.tensor([count_wrong(name, bufs, lay, args)])
            dist.all_reduce(wrong)
            result |= {"wrong": int(wrong), "recv_numel": bufs.recv.numel()}
        results.append(result)
    if rank == 0:
        with open(out_path, "w") as out:
            json.dump(results, out)


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [2, 3])
def test_every_collective_is_exact_in_real_gloo_processes(tmp_path, world_size):
    out = tmp_path / "results.json"
    assert spawn_local(_run_cases, world_size, (str(out), _cases()), backend="gloo") == 0
    results = json.loads(out.read_text())
    assert [r["case"] for r in results] == [list(c) for c in _cases()]
    skipped = {tuple(r["case"][:2]) for r in results if r["skipped"]}
    assert skipped == {("all_to_all", "in_place"), ("send_recv", "in_place")}
    for result in results:
        if not result["skipped"]:
            assert result["wrong"] == 0, result
            assert result["recv_numel"] > 0, result
