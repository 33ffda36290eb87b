"""Volatile values in requests (`[tool.hashreplay] volatile_patterns`).

Apps that put random ids or clock values into prompts would hash differently on every run.
Matches of these patterns inside request strings are replaced by numbered placeholders in
order of first appearance (`<uuid:1>`, `<uuid:2>`, the same value always the same number)
before hashing, so such requests hash stably.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import partial

#: Built-in pattern names and what they match.
BUILTIN_PATTERNS: Mapping[str, str] = {
    "uuid": r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b",
    "iso-timestamp": (
        r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"
    ),
    "iso-date": r"\b\d{4}-\d{2}-\d{2}\b",
    "unix-ms": r"\b1\d{12}\b",
    "unix-s": r"\b1\d{9}\b",
    "hex-id": r"\b[0-9a-f]{24,64}\b",
}
#: The placeholder label of a user's own regex.
CUSTOM_LABEL = "volatile"


class VolatilePatterns:
    """Compiled patterns, in the order they are applied."""

    # not a NamedTuple: its truth is whether it has patterns
    __slots__ = ("patterns",)

    def __init__(self, patterns: tuple[tuple[str, re.Pattern[str]], ...] = ()) -> None:
        self.patterns = patterns

    def __bool__(self) -> bool:
        return bool(self.patterns)


def compile_patterns(entries: Iterable[str]) -> VolatilePatterns:
    """Built-in names, or regular expressions (labelled `volatile`). A bad regex raises
    ValueError naming the entry."""
    compiled: list[tuple[str, re.Pattern[str]]] = []
    for entry in entries:
        source = BUILTIN_PATTERNS.get(entry)
        label = entry if source is not None else CUSTOM_LABEL
        try:
            pattern = re.compile(source if source is not None else entry)
        except re.error as exc:
            names = ", ".join(BUILTIN_PATTERNS)
            msg = (
                f"volatile pattern {entry!r} is neither a built-in name ({names}) "
                f"nor a valid regular expression: {exc}"
            )
            raise ValueError(msg) from None
        if pattern.search("") is not None:
            msg = f"volatile pattern {entry!r} matches the empty string"
            raise ValueError(msg)
        compiled.append((label, pattern))
    return VolatilePatterns(tuple(compiled))


class Placeholders:
    """Numbering for one request: value → placeholder, per label, in order of appearance."""

    __slots__ = ("counts", "seen")

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], str] = {}
        self.counts: dict[str, int] = {}

    def replace(self, text: str, patterns: VolatilePatterns) -> str:
        for label, pattern in patterns.patterns:
            if pattern.search(text) is not None:
                text = pattern.sub(partial(self._placeholder, label), text)
        return text

    def _placeholder(self, label: str, match: re.Match[str]) -> str:
        key = (label, match.group(0))
        found = self.seen.get(key)
        if found is None:
            n = self.counts[label] = self.counts.get(label, 0) + 1
            found = self.seen[key] = f"<{label}:{n}>"
        return found
