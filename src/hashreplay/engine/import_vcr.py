"""Reading vcrpy / pytest-recording cassettes for `hashreplay import vcr`.

A cassette (format version 1, YAML or JSON) holds `interactions`, each a `request`
(`method`, `uri`, `headers` as lists of values, `body`) and a `response` (`status.code`,
`headers`, `body.string`; the older httpx layout has `status_code` and `content`). Bodies
vcrpy kept compressed (gzip, deflate, br) are decoded, as a live response is before it is
recorded. The test id is the collected test whose pytest-recording cassette name
(`cassette_names`) the cassette has, in its module's `cassettes/<module>/` directory;
without the collected ids it is guessed from the layout,
`<dir>/cassettes/<module>/[<Class>.]<test>.yaml` → `<dir>/<module>.py::[<Class>::]<test>`;
or it is given for one cassette. Interactions keep their order, so identical requests of a
test become one recorded sequence. One unreadable interaction skips its whole cassette:
an import never writes part of a test's exchanges.

YAML needs PyYAML (`pip install 'hashreplay[import]'`), imported only when a YAML cassette
is read (`engine/importing.py`).
"""

from __future__ import annotations

import ast
import hashlib
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson

from hashreplay.core.bodies import (
    MAX_NESTING,
    DecodedTooLarge,
    decode_limited,
    deep_field,
    too_deep_problem,
)
from hashreplay.core.constants import DEFAULT_MAX_BODY_BYTES
from hashreplay.core.matching import parse_match_on
from hashreplay.core.modes import recorded_day
from hashreplay.engine.http import IncomingRequest, LiveExchange
from hashreplay.engine.importing import (
    Entry,
    Read,
    Reader,
    Skipped,
    UnreadableSource,
    check_expansion,
    yaml_loader,
)

CASSETTES_DIRNAME = "cassettes"


_YAML_SUFFIXES = (".yaml", ".yml")


def vcr_reader(
    *,
    root: Path,
    test_id: str | None = None,
    hosts: tuple[str, ...] = (),
    max_bytes: int = DEFAULT_MAX_BODY_BYTES,
    match_on: tuple[str, ...] | None = None,
    collected: CollectedTests | None = None,
) -> Reader:
    """A reader of cassettes under project `root`: every cassette under `test_id` when given,
    else under the `collected` test it is the cassette of, else under the id its place in
    pytest-recording's layout gives; only requests to `hosts` when any are given. A test id
    met twice is a duplicate, skipped. `max_bytes`
    (`max_body_bytes`) bounds what a cassette may grow to in memory: its YAML aliases
    expanded, and each compressed body decoded. Each cassette is keyed as vcrpy matched it
    (its `vcr_config`'s `match_on`, else vcrpy's default), unless `match_on` is given."""
    seen: dict[str, Path] = {}

    def read(path: Path) -> Read:
        notes: list[str] = []
        if test_id is not None:
            test = test_id
        elif collected is not None:
            test = collected.test_of(path, root, notes)
        else:
            test = layout_test_id(path, root)
        earlier = seen.get(test)
        if earlier is not None and earlier != path.resolve():
            reason = f"duplicate: test {test} was imported from {earlier} already"
            return Read(skipped=[Skipped(str(path), reason)])
        read_ = read_cassette(path, test, hosts, max_bytes)
        seen[test] = path.resolve()
        matched = match_on if match_on is not None else cassette_match_on(path, root)
        read_.entries[:] = [replace(e, match_on=matched) for e in read_.entries]
        read_.notes.extend(notes)
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
    stem = _stem(path)
    name = stem
    head, dot, tail = stem.partition(".")
    if dot and head[:1].isupper() and "[" not in head:
        name = f"{head}::{tail}"  # a test method: `<Class>.<test>`
    prefix = f"{where}/" if where not in ("", ".") else ""
    return f"{prefix}{module}.py::{name}"


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
        """The one collected test `path` is the cassette of; the layout's guess (with a note
        in `notes`) when its module collected no tests; UnreadableSource when none or
        several are."""
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
        if in_layout and place not in self.modules:
            if not module.is_file():
                msg = (
                    f"its test module {_shown(module, root)} does not exist (removed or "
                    f"renamed?): delete the cassette, or import it with --test-id ({retry})"
                )
                raise UnreadableSource(msg)
            guess = layout_test_id(path, root)
            notes.append(
                f"{path}: pytest collected no tests of {_shown(module, root)} (does it import? "
                f"pytest --collect-only {_shown(module, root)}); imported under the layout's "
                f"guess {guess}"
            )
            return guess
        where = f"of {_shown(module, root)} " if in_layout else ""
        msg = (
            f"no collected test {where}has the cassette name {stem!r} (renamed or removed, "
            "or named by @pytest.mark.default_cassette?): import it with --test-id "
            f"({retry}), or delete it"
        )
        raise UnreadableSource(msg)


def collected_from_lines(lines: Iterable[str], rootdir: Path, source: str) -> CollectedTests:
    """The node ids among `lines` (as `pytest --collect-only -q` prints them, one a line;
    other lines are left out)."""
    ids = [line.strip() for line in lines if "::" in line and not line.startswith(" ")]
    return CollectedTests(tuple(ids), rootdir, source)


def _stem(path: Path) -> str:
    stem = path.name
    for suffix in (*_YAML_SUFFIXES, ".json"):
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
        loads = yaml_loader()
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
        check_expansion(data, len(content), max_bytes)
    deep = deep_field(data, "(cassette)", MAX_NESTING + 8)  # a body, and the cassette's own
    if deep is not None:
        raise UnreadableSource(f"{deep}: {too_deep_problem()}; not imported")
    return data


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
