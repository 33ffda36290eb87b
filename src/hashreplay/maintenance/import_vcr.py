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

from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson

from hashreplay.core.content_coding import decoder_for
from hashreplay.engine.http import IncomingRequest, LiveExchange
from hashreplay.maintenance.importing import Entry, Read, Reader, Skipped, UnreadableSource

CASSETTES_DIRNAME = "cassettes"
_YAML_SUFFIXES = (".yaml", ".yml")


def vcr_reader(*, root: Path, test_id: str | None = None, hosts: tuple[str, ...] = ()) -> Reader:
    """A reader of cassettes under project `root`: every cassette under `test_id` when given,
    else under the id its place in pytest-recording's layout gives; only requests to `hosts`
    when any are given. A test id met twice is a duplicate, skipped."""
    seen: dict[str, Path] = {}

    def read(path: Path) -> Read:
        test = test_id or layout_test_id(path, root)
        earlier = seen.get(test)
        if earlier is not None and earlier != path.resolve():
            reason = f"duplicate: test {test} was imported from {earlier} already"
            return Read(skipped=[Skipped(str(path), reason)])
        read_ = read_cassette(path, test, hosts)
        seen[test] = path.resolve()
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


def read_cassette(path: Path, test_id: str, hosts: tuple[str, ...] = ()) -> Read:
    data = _load(path)
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
            incoming, exchange = _interaction(interaction)
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


def _load(path: Path) -> Any:
    content = path.read_bytes()
    if path.suffix.lower() == ".json":
        try:
            return orjson.loads(content)
        except orjson.JSONDecodeError as exc:
            msg = f"not JSON: {exc}"
            raise UnreadableSource(msg) from None
    loads = _yaml_loader()
    try:
        return loads(content)
    except Exception as exc:  # yaml.YAMLError and constructor errors for unsafe tags
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        msg = f"not readable YAML: {first}"
        raise UnreadableSource(msg) from None


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


def _interaction(interaction: dict[str, Any]) -> tuple[IncomingRequest, LiveExchange]:
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
        decoder = decoder_for(coding)
        if decoder is not None:
            try:
                raw = decoder.decode(raw) + decoder.flush()
            except Exception as exc:  # zlib.error, brotli.error
                msg = f"the {coding} body does not decode: {exc}"
                raise ValueError(msg) from exc
            headers = [(k, v) for k, v in headers if k.lower() != "content-encoding"]
    headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
    chunked = any(k.lower() == "transfer-encoding" for k, _ in headers)
    return incoming, LiveExchange(status, headers, [raw] if raw else [], chunked)
