"""Reading vcrpy / pytest-recording cassettes for `hashreplay import vcr`.

A cassette (format version 1, YAML or JSON) holds `interactions`, each a `request`
(`method`, `uri`, `headers` as lists of values, `body`) and a `response` (`status.code`,
`headers`, `body.string`; the older httpx layout has `status_code` and `content`). Bodies
vcrpy kept compressed (gzip, deflate, br) are decoded, as a live response is before it is
recorded. The test id comes from pytest-recording's layout,
`<dir>/cassettes/<module>/[<Class>.]<test>.yaml` → `<dir>/<module>.py::[<Class>::]<test>`,
or is given for one cassette. Interactions keep their order, so identical requests of a
test become one recorded sequence. One unreadable interaction skips its whole cassette:
an import never writes part of a test's exchanges.

YAML needs PyYAML (`pip install 'hashreplay[import]'`), imported only here.
"""

from __future__ import annotations

import ast
import datetime
import email.utils
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson

from hashreplay.core.bodies import DecodedTooLarge, decode_limited
from hashreplay.core.constants import DEFAULT_MAX_BODY_BYTES
from hashreplay.core.matching import parse_match_on
from hashreplay.core.nesting import MAX_NESTING, deep_field, too_deep_problem
from hashreplay.engine.http import IncomingRequest, LiveExchange
from hashreplay.engine.importing import Entry, Read, Reader, Skipped, UnreadableSource

CASSETTES_DIRNAME = "cassettes"


_YAML_SUFFIXES = (".yaml", ".yml")


def vcr_reader(
    *,
    root: Path,
    test_id: str | None = None,
    hosts: tuple[str, ...] = (),
    max_bytes: int = DEFAULT_MAX_BODY_BYTES,
    match_on: tuple[str, ...] | None = None,
) -> Reader:
    """A reader of cassettes under project `root`: every cassette under `test_id` when given,
    else under the id its place in pytest-recording's layout gives; only requests to `hosts`
    when any are given. A test id met twice is a duplicate, skipped. `max_bytes`
    (`max_body_bytes`) bounds what a cassette may grow to in memory: its YAML aliases
    expanded, and each compressed body decoded. Each cassette is keyed as vcrpy matched it
    (its `vcr_config`'s `match_on`, else vcrpy's default), unless `match_on` is given."""
    seen: dict[str, Path] = {}

    def read(path: Path) -> Read:
        test = test_id or layout_test_id(path, root)
        earlier = seen.get(test)
        if earlier is not None and earlier != path.resolve():
            reason = f"duplicate: test {test} was imported from {earlier} already"
            return Read(skipped=[Skipped(str(path), reason)])
        read_ = read_cassette(path, test, hosts, max_bytes)
        seen[test] = path.resolve()
        matched = match_on if match_on is not None else cassette_match_on(path, root)
        read_.entries[:] = [replace(e, match_on=matched) for e in read_.entries]
        return read_

    return read


def layout_test_id(path: Path, root: Path) -> str:
    """`<dir>/cassettes/<module>/<Class>.<test>.yaml` → `<dir>/<module>.py::<Class>::<test>`,
    `<dir>` relative to the project root."""
    parts = path.resolve().parts
    if len(parts) < 3 or parts[-3] != CASSETTES_DIRNAME:
        msg = (
            "not in pytest-recording's layout (<dir>/cassettes/<module>/<test>.yaml): "
            "give its test with --test-id"
        )
        raise UnreadableSource(msg)
    directory = Path(*parts[:-3])
    try:
        where = directory.relative_to(root.resolve()).as_posix()
    except ValueError:
        msg = f"outside the project root {root}: give its test with --test-id"
        raise UnreadableSource(msg) from None
    module = parts[-2]
    stem = path.name
    for suffix in (*_YAML_SUFFIXES, ".json"):
        stem = stem.removesuffix(suffix)
    name = stem
    head, dot, tail = stem.partition(".")
    if dot and head[:1].isupper() and "[" not in head:
        name = f"{head}::{tail}"  # a test method: `<Class>.<test>`
    prefix = f"{where}/" if where not in ("", ".") else ""
    return f"{prefix}{module}.py::{name}"


#: vcrpy's default `match_on`
VCR_DEFAULT_MATCH_ON = ("method", "scheme", "host", "port", "path", "query")

#: vcrpy's matchers as hashreplay's parts; the host is never part of a key, and headers or
#: custom matchers have no equivalent (they are left out, so matching is looser, never stricter)
_VCR_PARTS = {
    "method": "method",
    "uri": "endpoint",
    "path": "path",
    "query": "query",
    "body": "body",
    "raw_body": "body",
}


def vcr_match_on(matchers: tuple[str, ...]) -> tuple[str, ...]:
    """vcrpy's `match_on` as hashreplay's: `("method", "uri")` → `("method", "endpoint")`."""
    parts = tuple(_VCR_PARTS[m] for m in matchers if m in _VCR_PARTS)
    return parse_match_on(parts or ("method", "endpoint"), source="vcr_config match_on")


def cassette_match_on(path: Path, root: Path) -> tuple[str, ...]:
    """How vcrpy matched a cassette's requests: the `match_on` of the nearest `conftest.py`
    `vcr_config` fixture that returns a dict literal (read with `ast`, never imported),
    from the test's directory up to the project root; else vcrpy's default."""
    parts = path.resolve().parts
    in_layout = len(parts) >= 3 and parts[-3] == CASSETTES_DIRNAME
    directory = Path(*parts[:-3]) if in_layout else Path(*parts[:-1])
    top = root.resolve()
    while True:
        found = _conftest_match_on(directory / "conftest.py")
        if found is not None:
            return vcr_match_on(found)
        if directory in (top, directory.parent) or top not in directory.parents:
            return vcr_match_on(VCR_DEFAULT_MATCH_ON)
        directory = directory.parent


def _conftest_match_on(conftest: Path) -> tuple[str, ...] | None:
    """The `match_on` a conftest's `vcr_config` declares (vcrpy's default when it returns a
    dict without one); None when the file has no `vcr_config` returning a dict literal."""
    try:
        tree = ast.parse(conftest.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if (
            not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            or node.name != "vcr_config"
        ):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.Return) and isinstance(inner.value, ast.Dict):
                for key, value in zip(inner.value.keys, inner.value.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == "match_on":
                        try:
                            given = ast.literal_eval(value)
                        except ValueError:
                            return VCR_DEFAULT_MATCH_ON
                        if isinstance(given, (list, tuple)):
                            return tuple(str(m) for m in given)
                return VCR_DEFAULT_MATCH_ON
    return None


def read_cassette(
    path: Path, test_id: str, hosts: tuple[str, ...] = (), max_bytes: int = DEFAULT_MAX_BODY_BYTES
) -> Read:
    data = _load(path, max_bytes)
    if not isinstance(data, dict) or not isinstance(data.get("interactions"), list):
        msg = "unknown shape: no `interactions` list (not a vcrpy cassette?)"
        raise UnreadableSource(msg)
    version = data.get("version", 1)
    if version != 1:
        msg = f"cassette format version {version!r}; only version 1 is known"
        raise UnreadableSource(msg)
    entries: list[Entry] = []
    skipped: list[Skipped] = []
    for index, interaction in enumerate(data["interactions"], start=1):
        source = f"{path}#{index}"
        try:
            incoming, exchange = _interaction(interaction, max_bytes)
        except DecodedTooLarge as exc:
            msg = (
                f"interaction {index}: {exc}, over max_body_bytes ({exc.limit}) (a "
                "compression bomb?); not imported: raise max_body_bytes in [tool.hashreplay] "
                "if the body is genuine"
            )
            raise UnreadableSource(msg) from None
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            msg = f"interaction {index} is unreadable: {type(exc).__name__}: {exc}"
            raise UnreadableSource(msg) from None
        host = urlsplit(incoming.url).hostname or ""
        if hosts and host not in hosts:
            reason = f"host {host} is not one of --host {', '.join(hosts)}"
            skipped.append(Skipped(source, reason, fatal=False))
            continue
        entries.append(Entry(test_id, source, incoming, exchange))
    return Read(entries, skipped)


def _load(path: Path, max_bytes: int) -> Any:
    content = path.read_bytes()
    if path.suffix.lower() == ".json":
        try:
            data = orjson.loads(content)
        except orjson.JSONDecodeError as exc:
            if "depth" in exc.msg:  # orjson stops at 1,024 levels
                raise UnreadableSource(f"{too_deep_problem()}; not imported") from None
            msg = f"not JSON: {exc}"
            raise UnreadableSource(msg) from None
    else:
        loads = _yaml_loader()
        try:
            data = loads(content)
        except RecursionError:
            raise UnreadableSource(f"{too_deep_problem()}; not imported") from None
        except Exception as exc:  # yaml.YAMLError and constructor errors for unsafe tags
            if "nesting depth" in str(exc):  # libyaml stops at 1,000 levels
                raise UnreadableSource(f"{too_deep_problem()}; not imported") from None
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            msg = f"not readable YAML: {first}"
            raise UnreadableSource(msg) from None
        _check_expansion(data, len(content), max_bytes)
    deep = deep_field(data, "(cassette)", MAX_NESTING + 8)  # a body, and the cassette's own
    if deep is not None:
        raise UnreadableSource(f"{deep}: {too_deep_problem()}; not imported")
    return data


def _check_expansion(data: Any, size: int, max_bytes: int) -> None:
    """Refuse a cassette whose YAML aliases (`&a`, `*a`) make it, expanded, more than
    `max_bytes` larger than the file (a "billion laughs" document), or make it contain
    itself. The YAML loader shares one object per anchor, so the expanded size is counted
    over the shared objects, once each, without ever building the expansion."""
    limit = size + max_bytes
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(data, False)]
    while stack:
        value, done = stack.pop()
        key = id(value)
        children = [*value.keys(), *value.values()] if isinstance(value, dict) else list(value)
        if done:
            on_path.discard(key)
            total = 1 + sum(_leaf_size(c) if _is_leaf(c) else sizes[id(c)] for c in children)
            if total > limit:
                msg = (
                    f"its YAML aliases expand it to more than max_body_bytes ({max_bytes}) "
                    f'beyond the file\'s own {size} bytes (a "billion laughs" cassette?); '
                    "not imported: raise max_body_bytes in [tool.hashreplay] if it is genuine"
                )
                raise UnreadableSource(msg)
            sizes[key] = total
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise UnreadableSource("a YAML alias makes the cassette contain itself; not imported")
        on_path.add(key)
        stack.append((value, True))
        stack.extend((c, False) for c in children if not _is_leaf(c) and id(c) not in sizes)


def _is_leaf(value: Any) -> bool:
    return not isinstance(value, (dict, list, tuple))


def _leaf_size(value: Any) -> int:
    return len(value) if isinstance(value, (str, bytes)) else 8


def _yaml_loader() -> Callable[[bytes], Any]:
    try:
        import yaml
    except ImportError:
        msg = (
            "reading YAML cassettes needs PyYAML: pip install 'hashreplay[import]' "
            "(JSON cassettes need nothing more)"
        )
        raise UnreadableSource(msg) from None

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):  # type: ignore[valid-type,misc]
        """Safe, plus the harmless Python tags old cassettes carry (str, tuple)."""

    def scalar(loader: Any, node: Any) -> Any:
        return loader.construct_scalar(node)

    def sequence(loader: Any, node: Any) -> Any:
        return tuple(loader.construct_sequence(node))

    Loader.add_constructor("tag:yaml.org,2002:python/str", scalar)
    Loader.add_constructor("tag:yaml.org,2002:python/unicode", scalar)
    Loader.add_constructor("tag:yaml.org,2002:python/tuple", sequence)

    def loads(content: bytes) -> Any:
        return yaml.load(content, Loader=Loader)

    return loads


def _headers(raw: Any) -> list[tuple[str, str]]:
    """vcrpy's `{name: [values]}` (or `{name: value}`) as header pairs."""
    if not raw:
        return []
    pairs: list[tuple[str, str]] = []
    for name, values in dict(raw).items():
        for value in values if isinstance(values, (list, tuple)) else [values]:
            pairs.append((str(name), str(value)))
    return pairs


def _bytes(value: Any) -> bytes:
    if value is None:
        return b""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    msg = f"a body of type {type(value).__name__}"
    raise TypeError(msg)


def _interaction(
    interaction: dict[str, Any], max_bytes: int
) -> tuple[IncomingRequest, LiveExchange]:
    request, response = interaction["request"], interaction["response"]
    body = request.get("body")
    if isinstance(body, dict):  # some serialisers wrap request bodies like responses
        body = body.get("string")
    incoming = IncomingRequest(
        str(request["method"]).upper(),
        str(request["uri"]),
        _headers(request.get("headers")),
        _bytes(body),
    )
    if "status_code" in response:  # the old httpx layout
        status, content = int(response["status_code"]), response.get("content")
    else:
        status, content = (
            int(response["status"]["code"]),
            (response.get("body") or {}).get("string"),
        )
    headers = _headers(response.get("headers"))
    raw = _bytes(content)
    coding = next((v for k, v in headers if k.lower() == "content-encoding"), None)
    if coding is not None:
        try:
            decoded = decode_limited(coding, raw, max_bytes)
        except DecodedTooLarge:
            raise
        except Exception as exc:  # zlib.error, brotli.error
            msg = f"the {coding} body does not decode: {exc}"
            raise ValueError(msg) from exc
        if decoded is not None:
            raw = decoded
            headers = [(k, v) for k, v in headers if k.lower() != "content-encoding"]
    headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
    chunked = any(k.lower() == "transfer-encoding" for k, _ in headers)
    day = recorded_day(interaction.get("recorded_at"))
    exchange = LiveExchange(status, headers, [raw] if raw else [], chunked, recorded_on=day)
    return incoming, exchange


def recorded_day(value: Any) -> str | None:
    """The UTC day of an interaction's `recorded_at` (docs/recordings.md, "Age"): an HTTP
    date as Ruby's VCR writes it (`Tue, 01 Nov 2011 04:58:44 GMT`), an ISO 8601 day or
    time (a time without an offset is taken as UTC), or a YAML timestamp; None when absent.
    A ValueError names a value that is none of these."""
    if value is None:
        return None
    when: datetime.date | None = value if isinstance(value, datetime.date) else None
    if when is None and isinstance(value, str) and value.strip():
        text = value.strip()
        try:
            when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(text)
            except (TypeError, ValueError, IndexError):
                when = None
    if when is None:
        msg = (
            f"recorded_at {value!r} is not a date (expected an HTTP date like 'Tue, 01 Nov "
            "2011 04:58:44 GMT' or ISO 8601 like '2011-11-01T04:58:44Z')"
        )
        raise ValueError(msg)
    if isinstance(when, datetime.datetime):
        if when.tzinfo is not None:
            when = when.astimezone(datetime.timezone.utc)
        when = when.date()
    return when.isoformat()
