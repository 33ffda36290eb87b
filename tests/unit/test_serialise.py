"""`hashreplay.core.typed`: typed values to and from JSON, behind a type allowlist (§2)."""

from __future__ import annotations

import importlib.util
import os
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from hashreplay.core.errors import RecordingError
from hashreplay.core.typed import TypeAllowlist, from_jsonable, to_jsonable

ALLOW = TypeAllowlist([__name__])


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int


class Message(BaseModel):
    role: str
    content: str | None = None
    score: float = 0.0


class Completion(BaseModel):
    id: str
    messages: list[Message]
    usage: Usage
    by_role: dict[str, Message] = {}
    created: datetime | None = None


class Drifted(BaseModel):
    count: int


class CustomError(Exception):
    pass


class KeywordOnlyError(Exception):
    def __init__(self, message: str, *, response: object, body: object) -> None:
        super().__init__(message)
        self.response = response
        self.body = body


class FormattingError(Exception):
    """Builds its message from its argument, as many libraries' errors do."""

    def __init__(self, used: int) -> None:
        super().__init__(f"quota exceeded: {used} tokens used")
        self.used = used


def through_json(value: Any) -> Any:
    """What a recording file does to a value: JSON bytes and back."""
    return orjson.loads(orjson.dumps(to_jsonable(value)))


def sample_completion() -> Completion:
    return Completion(
        id="rec-0123456789ab",
        messages=[Message(role="user", content="hi"), Message(role="assistant", score=0.5)],
        usage=Usage(prompt_tokens=3, completion_tokens=5),
        by_role={"user": Message(role="user", content="hi")},
        created=datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc),
    )


# --- models --------------------------------------------------------------------------------


def test_model_is_wrapped_with_its_type_name() -> None:
    data = to_jsonable(Usage(prompt_tokens=1, completion_tokens=2))
    assert data == {
        "__type__": f"{__name__}.Usage",
        "__data__": {"prompt_tokens": 1, "completion_tokens": 2},
    }


def test_nested_model_round_trip() -> None:
    value = sample_completion()
    back = from_jsonable(through_json(value), ALLOW)
    assert type(back) is Completion
    assert back == value
    assert type(back.messages[0]) is Message
    assert type(back.usage) is Usage


def test_list_and_dict_of_models_round_trip() -> None:
    value = {
        "first": [Usage(prompt_tokens=1, completion_tokens=2), Message(role="x")],
        "plain": {"n": 1, "s": "t", "l": [None, True]},
        "model": sample_completion(),
    }
    back = from_jsonable(through_json(value), ALLOW)
    assert back == value
    assert [type(v) for v in back["first"]] == [Usage, Message]
    assert type(back["model"]) is Completion


def test_tuple_becomes_list() -> None:
    assert to_jsonable((1, Message(role="r"))) == [
        1,
        {"__type__": f"{__name__}.Message", "__data__": {"role": "r", "content": None, "score": 0}},
    ]


def test_plain_values_unchanged() -> None:
    value = {"a": [1, 2.5, "x", None, True], "b": {}}
    assert to_jsonable(value) == value
    assert from_jsonable(value, ALLOW) == value


def test_model_construct_fallback_when_data_no_longer_validates() -> None:
    data = {"__type__": f"{__name__}.Drifted", "__data__": {"count": "many"}}
    back = from_jsonable(data, ALLOW)
    assert type(back) is Drifted
    assert back.count == "many"


def test_type_that_is_not_a_model_is_refused() -> None:
    data = {"__type__": f"{__name__}.CustomError", "__data__": {}}
    with pytest.raises(RecordingError, match="neither a pydantic model nor a dataclass"):
        from_jsonable(data, ALLOW, path="rec.json")


# --- allowlist -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dotted",
    [
        "os.system",
        "subprocess.Popen",
        "posix.system",
        "importlib.import_module",
        "openaix.Thing",
        f"{__name__}_evil.Thing",
        "shutil.rmtree",
    ],
)
def test_type_outside_allowlist_is_refused(dotted: str) -> None:
    data = {"__type__": dotted, "__data__": {}}
    with pytest.raises(RecordingError) as info:
        from_jsonable(data, ALLOW, path=Path("tests/recordings/abc.json"))
    message = str(info.value)
    assert dotted in message
    assert "tests/recordings/abc.json" in message
    assert "refusing" in message


def test_exception_type_outside_allowlist_is_refused() -> None:
    data = {"__exception__": "subprocess.CalledProcessError", "args": [1, "x"], "message": ""}
    with pytest.raises(RecordingError, match=r"subprocess\.CalledProcessError"):
        from_jsonable(data, ALLOW)


def test_allowlist_prefix_matching() -> None:
    allow = TypeAllowlist(["mypkg"])
    assert allow.allows("mypkg.Model")
    assert allow.allows("mypkg.sub.Model")
    assert not allow.allows("mypkg_evil.Model")
    assert not allow.allows("evil.mypkg.Model")
    assert allow.allows("openai.types.Model")  # the default SDK prefixes are always in


@pytest.fixture
def canary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An importable module that records in the environment that it was imported."""
    name = f"hashreplay_canary_{uuid.uuid4().hex}"
    flag = f"{name.upper()}_IMPORTED"
    (tmp_path / f"{name}.py").write_text(
        "import os\n"
        "from pydantic import BaseModel\n"
        f"os.environ[{flag!r}] = '1'\n"
        "class Thing(BaseModel):\n"
        "    x: int = 0\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    monkeypatch.delenv(flag, raising=False)
    yield name
    sys.modules.pop(name, None)


def test_refused_module_is_never_imported(canary: str) -> None:
    flag = f"{canary.upper()}_IMPORTED"
    assert importlib.util.find_spec(canary) is not None  # it could be imported
    data = {"__type__": f"{canary}.Thing", "__data__": {"x": 1}}
    with pytest.raises(RecordingError):
        from_jsonable(data, ALLOW)
    exc_data = {"__exception__": f"{canary}.Thing", "args": [], "message": ""}
    with pytest.raises(RecordingError):
        from_jsonable(exc_data, ALLOW)
    assert canary not in sys.modules
    assert flag not in os.environ


def test_allowed_module_is_imported(canary: str) -> None:
    # Control for the test above: the canary does report its import when allowed.
    back = from_jsonable(
        {"__type__": f"{canary}.Thing", "__data__": {"x": 1}}, TypeAllowlist([canary])
    )
    assert type(back).__name__ == "Thing"
    assert back.x == 1
    assert os.environ[f"{canary.upper()}_IMPORTED"] == "1"


@pytest.mark.parametrize(
    "dotted",
    [f"{__name__}.RemovedModel", f"{__name__}.Usage.Nested", f"{__name__}_gone.sub.Model"],
)
def test_type_that_no_longer_exists(dotted: str) -> None:
    allow = TypeAllowlist([__name__, f"{__name__}_gone"])
    with pytest.raises(RecordingError) as info:
        from_jsonable({"__type__": dotted, "__data__": {}}, allow, path="r.json")
    message = str(info.value)
    assert dotted in message
    assert "no longer exists" in message
    assert "r.json" in message


def test_builtin_function_is_not_a_type() -> None:
    with pytest.raises(RecordingError):
        from_jsonable({"__exception__": "builtins.eval", "args": ["1"], "message": ""}, ALLOW)


# --- exceptions ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "exc",
    [
        ValueError("x"),
        KeyError("missing"),
        TimeoutError(),
        CustomError("code", 42, None),
        CustomError("plain message"),
    ],
    ids=repr,
)
def test_exception_round_trip_keeps_type_args_message(exc: BaseException) -> None:
    back = from_jsonable(through_json(exc), ALLOW)
    assert type(back) is type(exc)
    assert back.args == exc.args
    assert str(back) == str(exc)


def test_exception_json_shape() -> None:
    assert to_jsonable(ValueError("x")) == {
        "__exception__": "builtins.ValueError",
        "args": ["x"],
        "message": "x",
    }


def test_exception_requiring_keyword_arguments() -> None:
    exc = KeywordOnlyError("Error code: 429 - rate limited", response=object(), body=None)
    back = from_jsonable(through_json(exc), ALLOW)
    assert type(back) is KeywordOnlyError
    assert back.args == ("Error code: 429 - rate limited",)
    assert str(back) == "Error code: 429 - rate limited"
    with pytest.raises(KeywordOnlyError, match="rate limited"):
        raise back


def test_exception_whose_constructor_formats_its_message() -> None:
    exc = FormattingError(5)
    back = from_jsonable(through_json(exc), ALLOW)
    assert type(back) is FormattingError
    assert back.args == exc.args == ("quota exceeded: 5 tokens used",)
    assert str(back) == "quota exceeded: 5 tokens used"


def test_exception_with_unserialisable_arg_keeps_repr() -> None:
    exc = CustomError(b"raw")
    data = to_jsonable(exc)
    assert data["args"] == ["b'raw'"]
    back = from_jsonable(through_json(exc), ALLOW)
    assert type(back) is CustomError
    assert back.args == ("b'raw'",)


# --- property ------------------------------------------------------------------------------

texts = st.text(max_size=12)
floats = st.floats(allow_nan=False, allow_infinity=False)
messages = st.builds(Message, role=texts, content=st.none() | texts, score=floats)
completions = st.builds(
    Completion,
    id=texts,
    messages=st.lists(messages, max_size=4),
    usage=st.builds(
        Usage,
        prompt_tokens=st.integers(-(2**63), 2**63 - 1),
        completion_tokens=st.integers(0, 10**6),
    ),
    by_role=st.dictionaries(texts, messages, max_size=3),
    created=st.none()
    | st.datetimes(
        min_value=datetime(1900, 1, 1),
        max_value=datetime(2200, 1, 1),
        timezones=st.just(timezone.utc),
    ),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(completions, max_size=3), st.dictionaries(texts, completions, max_size=2))
def test_nested_models_round_trip_property(
    as_list: list[Completion], as_dict: dict[str, Completion]
) -> None:
    value = {"list": as_list, "dict": as_dict}
    back = from_jsonable(through_json(value), ALLOW)
    assert back == value
    assert all(type(v) is Completion for v in back["list"])
    assert all(type(v) is Completion for v in back["dict"].values())
