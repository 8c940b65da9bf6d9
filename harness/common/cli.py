"""How every command of the harness meets a user's mistake, and the checks they share.

A mistake (an unknown name, a count below 1, a path that cannot be written) raises UsageError; `run_cli`
turns it into one line, `PROG: error: message`, and exit code 2, argparse's own code, so every command
answers alike. Nothing here imports torch: the commands refuse a mistake before loading it.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import NoReturn

from harness.common.failures import say
from harness.common.names import EXIT_BROKEN_PIPE, EXIT_USAGE


class UsageError(Exception):
    """A mistake in what the user asked for. The message names the option and what would be accepted."""


def run_cli(main: Callable[[], int | None], prog: str) -> int | None:
    """Run `main`; a UsageError becomes `prog: error: message` on stderr and exit code 2, with no traceback. What
    main returns is the exit code (None: 0, as SystemExit takes it).

    A reader that closes the pipe early (`| head -1`) took what it wanted: the command stops quietly with
    EXIT_BROKEN_PIPE, as a shell reports a command ended by SIGPIPE, instead of a BrokenPipeError traceback.
    """
    try:
        code = main()
        sys.stdout.flush()  # inside the try: a pipe closed after the last print fails here, not at exit
        return code
    except UsageError as err:
        say(prog, f"error: {err}")
        raise SystemExit(EXIT_USAGE) from None
    except BrokenPipeError:
        # Python flushes stdout again at exit; point it at /dev/null so that flush cannot fail too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(EXIT_BROKEN_PIPE) from None


# The line run_cli writes for a UsageError, as another program reads it from one of these commands' stderr.
_REFUSAL = re.compile(r"^(train\.py|python -m [\w.]+): error: ")


def refusal_line(stderr: str) -> str | None:
    """The line in a command's `stderr` where it refused a user's mistake (run_cli's), or None if there is none."""
    return next((line for line in stderr.splitlines() if _REFUSAL.match(line)), None)


# A command-line word that is a number, not an option: `--alpha-us -5` gives -5 to --alpha-us.
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a mistake is a UsageError: one line and exit 2 through run_cli, like every other check
    (argparse's own error() prints the whole usage first). An option no command has is named before a missing
    required argument: argparse checks the required ones first, so `compare --bogus` would only say that DIR is
    missing."""

    def parse_known_args(
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._words = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        unknown = self.unknown_option()
        if unknown is not None and message.startswith("the following arguments are required"):
            message = f"unrecognized arguments: {unknown}"
        raise UsageError(message)

    def unknown_option(self) -> str | None:
        """The first word of the command line that looks like an option and is none of this parser's (nor a
        prefix argparse would take for one), or None."""
        known = self._option_string_actions
        for word in getattr(self, "_words", []):
            if word == "--":
                break
            if not word.startswith("-") or word == "-" or _NEGATIVE_NUMBER.match(word):
                continue
            name = word.split("=", 1)[0]
            long_prefix = name.startswith("--") and any(option.startswith(name) for option in known)
            short_with_value = not name.startswith("--") and name[:2] in known  # -j4
            if name not in known and not long_prefix and not short_with_value:
                return word
        return None


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's defaults formatter, except where the help already says its default or there is none.

    Options whose default depends on the machine (CPU or GPU) describe it in their help text and have
    `default=None`; argparse would append a misleading "(default: None)" after that description.
    """

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default in (None, "", argparse.SUPPRESS) or "default" in text:
            return text
        return super()._get_help_string(action)


def check_writable(path: str | None, option: str, directory: bool = False, create: bool = False) -> None:
    """A UsageError unless `path` can be written, tried for real (as root, os.access says yes to everything).

    A file (or, with `directory`, a folder made later) is writable when its nearest existing ancestor is a
    folder we can create files in. With `create` the folder is made now, as train.py's run directory is.
    """
    if path is None:
        return
    if not path.strip():
        raise UsageError(f"{option}: empty path")
    # The commands print their tables on stdout: '-' would be a file of that name here, not stdout.
    if path == "-" and not (directory or create):
        raise UsageError(f"{option} '-': stdout carries the table; give a file name")
    if create:
        if os.path.exists(path) and not os.path.isdir(path):
            raise UsageError(f"{option}: {path!r} is a file; give a directory")
        try:
            os.makedirs(path, exist_ok=True)
            with tempfile.TemporaryFile(dir=path):
                pass
        except OSError as err:
            raise UsageError(f"{option} {path!r} cannot be written: {err.strerror or err}") from None
        return
    target = os.path.abspath(path)
    if os.path.isdir(target) and not directory:
        raise UsageError(f"{option}: {path!r} is a directory; give a file name")
    if os.path.exists(target) and not os.path.isdir(target) and directory:
        raise UsageError(f"{option}: {path!r} is a file; give a directory")
    if _is_pipe_or_socket(target):  # opening it would wait for a reader that may never come
        raise UsageError(f"{option}: {path!r} is not a regular file; give a file name")
    if os.path.isfile(target):
        try:
            with open(target, "a"):
                return
        except OSError as err:
            raise UsageError(f"{option}: cannot write {path!r}: {err.strerror}") from None
    ancestor = target if directory and os.path.isdir(target) else os.path.dirname(target)
    while not os.path.exists(ancestor):
        ancestor = os.path.dirname(ancestor)
    if not os.path.isdir(ancestor):
        raise UsageError(f"{option}: {ancestor!r} in {path!r} is not a directory")
    if not directory and ancestor != os.path.dirname(target):
        raise UsageError(f"{option}: directory {os.path.dirname(path)!r} does not exist")
    try:
        with tempfile.TemporaryFile(dir=ancestor):
            pass
    except OSError as err:
        raise UsageError(f"{option}: cannot write in {ancestor!r}: {err.strerror}") from None


def check_count(option: str, value: int | None, least: int = 1) -> None:
    """A UsageError unless `value` (None: not given) is at least `least`."""
    if value is not None and value < least:
        raise UsageError(f"{option} must be at least {least}, got {value}")


def check_seconds(option: str, value: float) -> None:
    """A UsageError unless `value` is a positive, finite number of seconds."""
    check_positive(option, value, "seconds")


def _is_pipe_or_socket(path: str) -> bool:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def file_identity(path: str | Path) -> tuple:
    """What names one file however it is spelled (./F, a/../F, a symbolic link, a hard link): its device and
    inode once it exists, else the path with every existing link resolved."""
    try:
        info = os.stat(path)
    except OSError:
        return ("path", os.path.realpath(path))
    return ("inode", info.st_dev, info.st_ino)


def check_distinct_outputs(outputs: dict[str, str | None], inputs: Iterable[str | Path] = ()) -> None:
    """A UsageError when two outputs ({option: path}, None where not asked for), or an output and stdout (where
    the table goes), are one file, so that their lines would be mixed; or when an output is one of the
    `inputs`, which writing would destroy. Terminals and /dev/null are character devices, where nothing is
    kept to mix: they may be given twice."""
    seen: dict[tuple, str] = {}
    try:  # stdout first, so that `--json F > F` names the option
        out = os.fstat(sys.stdout.fileno())
        if not stat.S_ISCHR(out.st_mode):
            seen[("inode", out.st_dev, out.st_ino)] = "stdout (the table)"
    except (OSError, ValueError, AttributeError):  # no real stdout (closed, or a test's capture)
        pass
    sources = {file_identity(source): source for source in inputs}
    for option, path in outputs.items():
        if path is None or (os.path.exists(path) and stat.S_ISCHR(os.stat(path).st_mode)):
            continue
        identity = file_identity(path)
        if identity in seen:
            raise UsageError(f"{option} {path!r} is the same file as {seen[identity]}; give each output its own")
        if identity in sources:
            raise UsageError(f"{option} {path!r} is an input file ({sources[identity]}); writing would destroy it")
        seen[identity] = f"{option} {path!r}"


def check_positive(option: str, value: float, unit: str) -> None:
    """A UsageError unless `value` is a positive, finite number of `unit` (a rate, a size, a time)."""
    if not (math.isfinite(value) and value > 0):
        raise UsageError(f"{option} must be a positive number of {unit}, got {value:g}")


def check_port(option: str, value: int) -> None:
    """A UsageError unless `value` is a TCP port number, 0 to 65535 (0: the system picks a free one, which only a
    lone rank can use, as no other rank learns it)."""
    if not 0 <= value <= 65535:
        raise UsageError(f"{option} must be a TCP port, 0 to 65535, got {value}")


def check_fresh(option: str, root: str | None, names: Iterable[str]) -> None:
    """A UsageError when the folder `root` (None: a temporary one, fresh by making) already holds one of `names`,
    the entries a run of the command makes there: the run would fail on reaching it, or take the earlier run's
    files for its own."""
    if root is None:
        return
    taken = [name for name in names if os.path.lexists(os.path.join(root, name))]
    if taken:
        raise UsageError(f"{option} {root!r} already holds {taken[0]} from an earlier run; give a new directory")


# What torch's env:// rendezvous reads to join a process group; torchrun sets every one of them.
TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def check_torchrun(command: str) -> None:
    """A UsageError unless this process is a rank that torchrun started (its rendezvous variables are set), for a
    program that joins its process group through them: started plainly, init_process_group would fail with a
    traceback instead. `command` is how to start it, given in the message."""
    if any(key not in os.environ for key in TORCHRUN_ENV):
        raise UsageError(f"start it with torchrun: {command}")


def parse_cap_mib(word: str) -> float | None:
    """A bucket cap as a command line gives it: a positive number of MiB, or 'default' (None: DDP's own). A
    ValueError otherwise, whose message ends "a number of MiB or 'default'" or "a positive number of MiB or
    'default'", for the caller to put after its option."""
    if word.strip() == "default":
        return None
    try:
        cap = float(word)
    except ValueError:
        raise ValueError("a number of MiB or 'default'") from None
    if not (math.isfinite(cap) and cap > 0):
        raise ValueError("a positive number of MiB or 'default'")
    return cap
