"""Terminal output for the CLI: plain, greppable lines when piped; colour, aligned tables and a
progress bar (on stderr, only when it is a terminal) otherwise; `NO_COLOR` turns colour off.
Recorded text reaches the terminal only through `printable` (control characters escaped).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TextIO, TypeVar

from hashreplay.core.transcript import printable

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
        with contextlib.suppress(BrokenPipeError):  # stdout's reader left; stderr may not have
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
