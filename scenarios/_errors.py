"""`ScenarioError` and `Source`: errors that name the scenario file, the field and, where it can be found, the line."""

from __future__ import annotations

import os
import re
import stat
import tomllib

import sim

# A table header starts with a letter or a quote, so a one-line array such as `[0.5]` inside a multi-line
# value is not mistaken for one.
MAX_FILE_BYTES = 256 << 20  # a scenario or sweep file; inputs larger than this are drawn from a seed
_HEADER = re.compile(r'^\s*\[\[?\s*([A-Za-z_"][^\]]*?)\s*\]\]?\s*(#.*)?$')


class ScenarioError(sim.MeshError, ValueError):
    """A scenario file that cannot be read, breaks the format, or whose collective the simulator rejects."""


class Source:
    """The text of one scenario file, for pointing at the line of a field in error messages."""

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.lines = text.splitlines()

    def error(self, table: str, key: str | None, message: str, index: int = 0) -> ScenarioError:
        """A `ScenarioError` reading `path:line: message`, or `path: message` when the line is unknown.

        Args:
            table: the table holding the field ('' for the top level, 'device' for the `[[device]]` tables).
            key: the field, or None to point at the table's header.
            message: what is wrong and the rule, with `name=value`.
            index: which table of an array of tables (`[[device]]` number `index`, counting from 0).
        """
        line = self.line_of(table, key, index)
        return ScenarioError(f"{self.path}{'' if line is None else f':{line}'}: {message}")

    def lines_before(self, text: str) -> int | None:
        """How many lines of the file come before the multi-line string `text`, when the file holds it line
        for line (a literal or escape-free triple-quoted string); else None."""
        wanted = text.splitlines()
        if not wanted:
            return None
        return next((start for start, line in enumerate(self.lines)
                     if line == wanted[0] and self.lines[start:start + len(wanted)] == wanted), None)

    def line_of(self, table: str, key: str | None, index: int = 0) -> int | None:
        """The 1-based line of `key` in `table` (number `index` of that name), else of the table's header.

        Returns None when neither is found (e.g. a dotted or inline definition): a best-effort pointer,
        since tomllib reports lines only for syntax errors.
        """
        key_pattern = re.compile(rf'^\s*"?{re.escape(key)}"?\s*=') if key else None
        current, seen, header_line = "", {"": 0}, None
        for number, text in enumerate(self.lines, 1):
            header = _HEADER.match(text)
            if header:
                current = header.group(1).strip('"')
                seen[current] = seen.get(current, -1) + 1
                if current == table and seen[current] == index:
                    header_line = number
                if key and current == (f"{table}.{key}" if table else key):
                    return number  # the key is itself a table, e.g. a misspelt [[device]]
                continue
            if key_pattern and current == table and seen[current] == index and key_pattern.match(text):
                return number
        return header_line

    def label(self, table: str, index: int = 0) -> str:
        """How messages name `table`: '[mesh] ', '[[device]] for device 2: ', or '' for the top level."""
        if table == "device":
            return f"[[device]] for device {index}: "
        return f"[{table}] " if table else ""

    def table(self, data: dict, name: str, required: bool = True) -> dict | None:
        """`data[name]` checked to be a table; None when it is absent and not `required`."""
        if name not in data:
            if required:
                raise self.error("", None, f"the [{name}] table is missing; it is required")
            return None
        value = data[name]
        if not isinstance(value, dict):
            raise self.error("", name, f"{name}={value!r} must be a table: write [{name}] on a line of its own")
        return value

    def check_keys(self, table: str, values: dict, required: tuple[str, ...], optional: tuple[str, ...],
                   index: int = 0) -> None:
        """Raise for a key of `values` outside `required + optional`, then for a missing required key."""
        where = self.label(table, index)
        for key in values:
            if key not in required and key not in optional:
                allowed = ", ".join(required + optional) or "none"
                raise self.error(table, key, f"{where}unknown key {key!r}; allowed keys: {allowed}", index)
        for key in required:
            if key not in values:
                raise self.error(table, None, f"{where}{key} is missing; it is required", index)


def parse_toml(path: str, kind: str, source: type[Source] = Source, deep: str = "") -> tuple[Source, dict]:
    """The text (as a `source`) and TOML tables of the `kind` file at `path` ("scenario", "sweep");
    an unreadable file and a syntax error become a ScenarioError naming the file (and line); `deep` is said
    after the message for tables nested too deeply."""
    text = read_text(path, kind)
    try:
        return source(path, text), tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        line = re.search(r"at line (\d+)", str(error))
        raise ScenarioError(f"{path}{':' + line.group(1) if line else ''}: invalid TOML: {error}") from None
    except RecursionError:  # tomllib parses nested arrays and tables recursively
        raise ScenarioError(f"{path}: invalid TOML: arrays or tables nested too deeply{deep}") from None


def read_text(path: str, kind: str) -> str:
    """The UTF-8 text of the `kind` file at `path` (`read_bounded`, at most `MAX_FILE_BYTES`)."""
    try:
        return read_bounded(path, kind, MAX_FILE_BYTES, "draw large inputs from a seed instead").decode("utf-8")
    except (FileNotFoundError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or error
        raise ScenarioError(f"{path}: cannot read the {kind} file: {reason}") from None


def read_bounded(path: str | os.PathLike, kind: str, limit: int, remedy: str) -> bytes:
    """The bytes of the `kind` file at `path`: a regular file of at most `limit` bytes (a device such as
    /dev/zero or /dev/full, or a pipe, would be read forever), else a ScenarioError naming the file and why
    (with `remedy` for a file too large). FileNotFoundError is left to the caller (a results file may not exist yet)."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            what = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file (a device, a pipe or a socket)"
            raise ScenarioError(f"{path}: cannot read the {kind} file: it is {what}; a {kind} file must be a "
                                f"regular file")
        if info.st_size > limit:
            raise ScenarioError(f"{path}: cannot read the {kind} file: it holds {info.st_size} bytes, more than a "
                                f"{kind} file may ({limit}); {remedy}")
        with open(path, "rb") as stream:
            data = stream.read(limit + 1)
    except FileNotFoundError:
        raise
    except OSError as error:
        raise ScenarioError(f"{path}: cannot read the {kind} file: {error.strerror or error}") from None
    if len(data) > limit:
        raise ScenarioError(f"{path}: the {kind} file grew past {limit} bytes while being read; {remedy}")
    return data
