"""The collectives of the raw sweep: one registry entry each, with nccl-tests' definitions.

An entry holds everything about its collective: the buffer layout for a requested size (nccl-tests'
getCollByteCount), the in-place aliasing, the torch call, S and the busbw factor (formulas in
harness.common.metrics), and the expected result of the check. The timing loop is elsewhere, once
(harness.raw_sweep).

Placements. nccl-tests' out-of-place passes separate send and receive buffers. Its in-place passes one
buffer: all_gather's input is the rank's slot of the output, reduce_scatter's output is the rank's slot of
the input. torch has both forms for all_gather and reduce_scatter, only the out-of-place form for
all_to_all and send_recv, and only the in-place form for all_reduce, broadcast and reduce. For those three,
out_of_place is emulated: copy the send buffer into the receive buffer, then make the in-place call. Rows
say so (emulated=true), and their time includes the copy. In-place all_to_all and send_recv are skipped:
a buffer that is sent and received at once has no defined result (nccl-tests times them but never checks).

Check data. Inputs are small integers that depend on the rank and the element, chosen per op, dtype and
world size so that every input and every reduced result is exactly representable (bf16 holds integers
up to 256 exactly). The expected result is then exact, and any differing element is wrong. The one
exception is avg over a world size that is not a power of two: n does not divide exactly in floating
point, and NCCL pre-multiplies by 1/n, so the result may differ from the true average by a few ulps. The
check allows n ulps there.

The emulation's copy goes in pieces of at most COPY_PIECE_BYTES. Captured in a CUDA graph, one device-to-
device copy of 512 MiB or more runs at about half the speed it has eagerly (H200, torch 2.11: 1 GiB took
792 us replayed against 508 us eager, while 256 MiB ran alike; pytorch/pytorch#191284 reports the same on
GB200, and that 256 MiB pieces restore the speed). Eagerly the pieces cost nothing measurable.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from harness.common.cli import UsageError
from harness.common.metrics import BUSBW_FACTORS

DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "int32": torch.int32,
    "int64": torch.int64,
}
DTYPE_ALIASES = {"float": "float32", "fp32": "float32", "half": "float16", "fp16": "float16"}
DTYPE_ALIASES |= {"bf16": "bfloat16", "double": "float64", "fp64": "float64", "int": "int32"}
# nccl-tests' names for its `type` column.
NCCL_TESTS_TYPE_NAMES = {"float32": "float", "float16": "half", "float64": "double"}

REDUCE_OPS = {
    "sum": dist.ReduceOp.SUM,
    "prod": dist.ReduceOp.PRODUCT,
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
    "avg": dist.ReduceOp.AVG,
}

# Every integer from 0 up to this is exact in the dtype (floats: 2^(mantissa bits + 1)).
EXACT_INT_LIMIT = {
    torch.float16: 2**11,
    torch.bfloat16: 2**8,
    torch.float32: 2**24,
    torch.float64: 2**53,
    torch.int8: 2**7 - 1,
    torch.uint8: 2**8 - 1,
    torch.int32: 2**31 - 1,
    torch.int64: 2**63 - 1,
}
# The largest power of two the dtype holds (fp16's largest finite value is 65504), capped so int64 holds it.
MAX_DOUBLINGS = {torch.float16: 15, torch.int8: 6, torch.uint8: 7, torch.int32: 30}
MAX_DOUBLINGS_DEFAULT = 62

# Inputs and checks are built in chunks of this many elements, so a 1 GiB buffer needs no 8 GiB of int64.
CHUNK = 1 << 24
COPY_PIECE_BYTES = 256 << 20  # largest piece of the out-of-place emulation's copy (see the module docstring)


@dataclass(frozen=True)
class Layout:
    """One call's element counts, as nccl-tests' getCollByteCount gives them for a requested size."""

    send_numel: int
    recv_numel: int
    count: int  # nccl-tests' `count` column: the count passed to the call (per rank for gather/scatter)
    element_size: int

    @property
    def size_bytes(self) -> int:
        """S: the bytes of the collective, nccl-tests' `size` column (the larger of send and receive)."""
        return max(self.send_numel, self.recv_numel) * self.element_size


@dataclass
class Buffers:
    send: torch.Tensor
    recv: torch.Tensor  # a view of send (or send of recv) in place
    emulated: bool  # out of place by copying send into recv, then the in-place call


@dataclass(frozen=True)
class CallArgs:
    """What a call needs beyond its buffers."""

    rank: int
    world_size: int
    op: str | None  # a REDUCE_OPS name for reductions, None otherwise
    root: int


def _same(count: int, n: int) -> tuple[int, int, int]:
    return count, count, count


def _gather(count: int, n: int) -> tuple[int, int, int]:
    per = count // n
    return per, per * n, per


def _scatter(count: int, n: int) -> tuple[int, int, int]:
    per = count // n
    return per * n, per, per


def _exchange(count: int, n: int) -> tuple[int, int, int]:
    per = count // n
    return per * n, per * n, per


# ---- check data -------------------------------------------------------------------------------------


def input_values(rank, idx: torch.Tensor, n: int, op: str | None, dtype: torch.dtype) -> torch.Tensor:
    """Element `idx` of rank `rank`'s input (int64; `rank` may be a tensor). Exact in dtype once reduced."""
    if op is None:  # data movement: any small positive integers that differ between ranks
        return 1 + (idx + 3 * rank) % 13
    if op in ("sum", "avg"):
        k = min(8, EXACT_INT_LIMIT[dtype] // n)  # n ranks of values up to k sum to at most the limit
        if k >= 2:
            return 1 + (idx + rank) % k
        return (idx % n == rank).long()  # beyond the limit: one rank contributes 1, the rest 0
    if op == "prod":
        # Every m-th rank gives a 2, so at most ceil(n/m) twos multiply: within the dtype's doublings.
        m = max(2, -(-n // MAX_DOUBLINGS.get(dtype, MAX_DOUBLINGS_DEFAULT)))
        return 1 + ((idx + rank) % m == 0).long()
    return 1 + (5 * idx + 3 * rank) % 11  # max, min


def reduced_values(idx: torch.Tensor, n: int, op: str, dtype: torch.dtype) -> torch.Tensor:
    """The reduction over all n ranks of input_values (int64; the sum for avg, divided at comparison)."""
    acc = input_values(0, idx, n, op, dtype)
    for rank in range(1, n):
        value = input_values(rank, idx, n, op, dtype)
        if op in ("sum", "avg"):
            acc += value
        elif op == "prod":
            acc *= value
        elif op == "max":
            acc = torch.maximum(acc, value)
        else:
            acc = torch.minimum(acc, value)
    return acc


def _expect_all_reduce(pos, lay, a: CallArgs, dtype):
    return reduced_values(pos, a.world_size, a.op, dtype)


def _expect_all_gather(pos, lay, a: CallArgs, dtype):
    per = max(lay.send_numel, 1)
    return input_values(pos // per, pos % per, a.world_size, None, dtype)


def _expect_reduce_scatter(pos, lay, a: CallArgs, dtype):
    return reduced_values(a.rank * lay.recv_numel + pos, a.world_size, a.op, dtype)


def _expect_all_to_all(pos, lay, a: CallArgs, dtype):
    per = max(lay.count, 1)
    return input_values(pos // per, a.rank * per + pos % per, a.world_size, None, dtype)


def _expect_broadcast(pos, lay, a: CallArgs, dtype):
    return input_values(a.root, pos, a.world_size, None, dtype)


def _expect_reduce(pos, lay, a: CallArgs, dtype):
    return reduced_values(pos, a.world_size, a.op, dtype) if a.rank == a.root else None


def _expect_send_recv(pos, lay, a: CallArgs, dtype):
    return input_values((a.rank - 1) % a.world_size, pos, a.world_size, None, dtype)


# ---- calls --------------------------------------------------------------------------------------------


def copy_in_pieces(dst: torch.Tensor, src: torch.Tensor) -> None:
    """dst.copy_(src) for 1-D tensors, in pieces of at most COPY_PIECE_BYTES."""
    piece = max(1, COPY_PIECE_BYTES // src.element_size())
    if src.numel() <= piece:
        dst.copy_(src)
        return
    for start in range(0, src.numel(), piece):
        dst[start : start + piece].copy_(src[start : start + piece])


# torch 2.14 renamed the tensor forms (the old names warn); torch 2.11 has only the old ones.
_all_gather_tensor = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_tensor = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def _run_all_reduce(b: Buffers, a: CallArgs) -> None:
    if b.emulated:
        copy_in_pieces(b.recv, b.send)
    dist.all_reduce(b.recv, op=REDUCE_OPS[a.op])


def _run_all_gather(b: Buffers, a: CallArgs) -> None:
    _all_gather_tensor(b.recv, b.send)


def _run_reduce_scatter(b: Buffers, a: CallArgs) -> None:
    _reduce_scatter_tensor(b.recv, b.send, op=REDUCE_OPS[a.op])


def _run_all_to_all(b: Buffers, a: CallArgs) -> None:
    dist.all_to_all_single(b.recv, b.send)


def _run_broadcast(b: Buffers, a: CallArgs) -> None:
    if b.emulated:
        copy_in_pieces(b.recv, b.send)
    dist.broadcast(b.recv, src=a.root)


def _run_reduce(b: Buffers, a: CallArgs) -> None:
    if b.emulated:
        copy_in_pieces(b.recv, b.send)
    dist.reduce(b.recv, dst=a.root, op=REDUCE_OPS[a.op])


def _run_send_recv(b: Buffers, a: CallArgs) -> None:
    """A ring, as nccl-tests' sendrecv: send to rank+1, receive from rank-1, in one group."""
    n = a.world_size
    ops = [
        dist.P2POp(dist.isend, b.send, (a.rank + 1) % n),
        dist.P2POp(dist.irecv, b.recv, (a.rank - 1) % n),
    ]
    for work in dist.batch_isend_irecv(ops):
        work.wait()


# ---- the registry -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Collective:
    name: str
    layout: Callable[[int, int], tuple[int, int, int]]  # (count, n) -> (send, recv, call count)
    run: Callable[[Buffers, CallArgs], None]
    expected: Callable  # (recv positions, Layout, CallArgs, dtype) -> int64 tensor, or None: not checked
    busbw_factor: Callable[[int], float]  # from harness.common.metrics, the one home of the formulas
    reduces: bool  # takes --op
    rooted: bool  # takes --root
    in_place: str | None  # "same" buffer, "send_in_recv", "recv_in_send"; None: no in-place form
    out_of_place_copy: bool  # out of place is emulated by a copy and the in-place call


NO_IN_PLACE = "no defined result when one buffer is sent and received at once (nccl-tests does not check it)"

COLLECTIVES: dict[str, Collective] = {
    "all_reduce": Collective(
        "all_reduce", _same, _run_all_reduce, _expect_all_reduce, BUSBW_FACTORS["all_reduce"],
        reduces=True, rooted=False, in_place="same", out_of_place_copy=True,
    ),
    "all_gather": Collective(
        "all_gather", _gather, _run_all_gather, _expect_all_gather, BUSBW_FACTORS["all_gather"],
        reduces=False, rooted=False, in_place="send_in_recv", out_of_place_copy=False,
    ),
    "reduce_scatter": Collective(
        "reduce_scatter", _scatter, _run_reduce_scatter, _expect_reduce_scatter,
        BUSBW_FACTORS["reduce_scatter"], reduces=True, rooted=False, in_place="recv_in_send",
        out_of_place_copy=False,
    ),
    "all_to_all": Collective(
        "all_to_all", _exchange, _run_all_to_all, _expect_all_to_all, BUSBW_FACTORS["all_to_all"],
        reduces=False, rooted=False, in_place=None, out_of_place_copy=False,
    ),
    "broadcast": Collective(
        "broadcast", _same, _run_broadcast, _expect_broadcast, BUSBW_FACTORS["broadcast"],
        reduces=False, rooted=True, in_place="same", out_of_place_copy=True,
    ),
    "reduce": Collective(
        "reduce", _same, _run_reduce, _expect_reduce, BUSBW_FACTORS["reduce"],
        reduces=True, rooted=True, in_place="same", out_of_place_copy=True,
    ),
    "send_recv": Collective(
        "send_recv", _same, _run_send_recv, _expect_send_recv, BUSBW_FACTORS["send_recv"],
        reduces=False, rooted=False, in_place=None, out_of_place_copy=False,
    ),
}  # fmt: skip

PLACEMENTS = ("out_of_place", "in_place")  # nccl-tests' column order


def layout(name: str, size_bytes: int, dtype: torch.dtype, world_size: int) -> Layout:
    """nccl-tests' counts for a requested size: whole elements, rounded down to a multiple of n where split."""
    element_size = torch.empty((), dtype=dtype).element_size()
    send, recv, count = COLLECTIVES[name].layout(size_bytes // element_size, world_size)
    return Layout(send, recv, count, element_size)


def skip_reason(name: str, placement: str, backend: str, world_size: int) -> str | None:
    """Why a (collective, placement) cannot be measured here, or None where it can."""
    coll = COLLECTIVES[name]
    if placement == "in_place" and coll.in_place is None:
        return f"in-place {name}: {NO_IN_PLACE}"
    if name == "send_recv" and world_size == 1 and backend == "gloo":
        return "gloo cannot send to its own rank (world size 1)"
    return None


def make_buffers(
    name: str, lay: Layout, placement: str, rank: int, dtype: torch.dtype, device: torch.device
) -> Buffers:
    """Send and receive buffers, aliased for in place as nccl-tests aliases them; filled with rank's input."""
    coll = COLLECTIVES[name]
    if placement == "out_of_place":
        send = torch.empty(lay.send_numel, dtype=dtype, device=device)
        recv = torch.empty(lay.recv_numel, dtype=dtype, device=device)
        return Buffers(send, recv, emulated=coll.out_of_place_copy)
    if coll.in_place == "same":
        send = recv = torch.empty(lay.recv_numel, dtype=dtype, device=device)
    elif coll.in_place == "send_in_recv":
        recv = torch.empty(lay.recv_numel, dtype=dtype, device=device)
        send = recv.narrow(0, rank * lay.send_numel, lay.send_numel)
    elif coll.in_place == "recv_in_send":
        send = torch.empty(lay.send_numel, dtype=dtype, device=device)
        recv = send.narrow(0, rank * lay.recv_numel, lay.recv_numel)
    else:
        raise ValueError(f"{name} has no in-place form")
    return Buffers(send, recv, emulated=False)


def fill_input(name: str, bufs: Buffers, args: CallArgs) -> None:
    """Zero the receive buffer (as nccl-tests does), then write this rank's input into the send buffer."""
    op = args.op if COLLECTIVES[name].reduces else None
    bufs.recv.zero_()
    send = bufs.send
    for start in range(0, send.numel(), CHUNK):
        idx = torch.arange(start, min(start + CHUNK, send.numel()), device=send.device)
        send[start : start + idx.numel()].copy_(input_values(args.rank, idx, args.world_size, op, send.dtype))


def count_wrong(name: str, bufs: Buffers, lay: Layout, args: CallArgs) -> int:
    """Elements of this rank's result that differ from the exact expected result (0 where none is defined)."""
    recv, coll = bufs.recv, COLLECTIVES[name]
    n, dtype, wrong = args.world_size, recv.dtype, 0
    for start in range(0, recv.numel(), CHUNK):
        pos = torch.arange(start, min(start + CHUNK, recv.numel()), device=recv.device)
        expected = coll.expected(pos, lay, args, dtype)
        if expected is None:
            return 0
        got = recv[start : start + pos.numel()]
        wrong += _differing(got, expected, args.op if coll.reduces else None, n)
    return wrong


def _differing(got: torch.Tensor, expected: torch.Tensor, op: str | None, n: int) -> int:
    if not got.is_floating_point():
        return int((got.long() != expected).sum())
    want = expected.double()
    if op == "avg":
        want = want / n
        if n & (n - 1):  # not a power of two: 1/n is inexact, allow n ulps
            tolerance = n * torch.finfo(got.dtype).eps * want.abs()
            return int(((got.double() - want).abs() > tolerance).sum())
    return int((got.double() != want).sum())


def parse_collectives(text: str) -> list[str]:
    """`all`, or a comma list; nccl-tests' spellings (allreduce, alltoall, sendrecv) are accepted."""
    if text.strip().lower() == "all":
        return list(COLLECTIVES)
    by_key = {name.replace("_", ""): name for name in COLLECTIVES}
    chosen = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name = by_key.get(part.lower().replace("_", "").replace("-", ""))
        if name is None:
            raise UsageError(f"--collectives: unknown collective {part!r}; choose from {', '.join(COLLECTIVES)}, all")
        if name not in chosen:
            chosen.append(name)
    if not chosen:
        raise UsageError("--collectives: empty list")
    return chosen


def parse_dtype(text: str) -> str:
    """A DTYPES name from a name or alias (float, half, bf16, ...)."""
    name = DTYPE_ALIASES.get(text.lower(), text.lower())
    if name not in DTYPES:
        raise UsageError(f"--dtype: unknown dtype {text!r}; choose from {', '.join(DTYPES)}")
    return name


def nccl_tests_type_name(dtype_name: str) -> str:
    return NCCL_TESTS_TYPE_NAMES.get(dtype_name, dtype_name)
