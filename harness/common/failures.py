"""How a rank stops early, alike for training and the sweep: signals, lost outputs, and the one line that says why.

- SIGINT, SIGTERM and SIGHUP are caught by a SignalLatch: while armed the first one raises Interrupted in the
  main thread; otherwise signals are only remembered, so the cleanup they would cut short (reporting, flushing,
  destroying the process group) still runs, and the rank exits 128 + the signal. A signal that was ignored
  when the process started (`nohup` ignores SIGHUP) stays ignored.
- An output that can no longer be written (a full disk, a removed directory, a closed pipe) raises
  OutputFailed, naming the output. A rank that stops for such a reason of its own tells the others
  (`announce_stop`), so a peer whose collective then fails says why (`announced_stop`) instead of naming
  the collective it happened to be in.
- A failure is reported as one line on stderr, and under torchrun also in the error file that its failure
  report reads (`report_failure`). `failure_text` is an error's type and first line, without the source
  paths and wrappers that torch and gloo add.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import threading

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(BaseException):
    """SIGINT, SIGTERM or SIGHUP arrived. A BaseException, so `except Exception` around a call does not swallow it."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def catch_signals(handler) -> dict:
    """Install `handler` for every STOP_SIGNALS not ignored now; returns the previous handlers, to restore."""
    previous = {}
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            previous[signum] = signal.signal(signum, handler)
    return previous


class SignalLatch:
    """SIGINT/SIGTERM/SIGHUP: while `armed`, the first raises Interrupted at once; otherwise (and after the
    first) they are only remembered in `received`, for the caller to act on at a safe point."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.armed = False
        self._previous: dict = {}

    def install(self) -> SignalLatch:
        self._previous = catch_signals(self._handle)
        return self

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, frame) -> None:
        if self.received is None:
            self.received = signum
            if self.armed:
                self.armed = False
                raise Interrupted(signum)


def signal_name(signum: int) -> str:
    return signal.Signals(signum).name


class OutputFailed(Exception):
    """An output can no longer be written: `what` names it (an option and its path, or a file in the run's
    directory) and `when` says how far the run got."""

    def __init__(self, what: str, err: OSError | str, when: str = ""):
        self.what = what
        self.broken_pipe = isinstance(err, BrokenPipeError)  # the reader went away: stop quietly, as SIGPIPE would
        self.why = err if isinstance(err, str) else (err.strerror or failure_text(err))
        super().__init__(f"cannot write {what}{' ' + when if when else ''}: {self.why}")


class PeerStopped(Exception):
    """Another rank stopped for a reason of its own (its outputs), and this one stops with it."""

    def __init__(self, rank: int, reason: str, broken_pipe: bool = False, where: str = ""):
        self.broken_pipe = broken_pipe
        super().__init__(f"stopped{' at ' + where if where else ''} because rank {rank} {reason}")


_STOP_KEY = "commbench/stopped"  # in the process group's store: which rank stopped on its own, and why


def announce_stop(rank: int, reason: str) -> None:
    """Tell the other ranks, through the process group's store, why this rank stops on its own. Call it before
    this rank's exit breaks their collectives; the first announcement is the one they read."""
    store = _store()
    if store is not None:
        # Best effort: without it a peer names the collective it was in, as before.
        with contextlib.suppress(Exception):
            store.compare_set(_STOP_KEY, "", json.dumps({"rank": rank, "reason": reason}))


def announced_stop(where: str = "") -> PeerStopped | None:
    """A peer's announced reason for stopping, as this rank's own; None when no peer announced one."""
    store = _store()
    try:
        if store is None or not store.check([_STOP_KEY]):
            return None
        stop = json.loads(store.get(_STOP_KEY))
        return PeerStopped(stop["rank"], stop["reason"], where=where)
    except Exception:  # the store went with the peer that held it (TCPStore on rank 0): nothing to read
        return None


def _store():
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None
    from torch.distributed.distributed_c10d import _get_default_store

    return _get_default_store()


def quiet_writer_threads() -> None:
    """Keep TensorBoard's writer thread from printing a traceback when a write fails (a full disk, a removed
    directory). The thread keeps its error and TensorBoard raises it again at the next write or flush, in the
    thread that writes: that is where the run reports it, as one line naming the output."""
    previous = threading.excepthook

    def hook(args) -> None:
        thread = type(args.thread)
        if not (thread.__module__.startswith("tensorboard.") and isinstance(args.exc_value, OSError)):
            previous(args)

    threading.excepthook = hook


def abandon_writer(writer) -> None:
    """Close a TensorBoard SummaryWriter whose event file can no longer be written, dropping what it still
    holds. Its later flushes and closes (Lightning's finalize, the interpreter's exit) are then no-ops, rather
    than the same error again."""
    with contextlib.suppress(OSError):
        writer.close()
    writer.file_writer = writer.all_writers = None  # what SummaryWriter.close sets once it succeeds


_NOISE = (
    re.compile(r"Got the following error when running the callback: \w+: "),  # torch's future-callback wrapper
    re.compile(r"\[[^\]]*\.(?:cc|cpp|h|hpp)(?::\d+)?\]\s*"),  # gloo's "[.../pair.cc:545] "
    re.compile(r"\s*This is typically caused by .*$"),  # gloo's advice after a reset connection
)


def failure_text(err: BaseException, limit: int = 300) -> str:
    """`Type: first line` of an error, without the source paths and wrappers torch and gloo add."""
    text = (str(err).strip().splitlines() or [""])[0]
    for pattern in _NOISE:
        text = pattern.sub("", text)
    return f"{type(err).__name__}: {text.strip()[:limit]}"


def silence_stdout() -> None:
    """Point stdout at /dev/null once it cannot be written (a closed pipe, a full disk): Python flushes it again
    at exit, and that flush would fail with a traceback of its own."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def say(prog: str, message: str) -> None:
    """`prog: message` on stderr in one write: the ranks share one stderr, and under PYTHONUNBUFFERED a print
    writes the text and its newline apart, so two ranks' lines could be mixed."""
    sys.stderr.write(f"{prog}: {message}\n")
    sys.stderr.flush()


def report_failure(prog: str, message: str) -> None:
    """`prog: message` on stderr, and under torchrun in the error file its failure report reads."""
    say(prog, message)
    if os.environ.get("TORCHELASTIC_ERROR_FILE"):
        from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

        try:
            raise RuntimeError(message) from None
        except RuntimeError as err:
            err.__context__ = None  # the report shows this message, not the chain of the original error
            ErrorHandler().record_exception(err)
