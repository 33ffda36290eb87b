"""`[tool.hashreplay]` read into one validated model (docs/design.md §9); precedence file <
environment < explicit.

The precedence is coded once, in `load_config`, and every front end (pytest plugin, CLI,
`hashreplay.install()`, `hashreplay serve`) goes through it.

Validation errors are worded in TOML terms, naming the key and the file: pydantic says
`Input should be a valid tuple`; a user wrote TOML, so the message says "`passthrough` must
be a list of strings, got a string ('http://localhost')".
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from hashreplay.core.age import MaxAge
from hashreplay.core.constants import (
    DEFAULT_BLOB_THRESHOLD,
    DEFAULT_MAX_BODY_BYTES,
    MODE_ENV,
    MODE_OPTION,
    PACE_ENV,
    RECORDINGS_DIRNAME,
)
from hashreplay.core.errors import ConfigError
from hashreplay.core.matching import (
    DEFAULT_MATCH_ON,
    MatchRule,
    Repeat,
    RuleSource,
    parse_match_on,
    parse_path,
)
from hashreplay.core.modes import Mode, Pace, RecordFailures, Stale, Unconsumed
from hashreplay.core.network import BlockNetwork, host_entry, passthrough_prefixes
from hashreplay.core.normalise import compile_patterns
from hashreplay.core.paths import PYPROJECT, find_root

if TYPE_CHECKING:
    from pydantic.fields import FieldInfo


class ModeSource(str, Enum):
    """Where the effective mode came from (shown by `hashreplay status`)."""

    DEFAULT = "default"
    FILE = "config"
    ENV = "env"
    OPTION = "option"

    def __str__(self) -> str:
        return self.value


_T = TypeVar("_T")


def _collected(parse: Callable[[object], _T], value: object) -> _T:
    """`parse(value)`, its ConfigError turned into the ValueError pydantic collects, so one
    validation reports every key in error."""
    try:
        return parse(value)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


def parse_scrub(value: object) -> tuple[tuple[str, str], ...]:
    """`scrub` entries as (pattern, replacement) pairs; a ValueError names a bad entry."""
    if isinstance(value, tuple) and all(isinstance(v, tuple) for v in value):
        return value  # already parsed (a copy of a Config)
    if not isinstance(value, list):
        msg = 'must be a list of tables like {pattern = "sess-[0-9]+", replace = "sess-N"}'
        raise ValueError(msg)
    rules: list[tuple[str, str]] = []
    for n, entry in enumerate(value, start=1):
        if not isinstance(entry, dict) or set(entry) != {"pattern", "replace"}:
            msg = f"entry {n} must be a table with exactly `pattern` and `replace`"
            raise ValueError(msg)
        pattern, replace = entry["pattern"], entry["replace"]
        if not isinstance(pattern, str) or not isinstance(replace, str) or not pattern:
            msg = f"entry {n}: `pattern` must be a non-empty string and `replace` a string"
            raise ValueError(msg)
        from hashreplay.core.scrub import ScrubPattern  # RE2 loads only for a project's scrub

        try:
            ScrubPattern(pattern, replace)
        except ValueError as exc:
            msg = f"entry {n}: pattern {pattern!r} (replace {replace!r}) {exc}"
            raise ValueError(msg) from None
        rules.append((pattern, replace))
    return tuple(rules)


class Config(BaseModel):
    """The validated `[tool.hashreplay]` table (docs/design.md §9)."""

    # the schema is built when a configuration is first validated, not when this module loads
    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False, defer_build=True)

    mode: Mode = Mode.REPLAY
    recordings_dir: str = RECORDINGS_DIRNAME
    passthrough: tuple[str, ...] = ()
    match_headers: tuple[str, ...] = ()
    ignore_body_keys: tuple[str, ...] = ()
    redact_keys: tuple[str, ...] = ()
    keep_response_headers: tuple[str, ...] = ()
    callables: tuple[str, ...] = ()
    #: Values in request strings replaced by numbered placeholders before hashing: built-in
    #: names (`uuid`, `iso-timestamp`, `iso-date`, `unix-ms`, `unix-s`, `hex-id`) or regexes.
    volatile_patterns: tuple[str, ...] = ()
    #: `[{pattern = "…", replace = "…"}]`: regex matches replaced in request values before
    #: keying and in everything written, in every front end (docs/design.md §14).
    scrub: tuple[tuple[str, str], ...] = ()
    #: Extra path endings of model-list calls (`GET`), besides `/models`, `/api/tags`, `/api/ps`.
    model_list_endpoints: tuple[str, ...] = ()
    #: Which connections no adapter handled fail a replay-mode test (docs/design.md §2).
    block_network: BlockNetwork = BlockNetwork.NON_LOOPBACK
    #: Hosts (`name`, `name:port` or an address) such connections may reach all the same.
    allowed_hosts: tuple[str, ...] = ()
    #: Placeholder key variables in replay mode: true (the defaults), false, or a table of
    #: `NAME = "value"` added to the defaults (`""` leaves a default out).
    replay_env: bool | dict[str, str] = True
    #: Strings in bodies (and whole non-JSON bodies) over this many bytes are stored once in
    #: `<recordings_dir>/blobs/` and referenced (docs/design.md §13).
    blob_threshold: int = Field(default=DEFAULT_BLOB_THRESHOLD, ge=1)
    #: Bodies over this many bytes are not recorded (checked while they arrive); blobs
    #: larger than this are not read. A recording file is read whatever its size.
    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, ge=1)
    #: Store the head and chunk offsets of every recorded response (docs/scenarios.md).
    record_timing: bool = False
    #: How replay spaces responses out: "instant", "recorded" or "fixed:<ms>" (parsed here,
    #: once: `HASHREPLAY_PACE` overrides the file's).
    pace: Pace = Pace()  # instant
    #: Recorded responses a replayed test did not use: "warn", "fail" or "ignore".
    unconsumed: Unconsumed = Unconsumed.WARN
    #: What a call that got no HTTP response leaves: "responses" (nothing), "all" (its error).
    record_failures: RecordFailures = RecordFailures.RESPONSES
    #: Recorded responses older than this ("<days>d", "<weeks>w") are stale; None: no limit.
    max_age: MaxAge | None = None
    #: What a test does with a stale response: "warn", "fail" or "refresh".
    stale: Stale = Stale.WARN
    #: A drift run (`pytest --hashreplay-drift`) exits 1 when any test drifted; false: it
    #: only reports (docs/design.md §15, "Drift").
    drift_fail: bool = True
    #: Request paths left out of the key (docs/design.md §14): `body.max_tokens`, `query.ts`.
    ignore: tuple[str, ...] = ()
    #: The parts of a request in its key (docs/design.md §14).
    match_on: tuple[str, ...] = DEFAULT_MATCH_ON
    #: What answers a call past the end of a recorded sequence: "strict" (a miss) or "last".
    repeat: Repeat = Repeat.STRICT

    # Filled in by load_config, never read from the file.
    root: Path = Field(default_factory=Path.cwd, exclude=True)
    mode_source: ModeSource = Field(default=ModeSource.DEFAULT, exclude=True)
    config_file: Path | None = Field(default=None, exclude=True)
    #: Why `root` is the root: the file that decided, `HASHREPLAY_ROOT`, or `given`.
    root_reason: str = Field(default="given", exclude=True)

    @field_validator("mode", mode="before")
    @classmethod
    def _parse_mode(cls, value: object) -> Mode:
        return _collected(Mode.parse, value)

    @field_validator("block_network", mode="before")
    @classmethod
    def _parse_block(cls, value: object) -> BlockNetwork:
        return BlockNetwork.parse(value)

    @field_validator("pace", mode="before")
    @classmethod
    def _parse_pace(cls, value: object) -> Pace:
        return _collected(Pace.parse, value)

    @field_validator("unconsumed", mode="before")
    @classmethod
    def _parse_unconsumed(cls, value: object) -> Unconsumed:
        return _collected(Unconsumed.parse, value)

    @field_validator("max_age", mode="before")
    @classmethod
    def _parse_max_age(cls, value: object) -> MaxAge | None:
        return None if value is None else _collected(MaxAge.parse, value)

    @field_validator("stale", mode="before")
    @classmethod
    def _parse_stale(cls, value: object) -> Stale:
        return _collected(Stale.parse, value)

    @field_validator("record_failures", mode="before")
    @classmethod
    def _parse_record_failures(cls, value: object) -> RecordFailures:
        return _collected(RecordFailures.parse, value)

    @field_validator("ignore", mode="after")
    @classmethod
    def _check_ignore(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for path in value:
            _collected(lambda v: parse_path(v, source="ignore"), path)
        return value

    @field_validator("match_on", mode="before")
    @classmethod
    def _parse_match_on(cls, value: object) -> tuple[str, ...]:
        return _collected(lambda v: parse_match_on(v, source="match_on"), value)

    @field_validator("repeat", mode="before")
    @classmethod
    def _parse_repeat(cls, value: object) -> Repeat:
        return _collected(Repeat.parse, value)

    @property
    def match_rule(self) -> MatchRule:
        """The matching rule of the project (docs/design.md §14)."""
        return MatchRule(self.ignore, self.match_on, RuleSource.PROJECT)

    @field_validator("allowed_hosts", mode="after")
    @classmethod
    def _check_hosts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for entry in value:
            host_entry(entry)  # raises ValueError naming the bad entry and the forms
        return value

    @field_validator("passthrough", mode="after")
    @classmethod
    def _check_passthrough(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        passthrough_prefixes(value)  # raises ValueError naming an entry that is not a URL
        return value

    @field_validator("match_headers", "keep_response_headers", mode="after")
    @classmethod
    def _lower_headers(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(sorted({v.lower() for v in value}))

    @field_validator("volatile_patterns", mode="after")
    @classmethod
    def _check_patterns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        compile_patterns(value)  # raises ValueError naming the bad entry
        return value

    @field_validator("scrub", mode="before")
    @classmethod
    def _parse_scrub(cls, value: object) -> tuple[tuple[str, str], ...]:
        return parse_scrub(value)

    @field_validator("model_list_endpoints", mode="after")
    @classmethod
    def _check_endpoints(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for entry in value:
            if not entry.startswith("/"):
                msg = f"model_list_endpoints entry {entry!r} must be a path end like '/models'"
                raise ValueError(msg)
        return value

    @property
    def common_dir(self) -> Path:
        """The common recordings directory: `recordings_dir` relative to the project root."""
        return (self.root / self.recordings_dir).resolve()

    def with_mode(self, mode: Mode, source: ModeSource) -> Config:
        return self.model_copy(update={"mode": mode, "mode_source": source})


def read_table(pyproject: Path) -> dict[str, Any]:
    """The raw `[tool.hashreplay]` table of one file (empty when the file or table is absent)."""
    if sys.version_info >= (3, 11):  # imported on first use (pytest has usually loaded it)
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        msg = f"cannot read {pyproject}: {exc}"
        raise ConfigError(msg) from exc
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        msg = f"{pyproject}: [tool] must be a table, got {type(tool).__name__}"
        raise ConfigError(msg)
    table = tool.get("hashreplay", {})
    if not isinstance(table, dict):
        msg = f"{pyproject}: [tool.hashreplay] must be a table, got {type(table).__name__}"
        raise ConfigError(msg)
    return table


def load_config(
    root: Path | str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    mode: str | Mode | None = None,
    **overrides: Any,
) -> Config:
    """Build the effective config: `pyproject.toml` < environment < explicit arguments.

    `mode` is the command-line/explicit mode (highest precedence). Other keyword arguments
    override file values of the same name (used by `hashreplay serve` options). Raises one
    ConfigError that lists every problem, each naming its key or variable.
    """
    built = _build(root, env, mode, overrides)
    if built.problems:
        raise ConfigError("\n".join(built.problems))
    return built.config


def load_config_reporting(
    root: Path | str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    mode: str | Mode | None = None,
) -> tuple[Config, ConfigError | None]:
    """The config as far as it is valid, for a command that reports on a project
    (`hashreplay status`): each setting in error takes its default, and every problem comes
    back as one ConfigError. Raises it instead when the mode itself is unknown (invalid in the
    file with none given by `INFERENCE_MODE` or `mode`, or invalid where it was given)."""
    built = _build(root, env, mode, {})
    if not built.problems:
        return built.config, None
    error = ConfigError("\n".join(built.problems))
    if not built.mode_known:
        raise error
    return built.config, error


class _Built:
    def __init__(self, config: Config, problems: list[str], mode_known: bool) -> None:
        self.config = config
        #: lines of one message: the file's block, then one line per variable or option
        self.problems = problems
        self.mode_known = mode_known


def _build(
    root: Path | str | None,
    env: Mapping[str, str] | None,
    mode: str | Mode | None,
    overrides: Mapping[str, Any],
) -> _Built:
    """Every setting that is valid, and every problem (the file's all at once)."""
    env = os.environ if env is None else env
    found = find_root(root, env)
    root_path = found.path
    pyproject = root_path / PYPROJECT
    table = read_table(pyproject)
    where = str(pyproject) if pyproject.exists() else "configuration"
    values: dict[str, Any] = dict(table)
    values.update({k: v for k, v in overrides.items() if v is not None})
    known = sorted(k for k in Config.model_fields if k not in _INTERNAL)
    lines = [
        f"  unknown key {key!r}; valid keys are: {', '.join(known)}"
        for key in sorted(_INTERNAL & values.keys())
    ]
    bad = set(_INTERNAL & values.keys())
    fixed = {
        "root": root_path,
        "root_reason": found.reason,
        "config_file": pyproject if table else None,
    }
    try:
        config = Config.model_validate({**_without(values, bad), **fixed})
    except ValidationError as exc:
        lines += explain(exc, where, Config.model_fields, known).splitlines()[1:]
        bad |= {str(error["loc"][0]) for error in exc.errors() if error["loc"]}
        try:  # every other setting still counts
            config = Config.model_validate({**_without(values, bad), **fixed})
        except ValidationError:  # pragma: no cover - a problem no single key explains
            config = Config.model_validate(fixed)
    # the file's value; `hashreplay serve --recordings DIR` names its directory explicitly
    outside = _recordings_dir_outside(config) if overrides.get("recordings_dir") is None else None
    if outside is not None:
        lines.append(f"  {outside}")
        config = config.model_copy(update={"recordings_dir": RECORDINGS_DIRNAME})
    problems = [f"invalid [tool.hashreplay] in {where}:", *lines] if lines else []
    env_pace = env.get(PACE_ENV)
    if env_pace and "pace" not in overrides:
        try:
            config = config.model_copy(update={"pace": Pace.parse(env_pace, source=PACE_ENV)})
        except ConfigError as exc:
            problems.append(str(exc))
    env_mode = env.get(MODE_ENV)
    given, source_name, source = (
        (mode, MODE_OPTION, ModeSource.OPTION)
        if mode is not None
        else (env_mode, MODE_ENV, ModeSource.ENV)
        if env_mode
        else (None, "", ModeSource.DEFAULT)
    )
    if given is not None:
        try:
            return _Built(
                config.with_mode(Mode.parse(given, source=source_name), source), problems, True
            )
        except ConfigError as exc:
            return _Built(config, [*problems, str(exc)], False)
    source = ModeSource.FILE if "mode" in table and "mode" not in bad else ModeSource.DEFAULT
    return _Built(config.with_mode(config.mode, source), problems, "mode" not in bad)


def _recordings_dir_outside(config: Config) -> str | None:
    """Why `recordings_dir` may not be used, or None: as written it must name a directory
    inside the project root (`"../victim2"` or an absolute path elsewhere would have `prune`
    and `rehash` delete and rewrite files that are not the project's). A symlink on the
    way out of the root is judged where the directory is used, like every recordings
    directory's (`core.paths`: refused, naming the link), so `verify` can list it."""
    root = config.root.absolute()
    common = Path(os.path.normpath(root / config.recordings_dir))
    if common == root or root in common.parents:
        return None
    return (
        f"recordings_dir {config.recordings_dir!r} is {common}, outside the project root "
        f"{root}: recordings are read, written and pruned only inside the project; use a "
        'directory inside it (the default is "recordings"), or run from the project that '
        "holds that directory (HASHREPLAY_ROOT)"
    )


def _without(values: Mapping[str, Any], keys: set[str]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if k not in keys}


_INTERNAL = frozenset({"root", "mode_source", "config_file", "root_reason"})


# --- validation errors in TOML terms --------------------------------------------------------


def toml_type(value: Any) -> str:
    """What a TOML value is called: `a string`, `an integer`, `a list`, `a table`, …"""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, datetime.datetime):
        return "a date-time"
    if isinstance(value, datetime.date):
        return "a date"
    if isinstance(value, datetime.time):
        return "a time"
    return f"a {type(value).__name__}"


def expected(annotation: Any) -> str:
    """What a field must be, in TOML words."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (tuple, list) and args:
        return f"a list of {_plural(args[0])}"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(expected(a) for a in args if a is not type(None))
    return _singular(annotation)


def _singular(annotation: Any) -> str:
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return "one of " + ", ".join(str(m.value) for m in annotation)
    return {str: "a string", bool: "a boolean", int: "an integer", float: "a number"}.get(
        annotation, getattr(annotation, "__name__", str(annotation))
    )


def _plural(annotation: Any) -> str:
    return {str: "strings", int: "integers", float: "numbers", bool: "booleans"}.get(
        annotation, f"{getattr(annotation, '__name__', annotation)} values"
    )


def _shown(value: Any) -> str:
    """The value as TOML would spell it (`"http://x"`, `true`, `[1, "a"]`), shortened."""
    if isinstance(value, (datetime.date, datetime.time)):
        text = value.isoformat()
    else:
        text = json.dumps(value, default=str, ensure_ascii=False, separators=(", ", " = "))
    return text if len(text) <= 60 else text[:59] + "…"


#: pydantic's bound errors, as a user would say them
_BOUNDS = {
    "greater_than_equal": "at least",
    "greater_than": "more than",
    "less_than_equal": "at most",
    "less_than": "less than",
}


def explain(
    exc: ValidationError, where: str, fields: Mapping[str, FieldInfo], known: Iterable[str]
) -> str:
    """Every problem of one validation, a line each, under the file it is in."""
    lines = [f"invalid [tool.hashreplay] in {where}:"]
    valid = ", ".join(known)
    for error in exc.errors():
        loc = error["loc"]
        key = str(loc[0]) if loc else "(table)"
        got = error.get("input")
        message = str(error["msg"]).removeprefix("Value error, ").removeprefix(f"{key}: ")
        field = fields.get(key)
        if error["type"] == "extra_forbidden":
            lines.append(f"  unknown key {key!r}; valid keys are: {valid}")
        elif key == "mode":
            lines.append(f"  mode: {message}")
        elif error["type"] in _BOUNDS:
            limit = next(iter(error.get("ctx", {}).values()), "?")
            lines.append(f"  `{key}` must be {_BOUNDS[error['type']]} {limit}, got {_shown(got)}")
        elif error["type"] in ("value_error", "assertion_error") or field is None:
            lines.append(f"  `{key}`: {message} (got {_shown(got)})")
        elif len(loc) > 1 and isinstance(loc[1], int):
            lines.append(
                f"  `{key}` must be {expected(field.annotation)}, got {toml_type(got)} "
                f"({_shown(got)}) as item {loc[1] + 1}"
            )
        else:
            lines.append(
                f"  `{key}` must be {expected(field.annotation)}, got {toml_type(got)} "
                f"({_shown(got)})"
            )
    return "\n".join(lines)
