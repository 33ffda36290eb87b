"""Terminal output for the CLI: plain, greppable lines when piped; colour, aligned tables and a
progress bar (on stderr, only when it is a terminal) otherwise; `NO_COLOR` turns colour off.
Also what every command is handed (`Run`), the exit codes, and the commands that print
recordings for reading: `list` and `show`.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO, TypeVar

import orjson

from hashreplay.core.blobs import parse_ref
from hashreplay.core.bodies import BodyEncoding
from hashreplay.core.config import Config
from hashreplay.core.errors import ConfigError, RecordingError, unreadable_fix
from hashreplay.core.format import RecordedResponse, recording_from_json
from hashreplay.core.names import hash_of_name
from hashreplay.core.paths import Stray, find_strays
from hashreplay.core.store import Store
from hashreplay.core.transcript import conversation, payloads, printable, reply, response_tokens
from hashreplay.engine.files import (
    Loaded,
    default_paths,
    find_given,
    find_recordings,
    load,
    recorded_test_id,
)
from hashreplay.engine.miss import record_target

__all__ = ["Console", "human_size", "printable"]


T = TypeVar("T")

#: Work on fewer items than this finishes before a progress bar would be worth drawing.
PROGRESS_MIN = 1000
_BAR_WIDTH = 30
_CLEAR = "\r\x1b[K"
_STYLES = {"bold": "1", "dim": "2", "red": "31", "green": "32", "yellow": "33", "cyan": "36"}


def _unchanged(text: str) -> str:
    return text


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Console:
    """Where the CLI writes; created per command from the current `sys.stdout`/`sys.stderr`."""

    def __init__(self, out: TextIO | None = None, err: TextIO | None = None) -> None:
        self.out = out if out is not None else sys.stdout
        self.err = err if err is not None else sys.stderr
        self.tty = _isatty(self.out)
        self.err_tty = _isatty(self.err)
        self.colour = self.tty and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"
        self._bar = False
        #: how paths inside a message are shown (`Run` makes them relative to the working
        #: directory); errors and warnings pass through it, recorded data never does
        self.paths: Callable[[str], str] = _unchanged

    # --- text -----------------------------------------------------------------------------

    def style(self, text: str, *names: str) -> str:
        if not self.colour or not names:
            return text
        codes = ";".join(_STYLES[n] for n in names)
        return f"\x1b[{codes}m{text}\x1b[0m"

    def line(self, text: str = "") -> None:
        self._clear_bar()
        print(text, file=self.out)

    def error(self, text: str) -> None:
        """A problem, on stderr (stdout stays clean for pipes)."""
        self._notice("error:", "31", text)

    def warning(self, text: str) -> None:
        """Something the user should look at, on stderr."""
        self._notice("warning:", "33", text)

    def _notice(self, label: str, colour: str, text: str) -> None:
        self._clear_bar()
        self.out.flush()
        prefix = f"\x1b[{colour}m{label}\x1b[0m" if self.colour and _isatty(self.err) else label
        print(f"{prefix} {self.paths(text)}", file=self.err)
        self.err.flush()

    def table(self, rows: Sequence[Sequence[str]], headers: Sequence[str]) -> None:
        """Aligned columns under a header on a terminal; tab-separated lines when piped."""
        if not self.tty:
            for row in rows:
                self.line("\t".join(row))
            return
        widths = [len(h) for h in headers]
        for row in rows:
            widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]

        def aligned(cells: Sequence[str]) -> str:  # the last column is not padded
            padded = [c.ljust(w) for c, w in zip(cells[:-1], widths, strict=False)]
            return "  ".join([*padded, cells[-1]])

        self.line(self.style(aligned(headers), "bold"))
        for row in rows:
            self.line(aligned(row).rstrip())

    def size(self, size: int) -> str:
        """`4.1 KiB` on a terminal, the byte count when piped."""
        return human_size(size) if self.tty else str(size)

    # --- progress -------------------------------------------------------------------------

    def progress(self, items: Sequence[T], label: str) -> Iterator[T]:
        """Yield `items`, drawing a bar on stderr when it is a terminal and they are many."""
        draw = self.err_tty and len(items) >= PROGRESS_MIN
        total = len(items)
        shown = -1
        for index, item in enumerate(items):
            percent = 100 * index // total
            if draw and percent != shown:  # at most 100 redraws, however long the work
                self._draw(label, index, total)
                shown = percent
            yield item
        self._clear_bar()

    def _draw(self, label: str, done: int, total: int) -> None:
        filled = _BAR_WIDTH * done // max(total, 1)
        bar = "#" * filled + "-" * (_BAR_WIDTH - filled)
        self.out.flush()  # what was printed so far lands before the bar
        self.err.write(f"{_CLEAR}{label} [{bar}] {done}/{total}")
        self.err.flush()
        self._bar = True

    def _clear_bar(self) -> None:
        if self._bar:
            self.err.write(_CLEAR)
            self.err.flush()
            self._bar = False


def human_size(size: int) -> str:
    """`812 B`, `4.1 KiB`, `2.0 MiB`."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"  # pragma: no cover - the loop always returns


EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2


class Run:
    """What every command gets: its arguments, the console and the project configuration."""

    def __init__(self, args: argparse.Namespace, console: Console, config: Config) -> None:
        self.args = args
        self.console = console
        self.config = config
        #: what is wrong with the project's config, when a command runs in spite of it
        self.config_problem: ConfigError | None = None
        self.unreadable = 0
        self.empty_paths = 0
        self._cwd = Path.cwd().resolve()
        self._root = config.root.resolve()
        #: reads recordings with their blobs, as a test run does
        self.store = Store.from_config(config)
        console.paths = self.show_paths_in

    def show_path(self, path: Path) -> str:
        """How the CLI prints a path: relative to the working directory when it is below
        it or inside the project (`../recordings/x.json` from `tests/`), so it can be pasted
        into the next command from where the user is; absolute otherwise."""
        absolute = Path(os.path.normpath(path.absolute()))
        # the directory resolved (a symlinked /tmp), the file itself not (a stray symlink
        # is shown under its own name)
        resolved = absolute.parent.resolve() / absolute.name if absolute.name else absolute
        inside = _below(resolved, self._cwd) or (
            _below(resolved, self._root) and _below(self._cwd, self._root)
        )
        if not inside:
            return str(path)
        return os.path.relpath(resolved, self._cwd)

    def show_paths_in(self, text: str) -> str:
        """`text` (a message) with every absolute path inside the project shown as
        `show_path` shows it."""
        roots = sorted({str(self._root), str(self.config.root)}, key=len, reverse=True)
        stop = r"""\s:;,'"()"""  # characters that end a path inside a sentence
        alternatives = "|".join(re.escape(r) for r in roots)
        found = re.compile(rf"(?:{alternatives})(?=[/.{stop}]|$)(?:/[^{stop}]*)?")

        def shown(match: re.Match[str]) -> str:
            path = match.group(0)
            stripped = path.rstrip(".")  # the full stop of a sentence is not the path's
            return self.show_path(Path(stripped)) + path[len(stripped) :]

        return found.sub(shown, text)

    def files(self, paths: Sequence[Path] | None = None) -> list[Path]:
        """The recordings under `paths` named on the command line (each one that holds none
        is a warning and makes the exit status 1), else the whole project's."""
        if not paths:
            return find_recordings(default_paths(self.config), self.config.common_dir)
        files, empty = find_given(paths, self.config.common_dir)
        for path in empty:
            self.empty_paths += 1
            self.console.warning(
                f"{path}: no recordings in it (no *.json named by a request hash, no "
                "recordings directory); check the path"
            )
        return files

    def strays(self, paths: Sequence[Path] | None = None) -> list[Stray]:
        """Symlinks and temp files in recordings directories."""
        return find_strays(paths or default_paths(self.config), self.config.root)

    def load_all(self, paths: Sequence[Path], label: str) -> list[Loaded]:
        """Every readable file; each unreadable one is reported, skipped and counted."""
        loaded: list[Loaded] = []
        for path in self.console.progress(paths, label):
            try:
                loaded.append(load(path, self.store))
            except RecordingError as exc:
                self.report_unreadable(path, exc)
        return loaded

    def report_unreadable(self, path: Path, exc: RecordingError) -> None:
        self.unreadable += 1
        self.console.error(
            printable(
                f"{self.show_path(path)}: unreadable: {exc.problem}; skipped, left unchanged; "
                f"to fix it: {self.unreadable_fix(path)}"
            )
        )

    def unreadable_fix(self, path: Path) -> str:
        """What replaces a recording file that cannot be read: re-recording the test it
        names (never the command that just met it again), or git."""
        test_id = recorded_test_id(path)
        return unreadable_fix(self.show_path(path), record_target(test_id) if test_id else None)

    @property
    def status(self) -> int:
        return EXIT_PROBLEMS if self.unreadable or self.empty_paths else EXIT_OK


def _below(path: Path, directory: Path) -> bool:
    return path == directory or directory in path.parents


Command = Callable[[Run], int]


# --- list -----------------------------------------------------------------------------------


def _matches(value: str, pattern: str | None) -> bool:
    if pattern is None:
        return True
    if "*" in pattern or "?" in pattern:
        return fnmatch.fnmatchcase(value, pattern.replace("[", "[[]"))
    return pattern in value


def _status(response: RecordedResponse) -> str:
    """`200`; `exception` for a failure; `-` for a call-layer result (no HTTP status)."""
    if response.is_exception:
        return "exception"
    return "-" if response.status is None else str(response.status)


def list_recordings(run: Run) -> int:
    args = run.args
    loaded = run.load_all(run.files(args.paths), "reading")
    rows: list[list[str]] = []
    for item in loaded:
        recording = item.recording
        request = recording.request
        test = recording.test_id or ("(shared)" if item.is_model_list_file else "(no test)")
        if not (_matches(test, args.test) and _matches(request.endpoint, args.endpoint)):
            continue
        row = [
            test,
            request.method,
            request.endpoint,
            request.model or "-",
            ",".join(_status(r) for r in recording.responses),
            run.console.size(len(item.content)),
            run.show_path(item.path),
        ]
        rows.append([printable(cell) for cell in row])  # recorded text never drives a terminal
    run.console.table(rows, ["test", "method", "endpoint", "model", "status", "size", "file"])
    if not rows and run.console.tty:
        run.console.line("no recordings match")
    return run.status


# --- show -----------------------------------------------------------------------------------


def _find_target(run: Run, target: str) -> Path | None:
    path = Path(target)
    if path.is_file():
        return path
    if target.endswith(".json") or "/" in target:
        run.console.error(f"no such recording file: {target}")
        return None
    key = target.lower().removesuffix(".json")
    files = run.files()
    found = [
        f
        for f in files
        if (hash_of_name(f.name) or "").startswith(key) or f.name.startswith(target)
    ]
    if len(found) == 1:
        return found[0]
    if not found:
        run.console.error(
            f"no recording matches {target!r} among the project's {len(files)}: give a file "
            "path, or a hash as in `hashreplay list`"
        )
    else:
        names = "\n  ".join(run.show_path(f) for f in found[:20])
        run.console.error(
            f"{target!r} matches {len(found)} recordings; give more of the hash:\n  {names}"
        )
    return None


def show(run: Run) -> int:
    path = _find_target(run, run.args.target)
    if path is None:
        return EXIT_PROBLEMS
    if run.args.raw:
        raw = path.read_bytes().decode("utf-8", errors="replace").rstrip("\n")
        run.console.line(printable(raw))
        return EXIT_OK
    try:
        item = load(path, run.store)
    except RecordingError as exc:
        run.report_unreadable(path, exc)
        return EXIT_PROBLEMS
    # large values are shown as their blob reference (digest, size, type), not their bytes
    _render(run, replace(item, recording=recording_from_json(item.raw)))
    return EXIT_OK


def _field(run: Run, name: str, value: str, *, styled: bool = False) -> None:
    """One `name: value` line; recorded data in `value` is escaped unless the caller
    `styled` it (and escaped the data it holds) itself."""
    shown = value if styled else printable(value)
    run.console.line(f"{run.console.style(f'{name}:'.ljust(10), 'bold')} {shown}")


def _indented(run: Run, text: str, indent: str = "  ", prefix: str = "") -> None:
    """Recorded text, escaped, indented; `prefix` (already styled) starts the first line."""
    for index, line in enumerate(text.splitlines() or [""]):
        lead = f"{prefix} " if prefix and index == 0 else ""
        run.console.line(f"{indent}{lead}{printable(line)}")


def _render(run: Run, item: Loaded) -> None:
    recording, request = item.recording, item.recording.request
    _field(run, "file", run.show_path(item.path))
    _field(run, "test", recording.test_id or "(none: shared or made outside a test)")
    _field(run, "request", f"{request.method} {request.url}")
    if request.model:
        _field(run, "model", request.model)
    if request.headers:
        _field(run, "headers", ", ".join(f"{k}: {v}" for k, v in sorted(request.headers.items())))
    turns = conversation(request.body, request.endpoint)
    if turns:
        run.console.line(run.console.style("conversation:", "bold"))
        for turn in turns:
            role = run.console.style(f"[{printable(turn.role)}]", "cyan")
            _indented(run, turn.text, prefix=role)
    elif request.body is not None:
        run.console.line(run.console.style(f"body ({request.body_encoding.value}):", "bold"))
        _indented(run, _body_text(request.body, request.body_encoding))
    responses = recording.responses
    for index, response in enumerate(responses):
        label = "response" if len(responses) == 1 else f"response {index + 1}/{len(responses)}"
        _render_response(run, label, response)


def _render_response(run: Run, label: str, response: RecordedResponse) -> None:
    kind = response.headers.get("content-type", "")
    if response.is_streaming:
        kind += f" (stream: {response.stream_format}, {len(response.body or [])} events)"
    status = _status(response)
    failed = response.is_exception or (response.status or 0) >= 400
    colour = "red" if failed else "green"
    shown = f"{run.console.style(printable(status), colour)} {printable(kind)}".rstrip()
    _field(run, label, shown, styled=True)
    if response.is_exception and response.exception is not None:
        _field(run, "exception", f"{response.exception.type}: {response.exception.message}")
    said = reply(response)
    if said.text:
        _field(run, "reply", said.text)
    for call in said.tool_calls:
        _field(run, "tool call", call)
    if not said and response.body is not None:
        run.console.line(run.console.style("body:", "bold"))
        if response.is_streaming:
            for value in payloads(response) or response.body:
                _indented(run, value if isinstance(value, str) else orjson.dumps(value).decode())
        else:
            _indented(run, _body_text(response.body, response.body_encoding))
    tokens = response_tokens(response)
    if tokens.responses:
        _field(run, "tokens", f"input {tokens.input}, output {tokens.output}, total {tokens.total}")


def _body_text(body: Any, encoding: BodyEncoding) -> str:
    ref = parse_ref(body)
    if ref is not None:
        return ref.describe()
    if encoding is BodyEncoding.BASE64:
        return f"(binary, {len(str(body)) * 3 // 4} bytes as base64)"
    if encoding is BodyEncoding.TEXT:
        return str(body)
    if encoding is BodyEncoding.EMPTY or body is None:
        return "(empty)"
    return orjson.dumps(body, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()
