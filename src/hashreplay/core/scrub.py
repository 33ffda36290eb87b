"""`scrub` patterns (docs/design.md §14): the project's regular expressions, and what each
replaces its matches with, in every string a recording keys and writes.

They run on RE2 (google-re2), whose matching time is linear in the text: a pattern such as
`(a+)+b`, which backtracks for seconds on a few dozen characters under Python's `re`, costs
what any other pattern costs. A pattern RE2 cannot run (a backreference, a lookaround, a
repetition over 1000, a program over its memory budget) is refused when the configuration
is read, naming the pattern and why. The replacement keeps `re`'s syntax (`\\1`, `\\g<name>`,
`\\n`), checked against the pattern's groups at the same time, and is expanded here, text
for text: nothing is re-encoded (a lone surrogate in a body stays as it was).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import re2

#: A string of the compiled replacement, or the number of the group it inserts.
_Piece = str | int

#: The first code point of the stand-in characters `_template` marks groups with (plane 15,
#: private use); the ones a replacement itself holds are skipped.
_MARK_BASE = 0xF0000


class ScrubPattern:
    """One `scrub` entry, compiled: `sub(text)` replaces every match in `text`."""

    __slots__ = ("_bytes", "_regex", "_template", "pattern", "replace")

    def __init__(self, pattern: str, replace: str) -> None:
        """A ValueError says why RE2 cannot run `pattern`, or why `replace` does not fit it
        (a sentence that follows the pattern's name)."""
        self.pattern = pattern
        self.replace = replace
        self._regex: Any = _compile(pattern)
        self._bytes: Any = None  # the pattern for text that is no valid UTF-8, on first use
        self._template = _template(replace, self._regex.groups, self._regex.groupindex)

    def sub(self, text: str) -> str:
        """`text` with every match of the pattern replaced, as `re.sub` would."""
        try:
            done: str = self._sub(self._regex, text, "")
            return done
        except UnicodeEncodeError:
            # a lone surrogate (a body decoded with surrogates kept): RE2 matches UTF-8, so
            # the text goes through as bytes and comes back byte for byte
            if self._bytes is None:
                self._bytes = _compile(self.pattern.encode("utf-8"))
            raw = text.encode("utf-8", "surrogatepass")
            as_bytes: bytes = self._sub(self._bytes, raw, b"")
            return as_bytes.decode("utf-8", "surrogatepass")

    def _sub(self, regex: Any, text: Any, empty: Any) -> Any:
        pieces: list[Any] = []
        end = 0
        for match in regex.finditer(text):
            pieces.append(text[end : match.start()])
            for piece in self._template:
                if isinstance(piece, int):
                    pieces.append(match.group(piece) or empty)
                elif isinstance(text, bytes):
                    pieces.append(piece.encode("utf-8", "surrogatepass"))
                else:
                    pieces.append(piece)
            end = match.end()
        if not pieces:
            return text
        pieces.append(text[end:])
        return empty.join(pieces)


def compile_scrub(rules: Sequence[tuple[str, str]]) -> tuple[ScrubPattern, ...]:
    """The project's `scrub` entries, compiled in order."""
    return tuple(ScrubPattern(pattern, replace) for pattern, replace in rules)


def _compile(pattern: str | bytes) -> Any:
    options = re2.Options()
    options.log_errors = False  # RE2 would print each refusal on stderr: the error says it
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        msg = (
            f"does not compile under RE2, the linear-time engine scrub patterns run on: "
            f"{reason} (RE2 has no backreferences or lookarounds and repeats at most 1000 "
            "times: write the pattern without them)"
        )
        raise ValueError(msg) from None


def _template(replace: str, groups: int, names: dict[str, int]) -> tuple[_Piece, ...]:
    """`replace` as literal strings and group numbers, by `re`'s own reading of it: a stand-in
    pattern with the same groups, each capturing one private-use character, expands it."""
    used = {ord(c) for c in replace}
    marks: list[int] = []
    code = _MARK_BASE
    while len(marks) < groups:
        if code not in used:
            marks.append(code)
        code += 1
    by_number = {number: name for name, number in names.items()}
    stand_in = "".join(
        f"(?P<{by_number[i]}>{re.escape(chr(marks[i - 1]))})"
        if i in by_number
        else f"({re.escape(chr(marks[i - 1]))})"
        for i in range(1, groups + 1)
    )
    try:
        match = re.fullmatch(stand_in, "".join(chr(m) for m in marks))
        assert match is not None  # each group matches its own character
        expanded = match.expand(replace)
    except (re.error, IndexError) as exc:
        msg = f"has a replacement that does not fit its {groups} group(s): {exc}"
        raise ValueError(msg) from None
    group_of = {chr(m): i for i, m in enumerate(marks, start=1)}
    pieces: list[_Piece] = []
    literal: list[str] = []
    for char in expanded:
        if char in group_of:
            if literal:
                pieces.append("".join(literal))
                literal = []
            pieces.append(group_of[char])
        else:
            literal.append(char)
    if literal:
        pieces.append("".join(literal))
    return tuple(pieces)
