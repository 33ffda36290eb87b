"""Matching rules (docs/design.md §14, contract): which parts of a request name its recording.

The default key (§3) hashes method, endpoint and the normalised body. A `MatchRule` narrows
it: `ignore` leaves request paths out (`body.max_tokens`, `body.messages[*].content[*]
.cache_control`, `body.messages[-1]`, `query.ts`: the miss report's path syntax, `[*]` any
element, `[-1]` the last) and `match_on` names the parts kept (`["method", "endpoint"]`
matches as vcrpy does by default). `repeat` says what answers a call past the end of a
recorded sequence.

Pure: a rule projects a request's method, endpoint and body to what is hashed; the engine
hashes the projection with the rule itself (`MatchRule.as_json`), so a key made under one
rule never equals a key made under another, and the default rule adds nothing to the hash
(every strict key stays what it was). A file recorded under a narrower rule stores it as
`match`, with where the rule came from (`from`, a `RuleSource`): a project's rule follows
the configuration (replay does not look a file up by a project rule it no longer has, and
`hashreplay rehash` re-keys it to the current one), a marker's or an import's stays the
file's own.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode

import orjson

from hashreplay.core.constants import MODEL_LIST_PREFIX
from hashreplay.core.errors import ConfigError
from hashreplay.core.modes import Choice

#: `[*]` in a path: every element of a list (every value of an object).
STAR: Final = "*"

#: The parts of a request `match_on` may name; `endpoint` is `path` and `query` together.
MATCH_PARTS: Final = ("method", "endpoint", "path", "query", "body")
DEFAULT_MATCH_ON: Final = ("method", "endpoint", "body")

PATH_FORMS: Final = (
    "`body.<key>` followed by `.<key>`, `[<index>]`, `[-1]` (the last) or `[*]` (any element), "
    "e.g. `body.messages[*].content[*].cache_control`; or `query.<parameter>`, e.g. `query.ts`;"
    " or a WebSocket frame's field, e.g. `frames[3].session.instructions`"
)

_STEP = re.compile(r"\.([^.\[\]\s]+)|\[(\*|-?\d+)\]")
_ROOT = re.compile(r"[A-Za-z_]+")

Step = str | int


class Repeat(Choice):
    """What answers a call past the end of a recorded sequence."""

    STRICT = "strict"
    LAST = "last"

    @classmethod
    def hint(cls) -> str:
        return (
            ' ("last" answers calls past the end of a recorded sequence with its last '
            'response, "strict" makes them a miss)'
        )


class RuleSource(Choice):
    """Where a file's narrower rule came from (`match.from`)."""

    #: `[tool.hashreplay]` `ignore` / `match_on`: the configuration stays in charge
    PROJECT = "project"
    #: `@pytest.mark.hashreplay(ignore=…, match_on=…)`: the file keeps it
    MARKER = "marker"
    #: `hashreplay import` (a cassette's `match_on`): the file keeps it
    IMPORT = "import"

    @classmethod
    def hint(cls) -> str:
        return (
            ' ("project" follows [tool.hashreplay], "marker" and "import" stay the file\'s '
            "own rule)"
        )


#: The key of `match` that says where the rule came from; not part of the key.
SOURCE_KEY: Final = "from"


def parse_path(text: object, *, source: str = "ignore") -> tuple[str, tuple[Step, ...]]:
    """A request path as its root (`body`, `query`) and steps (keys, indexes, `STAR`); a
    ConfigError naming `source` and the valid forms for anything else."""
    if not isinstance(text, str) or not text.strip():
        msg = f"{source}: {text!r} is not a request path; use {PATH_FORMS}"
        raise ConfigError(msg)
    text = text.strip()
    root = _ROOT.match(text)
    steps: list[Step] = []
    at = root.end() if root else 0
    while at < len(text):
        found = _STEP.match(text, at)
        if found is None:
            msg = f"{source}: cannot parse {text!r} at {text[at:]!r}; use {PATH_FORMS}"
            raise ConfigError(msg)
        key, index = found.groups()
        steps.append(key if key is not None else STAR if index == STAR else int(index))
        at = found.end()
    name = root.group() if root else ""
    if name == "frames" and (not steps or (isinstance(steps[0], str) and steps[0] != STAR)):
        msg = (
            f"{source}: {text!r} must name a frame first, like `frames[3].session.instructions`"
            " or `frames[*].event_id`"
        )
        raise ConfigError(msg)
    if name not in ("body", "query", "frames") or not steps:
        msg = f"{source}: {text!r} does not start with `body.` or `query.`; use {PATH_FORMS}"
        raise ConfigError(msg)
    if name == "query" and (len(steps) != 1 or not isinstance(steps[0], str) or steps[0] == STAR):
        msg = f"{source}: {text!r} must name one query parameter, like `query.ts`"
        raise ConfigError(msg)
    return name, tuple(steps)


def without(value: Any, steps: Sequence[Step]) -> Any:
    """`value` with what `steps` reach removed; the parts on the way are copied, never
    changed in place, and a path that reaches nothing leaves `value` as it is."""
    if not steps:
        return value
    step, rest = steps[0], steps[1:]
    if type(value) is dict:
        keys = list(value) if step == STAR else [step] if step in value else []
        if not keys:
            return value
        if not rest:
            return {k: v for k, v in value.items() if k not in keys}
        out = dict(value)
        for key in keys:
            out[key] = without(value[key], rest)
        return out
    if type(value) is list and value:
        size = len(value)
        if step == STAR:
            indexes = set(range(size))
        elif type(step) is int and -size <= step < size:
            indexes = {step % size}
        else:
            return value
        if not rest:
            return [v for i, v in enumerate(value) if i not in indexes]
        return [without(v, rest) if i in indexes else v for i, v in enumerate(value)]
    return value


def parse_match_on(value: object, *, source: str = "match_on") -> tuple[str, ...]:
    """`match_on` in its canonical form (known parts, in `MATCH_PARTS` order, `path` and
    `query` together written `endpoint`); a ConfigError naming `source` otherwise."""
    valid = ", ".join(f'"{p}"' for p in MATCH_PARTS)
    if isinstance(value, str) or not isinstance(value, Iterable):
        msg = f"{source}: {value!r} must be a list of request parts ({valid})"
        raise ConfigError(msg)
    parts = set()
    for part in value:
        if part not in MATCH_PARTS:
            msg = f"{source}: unknown request part {part!r}; the parts are {valid}"
            raise ConfigError(msg)
        parts.add(part)
    if not parts:
        msg = f"{source}: name at least one request part ({valid})"
        raise ConfigError(msg)
    if {"path", "query"} <= parts or "endpoint" in parts:
        parts = (parts - {"path", "query"}) | {"endpoint"}
    return tuple(p for p in MATCH_PARTS if p in parts)


class MatchRule:
    """`ignore` paths and `match_on` parts: what of a request goes into its key."""

    __slots__ = ("_body", "_query", "ignore", "match_on", "source")

    def __init__(
        self,
        ignore: Iterable[str] = (),
        match_on: Iterable[str] = DEFAULT_MATCH_ON,
        source: RuleSource | None = None,
    ):
        self.ignore = tuple(sorted(set(ignore)))
        self.match_on = tuple(match_on)
        #: where it came from; None in a file written before files said so (kept as its own).
        #: Not part of the rule: two rules that key alike are equal whatever their source
        self.source = source
        self._body: list[tuple[Step, ...]] = []
        self._query: set[str] = set()
        for text in self.ignore:
            root, steps = parse_path(text)
            if root == "body":
                self._body.append(steps)
            elif root == "query":
                self._query.add(str(steps[0]))
            # a `frames` path leaves a WebSocket frame's field out of its comparison
            # (core/frames.py), not out of the key

    @classmethod
    def parse(
        cls,
        ignore: object = (),
        match_on: object = DEFAULT_MATCH_ON,
        *,
        source: str = "[tool.hashreplay]",
        origin: RuleSource | None = None,
    ) -> MatchRule:
        """A rule from user input (`origin`: where it was given); a ConfigError names
        `source` and the setting."""
        if isinstance(ignore, str) or not isinstance(ignore, Iterable):
            msg = f"{source} ignore: {ignore!r} must be a list of request paths; use {PATH_FORMS}"
            raise ConfigError(msg)
        paths = list(ignore)
        for path in paths:
            parse_path(path, source=f"{source} ignore")
        return cls(paths, parse_match_on(match_on, source=f"{source} match_on"), origin)

    @classmethod
    def from_json(cls, value: object, *, source: str = "match") -> MatchRule:
        """The rule a file stores as `match`; a ConfigError for one that cannot be read."""
        if not isinstance(value, Mapping):
            msg = f"{source}: {value!r} must be an object with `ignore` and `match_on`"
            raise ConfigError(msg)
        unknown = sorted(str(k) for k in value if k not in ("ignore", "match_on", SOURCE_KEY))
        if unknown:
            msg = (
                f"{source}: unknown key {unknown[0]!r}; the keys are `ignore`, `match_on` and "
                f"`{SOURCE_KEY}`"
            )
            raise ConfigError(msg)
        origin = value.get(SOURCE_KEY)
        if origin is not None:
            origin = RuleSource.parse(origin, source=f"{source}.{SOURCE_KEY}")
        ignore = value.get("ignore", ())
        if isinstance(ignore, str) or not isinstance(ignore, Iterable):
            msg = f"{source}.ignore: {ignore!r} must be a list of request paths"
            raise ConfigError(msg)
        for path in ignore:
            parse_path(path, source=f"{source}.ignore")
        match_on = parse_match_on(
            value.get("match_on", DEFAULT_MATCH_ON), source=f"{source}.match_on"
        )
        return cls(ignore, match_on, origin)

    @property
    def is_default(self) -> bool:
        return not self.ignore and self.match_on == DEFAULT_MATCH_ON

    def as_json(self) -> dict[str, list[str]]:
        """The rule as the key hashes it (without its source)."""
        return {"ignore": list(self.ignore), "match_on": list(self.match_on)}

    def stored(self) -> dict[str, Any]:
        """The rule as a file stores it (`match`): `as_json` and, when known, its source."""
        value: dict[str, Any] = {}
        if self.source is not None:
            value[SOURCE_KEY] = self.source.value
        value.update(self.as_json())
        return value

    @property
    def follows_project(self) -> bool:
        """Whether it is a project rule (`[tool.hashreplay]`): the configuration decides how
        its files are keyed, not the file."""
        return self.source is RuleSource.PROJECT

    def with_source(self, source: RuleSource | None) -> MatchRule:
        return MatchRule(self.ignore, self.match_on, source)

    def project(self, method: str, endpoint: str, body: Any) -> tuple[str, str, Any]:
        """What of a request is hashed under this rule: method, endpoint, body."""
        parts = self.match_on
        if "body" in parts:
            for steps in self._body:
                body = without(body, steps)
        else:
            body = None
        path, _, query = endpoint.partition("?")
        if self._query and query:
            pairs = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True)]
            query = urlencode([(k, v) for k, v in pairs if k not in self._query])
        keep_path = "endpoint" in parts or "path" in parts
        keep_query = "endpoint" in parts or "query" in parts
        shown = (path if keep_path else "") + (f"?{query}" if keep_query and query else "")
        return (method if "method" in parts else ""), shown, body

    def describe(self) -> str:
        parts = [f"match_on = {list(self.match_on)}"]
        if self.ignore:
            parts.insert(0, f"ignore = {list(self.ignore)}")
        return ", ".join(parts)

    def described_source(self) -> str:
        """Where it came from, in words, for a report."""
        if self.source is RuleSource.PROJECT:
            return "the project's [tool.hashreplay] rule"
        if self.source is RuleSource.MARKER:
            return "a @pytest.mark.hashreplay rule"
        if self.source is RuleSource.IMPORT:
            return "the rule `hashreplay import` kept from its source"
        return "a rule the file keeps as its own (written before files said where it came from)"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, MatchRule)
            and self.ignore == other.ignore
            and self.match_on == other.match_on
        )

    def __hash__(self) -> int:
        return hash((self.ignore, self.match_on))

    def __repr__(self) -> str:
        return f"MatchRule({self.describe()})"


DEFAULT_RULE: Final = MatchRule()


def file_rule(match: Mapping[str, Any] | None) -> MatchRule | None:
    """The rule a file's `match` names; None for none or one that cannot be read (the file
    is keyed as if it had none; `hashreplay verify` names it)."""
    if match is None:
        return None
    try:
        return MatchRule.from_json(match)
    except ConfigError:
        return None


_MATCH_FIELD = b'\n  "match": '


def directory_rules(directory: Path) -> list[MatchRule]:
    """The narrower rules the recordings of one directory were made under, each once with
    each source (files without `match` use the default rule and are not listed). Read when
    a request of a test there misses under its own rule, once per directory and session: a
    file that does not mention `match` is not parsed, and one whose rule cannot be read is
    left out (`hashreplay verify` names it)."""
    found: list[MatchRule] = []
    try:
        paths = sorted(directory.glob("*.json"))
    except OSError:
        return found
    for path in paths:
        if path.name.startswith(MODEL_LIST_PREFIX):
            continue
        try:
            content = path.read_bytes()
        except OSError:
            continue
        at = content.find(_MATCH_FIELD)
        try:
            start = at + len(_MATCH_FIELD)
            end = content.find(b'\n  "', start) if at >= 0 else -1
            if end >= 0:  # as hashreplay writes it: the object ends at the next top-level line
                value = orjson.loads(content[start:end].rstrip().rstrip(b","))
            elif b'"match"' in content:
                data = orjson.loads(content)
                value = data.get("match") if isinstance(data, dict) else None
            else:
                continue
            if value is None:
                continue
            rule = MatchRule.from_json(value)
        except (orjson.JSONDecodeError, ConfigError):
            continue
        if not rule.is_default and not any(_same(rule, r) for r in found):
            found.append(rule)
    return found


def _same(a: MatchRule, b: MatchRule) -> bool:
    return a == b and a.source is b.source


class RuleIndex:
    """The narrower rules each directory's files use, read on the directory's first miss
    (once per session: replay never pays for it on a hit)."""

    def __init__(self) -> None:
        self._dirs: dict[Path, list[MatchRule]] = {}

    def after_miss(
        self, directories: Iterable[Path], own: MatchRule | None
    ) -> list[MatchRule | None]:
        """The rules to try after `own` (None: the default) missed: the default first (a
        store recorded before the project narrowed its rule), then every narrower rule the
        directories' files keep as their own (a marker's, an import's)."""
        found: list[MatchRule | None] = [] if own is None else [None]
        for directory in self._rules(directories):
            # a project rule the project no longer has does not answer: the configuration
            # decides (`hashreplay rehash` re-keys its files, the miss report says so)
            found.extend(
                r for r in directory if not r.follows_project and r != own and r not in found
            )
        return found

    def stale_project_rules(
        self, directories: Iterable[Path], own: MatchRule | None
    ) -> list[MatchRule]:
        """The project rules files in `directories` were made under that differ from `own`
        (the request's rule now): a miss they would answer is the rule change's."""
        found: list[MatchRule] = []
        for directory in self._rules(directories):
            found.extend(r for r in directory if r.follows_project and r != own and r not in found)
        return found

    def _rules(self, directories: Iterable[Path]) -> Iterable[list[MatchRule]]:
        for directory in directories:
            rules = self._dirs.get(directory)
            if rules is None:
                rules = self._dirs[directory] = directory_rules(directory)
            yield rules
