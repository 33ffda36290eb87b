"""Reading vcrpy / pytest-recording cassettes for `hashreplay import vcr`.

A cassette (format version 1, YAML, which needs PyYAML, or JSON) holds `interactions`, each a
`request` (`method`, `uri`, `headers` as lists of values, `body`) and a `response` (`status.code`,
`headers`, `body.string`; the older httpx layout: `status_code`, `content`). Bodies vcrpy kept
compressed are decoded, as live ones are. Interactions keep their order (identical requests of a
test become one recorded sequence); one unreadable interaction skips its whole cassette: an
import never writes part of a test's exchanges.
"""

from __future__ import annotations

import ast
import hashlib
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from hashreplay.core.age import recorded_day
from hashreplay.core.bodies import MAX_NESTING, DecodedTooLarge, decode_limited, too_deep_problem
from hashreplay.core.constants import DEFAULT_MAX_BODY_BYTES
from hashreplay.core.matching import parse_match_on
from hashreplay.engine.http import IncomingRequest, LiveExchange
from hashreplay.engine.importing import (
    Entry,
    Read,
    Reader,
    Skipped,
    UnreadableSource,
    check_depth,
    load_json,
)

CASSETTES_DIRNAME = "cassettes"


def vcr_reader(
    *,
    root: Path,
    test_id: str | None = None,
    hosts: tuple[str, ...] = (),
    max_bytes: int = DEFAULT_MAX_BODY_BYTES,
    match_on: tuple[str, ...] | None = None,
    collected: CollectedTests | None = None,
) -> Reader:
    """A reader of cassettes under project `root`: each under `test_id` if given, else under the
    `collected` test it is the cassette of, else the id its place in pytest-recording's layout
    gives (a test id met twice is a duplicate, skipped); only requests to `hosts` if any. Each
    cassette may grow to `max_bytes` in memory (YAML aliases expanded, compressed bodies
    decoded) and is keyed as vcrpy matched it (`cassette_match_on`) unless `match_on` is given."""
    seen: dict[str, Path] = {}

    def read(path: Path) -> Read:
        notes: list[str] = []
        if test_id is not None:
            test = test_id
        elif collected is not None:
            test = collected.test_of(path, root, notes)
        else:
            test = layout_test_id(path, root)
        if (earlier := seen.get(test)) not in (None, path.resolve()):
            reason = f"duplicate: test {test} was imported from {earlier} already"
            return Read(skipped=[Skipped(str(path), reason)])
        found = read_cassette(path, test, hosts, max_bytes)
        seen[test] = path.resolve()
        matched = match_on if match_on is not None else cassette_match_on(path, root)
        found.entries[:] = [replace(e, match_on=matched) for e in found.entries]
        found.notes.extend(notes)
        return found

    return read


def _layout_dir(path: Path) -> Path | None:
    """`<dir>` of a cassette at `<dir>/cassettes/<module>/<name>`; None when it is elsewhere."""
    parts = path.resolve().parts
    in_layout = len(parts) >= 3 and parts[-3] == CASSETTES_DIRNAME
    return Path(*parts[:-3]) if in_layout else None


def layout_test_id(path: Path, root: Path) -> str:
    """`<dir>/cassettes/<module>/<Class>.<test>.yaml` → `<dir>/<module>.py::<Class>::<test>`,
    `<dir>` relative to the project root."""
    directory = _layout_dir(path)
    if directory is None:
        msg = (
            "not in pytest-recording's layout (<dir>/cassettes/<module>/<test>.yaml): "
            "give its test with --test-id"
        )
        raise UnreadableSource(msg)
    try:
        where = directory.relative_to(root.resolve()).as_posix()
    except ValueError:
        msg = f"outside the project root {root}: give its test with --test-id"
        raise UnreadableSource(msg) from None
    name = _stem(path)
    head, dot, tail = name.partition(".")
    if dot and head[:1].isupper() and "[" not in head:
        name = f"{head}::{tail}"  # a test method: `<Class>.<test>`
    prefix = f"{where}/" if where not in ("", ".") else ""
    return f"{prefix}{path.resolve().parent.name}.py::{name}"


#: What pytest-recording replaces with `-` in a cassette name (file names cannot hold them).
_UNSAFE = "<>?%*:|\"'/\\"
#: The longest file name; pytest-recording shortens longer cassette names with an md5.
_NAME_MAX = 255


def cassette_names(test_class: str | None, test_name: str) -> set[str]:
    """The names (without suffix) pytest-recording gives the cassette of test `test_name`
    (pytest's item name, parameters included) of class `test_class`: `[<Class>.]<name>`
    with each of `<>?%*:|"'/\\` replaced by `-`; a name too long for a file becomes its
    start, `...` and its md5 (cut for a 4- or 5-character suffix, as its version did)."""
    name = f"{test_class}.{test_name}" if test_class else test_name
    for char in _UNSAFE:
        name = name.replace(char, "-")
    names = {name}
    digest = hashlib.md5(name.encode(), usedforsecurity=False).hexdigest()
    for suffix in (4, 5):  # `serializer` ("yaml") or ".yaml"
        if len(name) + suffix > _NAME_MAX:
            names.add(f"{name[: _NAME_MAX - suffix - len(digest) - 3]}...{digest}")
    return names


@dataclass(frozen=True)
class CollectedTests:
    """The test ids pytest collected (node ids relative to `rootdir`), each under the
    cassette names pytest-recording gives it, in the cassette directory of its module."""

    ids: tuple[str, ...]
    rootdir: Path
    #: where the ids came from, for the report
    source: str
    #: (cassette directory, cassette name) -> the ids with that cassette
    by_place: dict[tuple[Path, str], list[str]] = field(
        default_factory=dict, repr=False, compare=False
    )
    #: cassette name -> the ids with that cassette, anywhere
    by_name: dict[str, list[str]] = field(default_factory=dict, repr=False, compare=False)
    #: the cassette directories of the modules that have collected tests
    modules: set[Path] = field(default_factory=set, repr=False, compare=False)

    def __post_init__(self) -> None:
        for nodeid in dict.fromkeys(self.ids):
            base, bracket, params = nodeid.partition("[")
            parts = base.split("::")
            if len(parts) < 2:
                continue
            module = (self.rootdir / parts[0]).resolve()
            place = module.parent / CASSETTES_DIRNAME / module.stem
            self.modules.add(place)
            test_class = parts[-2] if len(parts) > 2 else None
            for name in cassette_names(test_class, parts[-1] + bracket + params):
                self.by_place.setdefault((place, name), []).append(nodeid)
                self.by_name.setdefault(name, []).append(nodeid)

    def test_of(self, path: Path, root: Path, notes: list[str]) -> str:
        """The one collected test `path` is the cassette of; the layout's guess (with a note in
        `notes`) when its module collected no tests; UnreadableSource when none or several are."""
        stem = _stem(path)
        place = path.resolve().parent
        in_layout = place.parent.name == CASSETTES_DIRNAME
        found = self.by_place.get((place, stem), []) if in_layout else self.by_name.get(stem, [])
        if len(found) == 1:
            return found[0]
        example = found[0] if found else "TEST ID"
        retry = f"hashreplay import vcr --test-id {shlex.quote(example)} {shlex.quote(str(path))}"
        if found:
            msg = (
                f"the cassette name {stem!r} is pytest-recording's name for {len(found)} "
                f"collected tests ({', '.join(found)}), which shared it; import it for each "
                f"with --test-id ({retry})"
            )
            raise UnreadableSource(msg)
        module = place.parent.parent / f"{place.name}.py"
        shown = _shown(module, root)
        if in_layout and place not in self.modules:
            if not module.is_file():
                msg = (
                    f"its test module {shown} does not exist (removed or renamed?): delete the "
                    f"cassette, or import it with --test-id ({retry})"
                )
                raise UnreadableSource(msg)
            guess = layout_test_id(path, root)
            notes.append(
                f"{path}: pytest collected no tests of {shown} (does it import? pytest "
                f"--collect-only {shown}); imported under the layout's guess {guess}"
            )
            return guess
        where = f"of {shown} " if in_layout else ""
        msg = (
            f"no collected test {where}has the cassette name {stem!r} (renamed or removed, "
            "or named by @pytest.mark.default_cassette?): import it with --test-id "
            f"({retry}), or delete it"
        )
        raise UnreadableSource(msg)


def collected_from_lines(lines: Iterable[str], rootdir: Path, source: str) -> CollectedTests:
    """The node ids among `lines` as `pytest --collect-only -q` prints them, one a line."""
    ids = [line.strip() for line in lines if "::" in line and not line.startswith(" ")]
    return CollectedTests(tuple(ids), rootdir, source)


def _stem(path: Path) -> str:
    stem = path.name
    for suffix in (".yaml", ".yml", ".json"):
        stem = stem.removesuffix(suffix)
    return stem


def _shown(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)


#: vcrpy's default `match_on`
VCR_DEFAULT_MATCH_ON = ("method", "scheme", "host", "port", "path", "query")
#: vcrpy's matchers as hashreplay's parts; the host is never part of a key, and headers or
#: custom matchers have no equivalent (they are left out, so matching is looser, never stricter)
_VCR_PARTS = {"method": "method", "uri": "endpoint", "path": "path", "query": "query"}
_VCR_PARTS |= {"body": "body", "raw_body": "body"}


def cassette_match_on(path: Path, root: Path) -> tuple[str, ...]:
    """How vcrpy matched a cassette's requests, as hashreplay's parts (`("method", "uri")` →
    `("method", "endpoint")`): the `match_on` of the nearest `conftest.py` `vcr_config` fixture
    that returns a dict literal (read with `ast`, never imported), from the test's directory up
    to the project root; else vcrpy's default."""
    directory = _layout_dir(path) or path.resolve().parent
    top = root.resolve()
    while (found := _conftest_match_on(directory / "conftest.py")) is None:
        if directory in (top, directory.parent) or top not in directory.parents:
            found = VCR_DEFAULT_MATCH_ON
            break
        directory = directory.parent
    parts = tuple(_VCR_PARTS[m] for m in found if m in _VCR_PARTS)
    return parse_match_on(parts or ("method", "endpoint"), source="vcr_config match_on")


def _conftest_match_on(conftest: Path) -> tuple[str, ...] | None:
    """The `match_on` a conftest's `vcr_config` declares (vcrpy's default when it returns a
    dict without one); None when the file has no `vcr_config` returning a dict literal."""
    try:
        tree = ast.parse(conftest.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return None
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    fixtures = [n for n in ast.walk(tree) if isinstance(n, functions) and n.name == "vcr_config"]
    for inner in (node for fixture in fixtures for node in ast.walk(fixture)):
        if not isinstance(inner, ast.Return) or not isinstance(inner.value, ast.Dict):
            continue
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
        what = "empty, or comments only" if data is None else f"a {type(data).__name__}"
        msg = f"unknown shape: no `interactions` list ({what}: not a vcrpy cassette?)"
        raise UnreadableSource(msg)
    if (version := data.get("version", 1)) != 1:
        raise UnreadableSource(f"cassette format version {version!r}; only version 1 is known")
    found = Read()
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
            found.skipped.append(Skipped(source, reason, fatal=False))
        else:
            found.entries.append(Entry(test_id, source, incoming, exchange))
    return found


def _load(path: Path, max_bytes: int) -> Any:
    content = path.read_bytes()
    if path.suffix.lower() == ".json":
        data = load_json(content)
    else:
        loads = yaml_loader()
        try:
            data = loads(content)
        except Exception as exc:  # yaml.YAMLError, constructor errors for unsafe tags, too deep
            if isinstance(exc, RecursionError) or "nesting depth" in str(exc):  # libyaml: 1,000
                raise UnreadableSource(f"{too_deep_problem()}; not imported") from None
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise UnreadableSource(f"not readable YAML: {first}") from None
        check_expansion(data, len(content), max_bytes)
    check_depth(data, "(cassette)", MAX_NESTING + 8)  # a body, and the cassette's own levels
    return data


def _headers(raw: Any) -> list[tuple[str, str]]:
    """vcrpy's `{name: [values]}` (or `{name: value}`) as header pairs."""
    return [
        (str(name), str(value))
        for name, values in dict(raw or {}).items()
        for value in (values if isinstance(values, (list, tuple)) else [values])
    ]


def _bytes(value: Any) -> bytes:
    if value is None or isinstance(value, bytes):
        return value or b""
    if isinstance(value, str):
        return value.encode("utf-8")
    raise TypeError(f"a body of type {type(value).__name__}")


def _interaction(item: dict[str, Any], max_bytes: int) -> tuple[IncomingRequest, LiveExchange]:
    request, response = item["request"], item["response"]
    body = request.get("body")
    if isinstance(body, dict):  # some serialisers wrap request bodies like responses
        body = body.get("string")
    method, uri = str(request["method"]).upper(), str(request["uri"])
    parts = urlsplit(uri)  # `http://[::1` and `http://h:99999` raise ValueError (`port`)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.port == -1:
        raise ValueError(f"uri {uri!r} is not an http(s) URL with a host")
    incoming = IncomingRequest(method, uri, _headers(request.get("headers")), _bytes(body))
    if "status_code" in response:  # the old httpx layout
        status, content = int(response["status_code"]), response.get("content")
    else:
        status = int(response["status"]["code"])
        content = (response.get("body") or {}).get("string")
    headers = _headers(response.get("headers"))
    raw = _bytes(content)
    coding = next((v for k, v in headers if k.lower() == "content-encoding"), None)
    dropped = {"content-length"}
    if coding is not None:
        try:
            decoded = decode_limited(coding, raw, max_bytes)
        except DecodedTooLarge:
            raise
        except Exception as exc:  # zlib.error, brotli.error
            raise ValueError(f"the {coding} body does not decode: {exc}") from exc
        if decoded is not None:
            raw = decoded
            dropped.add("content-encoding")
    headers = [(k, v) for k, v in headers if k.lower() not in dropped]
    chunked = any(k.lower() == "transfer-encoding" for k, _ in headers)
    day = recorded_day(item.get("recorded_at"))
    return incoming, LiveExchange(status, headers, [raw] if raw else [], chunked, recorded_on=day)


def check_expansion(data: Any, size: int, max_bytes: int) -> None:
    """Refuse a cassette whose YAML aliases (`&a`, `*a`) expand it more than `max_bytes` past the
    file's size (a "billion laughs" document), or make it contain itself. The loader shares one
    object per anchor, so the size is counted over those, once each, never building the whole."""
    if _is_leaf(data):  # a scalar, or nothing (an empty file): no alias to expand
        return
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


def yaml_loader() -> Callable[[bytes], Any]:
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
