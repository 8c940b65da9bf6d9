"""How a rank stops early, alike for training and the sweep: signals, and the one line that says why.

- SIGINT and SIGTERM are caught by a SignalLatch: while armed the first one raises Interrupted in the main
  thread; otherwise signals are only remembered, so the cleanup they would cut short (reporting, flushing,
  destroying the process group) still runs, and the rank exits 128 + the signal.
- A failure is reported as one line on stderr, and under torchrun also in the error file that its failure
  report reads (`report_failure`). `failure_text` is an error's type and first line, without the source
  paths and wrappers that torch and gloo add.
"""

from __future__ import annotations

import os
import re
import signal
import sys


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived. A BaseException, so `except Exception` around a call does not swallow it."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class SignalLatch:
    """SIGINT/SIGTERM: while `armed`, the first raises Interrupted at once; otherwise (and after the first)
    they are only remembered in `received`, for the caller to act on at a safe point."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.armed = False
        self._previous: dict = {}

    def install(self) -> SignalLatch:
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self._handle)
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


def report_failure(prog: str, message: str) -> None:
    """`prog: message` on stderr, and under torchrun in the error file its failure report reads."""
    print(f"{prog}: {message}", file=sys.stderr, flush=True)
    if os.environ.get("TORCHELASTIC_ERROR_FILE"):
        from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

        try:
            raise RuntimeError(message) from None
        except RuntimeError as err:
            err.__context__ = None  # the report shows this message, not the chain of the original error
            ErrorHandler().record_exception(err)
