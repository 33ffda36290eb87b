"""`[tool.hashreplay]` validation errors in TOML terms, naming the key and the file.

pydantic says `Input should be a valid tuple`; a user wrote TOML, so the message says
"`passthrough` must be a list of strings, got a string ('http://localhost')".
"""

from __future__ import annotations

import datetime
import enum
import json
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError
from pydantic.fields import FieldInfo


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
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
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
