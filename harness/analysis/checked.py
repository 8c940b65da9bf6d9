"""Files in and out, defensively: only regular files read, JSON fields of the right type and range; outputs distinct.

Every reader of harness.analysis goes through here (summary.json and the event files in .runs, the run that
predict reads), so that a file of the wrong shape is always answered alike: a BadFile whose message is one
line naming the file, the field and what was expected, e.g.

    runs/a/v0/summary.json: totals is a list; expected a JSON object
    runs/a/v0/summary.json: totals.step_ms_p50 is the string '12.5'; expected a number >= 0, or null

compare turns it into a note on the run (other runs are still compared); predict into a UsageError (exit 2).
The sweep's fit record is checked where it is defined, in harness.common.sweep_fits (the base layer, which
cannot import this one). For outputs, check_outputs refuses two options writing one file, or a file that is
being read, before anything is read; write_output turns a failed write into one line.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from harness.common.cli import UsageError, check_distinct_outputs, check_writable
from harness.common.numbers import is_number

# A summary.json is a few kB (a few hundred buckets at most); anything far larger is not one, and reading it
# whole would only cost memory.
MAX_JSON_BYTES = 64 * 2**20


class BadFile(ValueError):
    """A file that does not hold what it should. The message is one line: the file, the field, the expectation."""


def describe(value: Any) -> str:
    """A JSON value as a message names it: `a list`, `the string '12.5'`, `NaN`, `-3.0`, `null`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        # bit_length, not str(): Python refuses to print an int of more than 4,300 digits.
        return str(value) if abs(value) < 10**20 else f"an integer of about {int(value.bit_length() * 0.30103)} digits"
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"the string {shown!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a JSON object"
    return type(value).__name__


def file_kind(mode: int) -> str:
    """What a non-regular file is, for a message: `a directory`, `a FIFO`, ..."""
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))  # fmt: skip
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def check_regular(path: Path | str) -> None:
    """A BadFile unless `path` is (or links to) a regular file. Checked before anything opens it: a FIFO would
    block the reader forever, a device could be endless (/dev/zero) or act on being opened."""
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        raise BadFile(f"{path}: cannot be read ({_reason(err)}); expected a regular file") from None
    if not stat.S_ISREG(mode):
        raise BadFile(f"{path} is {file_kind(mode)}; expected a regular file")


def read_regular(path: Path | str, limit: int = MAX_JSON_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; a BadFile otherwise."""
    check_regular(path)
    try:
        # O_NONBLOCK: should the file have been swapped for a FIFO since the check, opening still returns.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise BadFile(f"{path} is {file_kind(info.st_mode)}; expected a regular file")
            # The size first, so that a huge file is not read; then at most limit + 1 bytes, for files that
            # report no size (/proc) or grow meanwhile.
            data = b"" if info.st_size > limit else handle.read(limit + 1)
    except OSError as err:
        raise BadFile(f"{path}: cannot be read ({_reason(err)})") from None
    if info.st_size > limit or len(data) > limit:
        raise BadFile(f"{path} is larger than {limit // 2**20} MiB; expected a JSON file of a few kB")
    return data


def read_json_object(path: Path | str) -> Fields:
    """The JSON object in a regular file, ready for its fields to be checked; a BadFile for anything else."""
    data = read_regular(path)
    try:
        text = data.decode("utf-8-sig")  # a byte-order mark, as some editors write, is still UTF-8
    except UnicodeDecodeError as err:
        raise BadFile(f"{path} is not UTF-8 text (byte {data[err.start]:#04x} at offset {err.start}); "
                      "expected a JSON object") from None  # fmt: skip
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        cut = "; the file ends early: truncated?" if ends_early(err, text) else ""
        raise BadFile(
            f"{path} is not valid JSON (line {err.lineno}, column {err.colno}: {err.msg}{cut}); expected a JSON object"
        ) from None
    except (RecursionError, ValueError) as err:  # nested thousands deep; an integer of 4,300+ digits
        reason = str(err).split(";")[0]  # the first clause; Python's advice on int digits is not the user's
        raise BadFile(f"{path} cannot be parsed ({reason}); expected a JSON object") from None
    return Fields(value, str(path))


def ends_early(err: json.JSONDecodeError, text: str) -> bool:
    """Whether JSON failed where its text ends (a write cut short) rather than somewhere inside it."""
    # An unterminated string is reported where the string starts, yet it is the end that is missing.
    return err.pos >= len(text.rstrip()) or err.msg.startswith("Unterminated string")


class Fields:
    """A JSON object read from a file; each field is taken through a method that checks its type and range.

    `where` is the object's own place in the file (`totals`, `buckets[2]`), so that messages name the field
    as a path from the top: `buckets[2].numel`.
    """

    def __init__(self, data: Any, path: str, where: str = "") -> None:
        if not isinstance(data, dict):
            name = f": {where} is" if where else " holds"
            raise BadFile(f"{path}{name} {describe(data)}; expected a JSON object")
        self.data: dict[str, Any] = data
        self.path = path
        self.where = where

    def name(self, key: str) -> str:
        """The field's path from the top of the file."""
        return f"{self.where}.{key}" if self.where else key

    def fail(self, key: str, expected: str) -> BadFile:
        """The BadFile for field `key`, whose value is not what was `expected`."""
        got = "missing" if key not in self.data else describe(self.data[key])
        return BadFile(f"{self.path}: {self.name(key)} is {got}; expected {expected}")

    def _present(self, key: str, required: bool, expected: str) -> bool:
        """Whether the field holds a value (not missing, not null); a BadFile when it must and does not."""
        if self.data.get(key) is not None:
            return True
        if required:
            raise self.fail(key, expected)
        return False

    def number(
        self,
        key: str,
        *,
        minimum: float | None = None,
        above: float | None = None,
        integer: bool = False,
        required: bool = False,
    ) -> float | None:
        """A finite number (an int with `integer`), >= `minimum` and > `above` where given; None if absent."""
        expected = expect_number(minimum, above, integer) + ("" if required else ", or null")
        if not self._present(key, required, expected):
            return None
        value = self.data[key]
        if not is_number(value, integer, minimum, above):
            raise self.fail(key, expected)
        return value

    def text(self, key: str, *, required: bool = False) -> str | None:
        """A string; None if absent."""
        expected = "a string" + ("" if required else ", or null")
        if not self._present(key, required, expected):
            return None
        if not isinstance(self.data[key], str):
            raise self.fail(key, expected)
        return self.data[key]

    def flag(self, key: str, *, required: bool = False) -> bool | None:
        """true or false; None if absent."""
        expected = "true or false" + ("" if required else ", or null")
        if not self._present(key, required, expected):
            return None
        if not isinstance(self.data[key], bool):
            raise self.fail(key, expected)
        return self.data[key]

    def section(self, key: str, *, required: bool = False) -> Fields | None:
        """A nested object; None if absent."""
        if not self._present(key, required, "a JSON object"):
            return None
        if not isinstance(self.data[key], dict):
            raise self.fail(key, "a JSON object" + ("" if required else ", or null"))
        return Fields(self.data[key], self.path, self.name(key))

    def items(self, key: str, *, required: bool = False) -> Iterator[Fields]:
        """Each object of a list of objects (none if the list is absent)."""
        if not self._present(key, required, "a list of JSON objects"):
            return
        values = self.data[key]
        if not isinstance(values, list):
            raise self.fail(key, "a list of JSON objects")
        for i, value in enumerate(values):
            yield Fields(value, self.path, f"{self.name(key)}[{i}]")


def expect_number(minimum: float | None = None, above: float | None = None, integer: bool = False) -> str:
    """What a range check expects, in words: `an integer >= 1`, `a number > 0`."""
    bounds = [f">= {minimum:g}"] if minimum is not None else []
    bounds += [f"> {above:g}"] if above is not None else []
    kind = "an integer" if integer else "a number" if bounds else "a finite number"
    return " ".join([kind, *bounds])


def check_outputs(outputs: dict[str, str | None], inputs: Iterable[str | Path] = ()) -> None:
    """A UsageError unless each output ({option: path}, None where not asked for) can be written and is its own
    file: not another output's, not stdout's (`--csv F > F`), not one of the `inputs`."""
    for option, path in outputs.items():
        if path is not None:
            check_writable(path, option)
    check_distinct_outputs(outputs, inputs)


def write_output(path: str, text: str | bytes, option: str) -> None:
    """Write `text` (or bytes: a plot) to `path`; a failed write (a full disk, a directory removed since the
    check) is a UsageError of one line, not a traceback."""
    try:
        with open(path, "wb" if isinstance(text, bytes) else "w") as out:
            out.write(text)
    except OSError as err:
        raise UsageError(f"{option} {path!r} could not be written: {_reason(err)}") from None


def _reason(err: OSError) -> str:
    return err.strerror or type(err).__name__
