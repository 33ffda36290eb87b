"""What the project holds, for reading: `status` (mode, where the config and recordings are,
the tokens they hold, the last run; `--older-than AGE` the recordings to refresh, `--paths` the
directories for `git add`), `list` (one line per recording) and `show` (one recording in
readable form).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from hashreplay.cli.output import printable
from hashreplay.cli.run import EXIT_OK, EXIT_PROBLEMS, Run, matches
from hashreplay.core.age import MaxAge, age_in_days, today
from hashreplay.core.blobs import parse_ref
from hashreplay.core.bodies import BodyEncoding
from hashreplay.core.config import ModeSource
from hashreplay.core.constants import MODE_ENV
from hashreplay.core.errors import RecordingError
from hashreplay.core.format import RecordedResponse, recording_from_json
from hashreplay.core.model_lists import newest_model_list
from hashreplay.core.names import hash_of_name, is_model_list_name
from hashreplay.core.paths import PYPROJECT, has_hashreplay_table
from hashreplay.core.transcript import (
    Tokens,
    conversation,
    ending,
    frame_lines,
    payloads,
    reply,
    response_tokens,
)
from hashreplay.engine.files import Loaded, load

# --- status ---------------------------------------------------------------------------------


def _mode_source(run: Run) -> str:
    config = run.config
    source = config.mode_source
    if source is ModeSource.ENV:
        return f"env ({MODE_ENV})"
    if source is ModeSource.FILE and config.config_file is not None:
        return f"config ({run.show_path(config.config_file)})"
    return str(source)


def status(run: Run) -> int:
    console, config = run.console, run.config
    files = run.files()
    if run.args.paths_only:
        # `git add $(hashreplay status --paths)`: every directory holding recordings
        for directory in sorted({run.show_path(path.parent) for path in files}):
            console.line(directory)
        return EXIT_OK
    if run.args.older_than is not None:  # checked before any file is read
        limit = MaxAge.parse(run.args.older_than, source="--older-than")
        return _older_than(run, run.load_all(files, "reading"), limit)
    loaded = run.load_all(files, "reading")
    console.line(f"mode: {console.style(config.mode.value, 'bold')}")
    console.line(f"mode source: {_mode_source(run)}")
    reason = "--root" if run.args.root is not None else config.root_reason
    # the root absolute (which project was found); every other path relative to here
    console.line(f"root: {config.root} (from {reason})")
    shown = run.show_path(config.config_file) if config.config_file else None
    if run.config_problem is not None:
        console.line(
            f"config: {shown or 'pyproject.toml'} is invalid: each setting in error takes its "
            "default here (the problems are listed at the end)"
        )
    else:
        console.line(f"config: {shown or _no_settings(run)}")
    console.line(f"common directory: {run.show_path(config.common_dir)}")

    by_dir: dict[Path, list[int]] = {}
    for path in files:
        by_dir.setdefault(path.parent, []).append(_size(path))
    rows = [
        [run.show_path(d), str(len(sizes)), console.size(sum(sizes))]
        for d, sizes in sorted(by_dir.items())
    ]
    total = sum(sum(s) for s in by_dir.values())
    if console.tty and rows:
        console.line()
        console.table(
            [*rows, ["total", str(len(files)), console.size(total)]],
            ["recordings directory", "files", "size"],
        )
        console.line()
    elif not console.tty:
        for row in rows:
            console.line(f"recordings: {row[0]}\t{row[1]} files\t{row[2]} bytes")
        console.line(f"total: {len(files)} files\t{total} bytes")
    if not files:
        console.line("no recordings yet: INFERENCE_MODE=record-if-missing pytest records them")
    for stray in run.strays():
        console.line(f"stray: {run.show_path(stray.path)}: {stray.problem}")

    tokens = Tokens()
    for item in loaded:
        for response in item.recording.responses:
            tokens.add(response_tokens(response))
    console.line(
        f"tokens: {tokens.input} input + {tokens.output} output = "
        f"{console.style(str(tokens.total), 'bold')} total in {tokens.responses} responses "
        "(what every replayed run saves)"
    )
    from hashreplay.cli.usage import last_run

    last_run(run, loaded)
    return run.status


def _no_settings(run: Run) -> str:
    """What the config line says when no setting is read from a file: a `[tool.hashreplay]`
    that is there but empty (or comments only, as `init` writes it) opts the project in all the
    same, and is named; only without one are the defaults all there is."""
    pyproject = run.config.root / PYPROJECT
    if has_hashreplay_table(run.config.root):
        shown = run.show_path(pyproject)
        return f"{shown} ([tool.hashreplay] sets nothing: every setting at its default)"
    return "none (defaults)"


def _older_than(run: Run, loaded: list[Loaded], limit: MaxAge) -> int:
    """`status --older-than AGE`: each recording whose oldest response is older than AGE,
    oldest first (docs/recordings.md, "Age"); responses without a day are counted apart."""
    day = today()
    rows: list[tuple[int, str, str, str]] = []
    undated = 0
    lists: dict[str, list[Loaded]] = {}  # a shared model list is dated by its newest file
    for item in loaded:
        if is_model_list_name(item.path.name) and (hash_hex := hash_of_name(item.path.name)):
            lists.setdefault(hash_hex, []).append(item)
    older_sets: set[Path] = set()  # the model sets a newer file of the same list outdates
    for group in lists.values():
        newest = newest_model_list([(i.path, i.recording.response) for i in group])
        older_sets.update(item.path for n, item in enumerate(group) if n != newest)
    for item in loaded:
        if item.path in older_sets:
            continue
        ages = [
            (age, response.recorded_on or "")
            for response in item.recording.responses
            if (age := age_in_days(response.recorded_on, day)) is not None
        ]
        undated += len(item.recording.responses) - len(ages)
        oldest = max(ages, default=None)
        if oldest is not None and oldest[0] > limit.days:
            shared = "(shared model list)" if is_model_list_name(item.path.name) else "(shared)"
            test = item.recording.test_id or shared
            rows.append((oldest[0], oldest[1], test, run.show_path(item.path)))
    rows.sort(key=lambda row: (-row[0], row[3]))
    console = run.console
    for age, recorded_on, test, path in rows:
        console.line(f"{age}d\t{recorded_on}\t{printable(test)}\t{path}")
    summary = f"{len(rows)} of {len(loaded)} recording(s) older than {limit} (today {day})"
    if undated:
        summary += f"; {undated} response(s) have no recorded day (recorded before days were kept)"
    console.line(summary)
    return run.status


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


# --- list -----------------------------------------------------------------------------------


def _status(response: RecordedResponse) -> str:
    """`200`; `exception` for a failure; `-` for a call-layer result (no HTTP status)."""
    if response.is_exception:
        return "exception"
    return "-" if response.status is None else str(response.status)


def list_recordings(run: Run) -> int:
    args = run.args
    loaded = run.load_all(run.files(args.paths), "reading")
    rows: list[list[str]] = []
    for item in loaded:
        recording = item.recording
        request = recording.request
        test = recording.test_id or ("(shared)" if item.is_model_list_file else "(no test)")
        if not (matches(test, args.test) and matches(request.endpoint, args.endpoint)):
            continue
        row = [
            test,
            request.method,
            request.endpoint,
            request.model or "-",
            ",".join(_status(r) for r in recording.responses),
            run.console.size(len(item.content)),
            run.show_path(item.path),
        ]
        rows.append([printable(cell) for cell in row])  # recorded text never drives a terminal
    run.console.table(rows, ["test", "method", "endpoint", "model", "status", "size", "file"])
    if not rows and run.console.tty:
        run.console.line("no recordings match")
    return run.status


# --- show -----------------------------------------------------------------------------------


def _find_target(run: Run, target: str) -> Path | None:
    path = Path(target)
    if path.is_file():
        return path
    if target.endswith(".json") or "/" in target:
        run.console.error(f"no such recording file: {target}")
        return None
    key = target.lower().removesuffix(".json")
    files = run.files()
    found = [
        f
        for f in files
        if (hash_of_name(f.name) or "").startswith(key) or f.name.startswith(target)
    ]
    if len(found) == 1:
        return found[0]
    if not found:
        run.console.error(
            f"no recording matches {target!r} among the project's {len(files)}: give a file "
            "path, or a hash as in `hashreplay list`"
        )
    else:
        names = "\n  ".join(run.show_path(f) for f in found[:20])
        run.console.error(
            f"{target!r} matches {len(found)} recordings; give more of the hash:\n  {names}"
        )
    return None


def show(run: Run) -> int:
    path = _find_target(run, run.args.target)
    if path is None:
        return EXIT_PROBLEMS
    if run.args.raw:
        raw = path.read_bytes().decode("utf-8", errors="replace").rstrip("\n")
        run.console.line(printable(raw))
        return EXIT_OK
    try:
        item = load(path, run.store)
    except RecordingError as exc:
        run.report_unreadable(path, exc)
        return EXIT_PROBLEMS
    # large values are shown as their blob reference (digest, size, type), not their bytes
    _render(run, replace(item, recording=recording_from_json(item.raw)))
    return EXIT_OK


def _field(run: Run, name: str, value: str, *, styled: bool = False) -> None:
    """One `name: value` line; recorded data in `value` is escaped unless the caller
    `styled` it (and escaped the data it holds) itself."""
    shown = value if styled else printable(value)
    run.console.line(f"{run.console.style(f'{name}:'.ljust(10), 'bold')} {shown}")


def _indented(run: Run, text: str, indent: str = "  ", prefix: str = "") -> None:
    """Recorded text, escaped, indented; `prefix` (already styled) starts the first line."""
    for index, line in enumerate(text.splitlines() or [""]):
        lead = f"{prefix} " if prefix and index == 0 else ""
        run.console.line(f"{indent}{lead}{printable(line)}")


def _render(run: Run, item: Loaded) -> None:
    recording, request = item.recording, item.recording.request
    _field(run, "file", run.show_path(item.path))
    _field(run, "test", recording.test_id or "(none: shared or made outside a test)")
    _field(run, "request", f"{request.method} {request.url}")
    if request.model:
        _field(run, "model", request.model)
    if request.headers:
        _field(run, "headers", ", ".join(f"{k}: {v}" for k, v in sorted(request.headers.items())))
    turns = conversation(request.body, request.endpoint)
    if turns:
        run.console.line(run.console.style("conversation:", "bold"))
        for turn in turns:
            role = run.console.style(f"[{printable(turn.role)}]", "cyan")
            _indented(run, turn.text, prefix=role)
    elif request.body is not None:
        run.console.line(run.console.style(f"body ({request.body_encoding.value}):", "bold"))
        _indented(run, _body_text(request.body, request.body_encoding))
    responses = recording.responses
    for index, response in enumerate(responses):
        label = "response" if len(responses) == 1 else f"response {index + 1}/{len(responses)}"
        _render_response(run, label, response)


def _render_response(run: Run, label: str, response: RecordedResponse) -> None:
    kind = response.headers.get("content-type", "")
    if response.is_streaming:
        kind += f" (stream: {response.stream_format}, {len(response.body or [])} events)"
    status = _status(response)
    failed = response.is_exception or (response.status or 0) >= 400
    colour = "red" if failed else "green"
    shown = f"{run.console.style(printable(status), colour)} {printable(kind)}".rstrip()
    _field(run, label, shown, styled=True)
    if response.is_exception and response.exception is not None:
        _field(run, "exception", f"{response.exception.type}: {response.exception.message}")
    if response.frames is not None and _is_rpc_session(response):  # MCP, JSON-RPC both ways
        _render_messages(run, response)
        return
    if response.frames is not None:  # a WebSocket connection (docs/cli.md, "show")
        run.console.line(run.console.style(f"frames ({len(response.frames)}):", "bold"))
        for line in frame_lines(response.frames):
            _indented(run, line)
        _field(run, "end", ending(response))
        return
    said = reply(response)
    if said.text:
        _field(run, "reply", said.text)
    for call in said.tool_calls:
        _field(run, "tool call", call)
    if not said and response.body is not None:
        run.console.line(run.console.style("body:", "bold"))
        if response.is_streaming:
            for value in payloads(response) or response.body:
                _indented(run, value if isinstance(value, str) else orjson.dumps(value).decode())
        else:
            _indented(run, _body_text(response.body, response.body_encoding))
    tokens = response_tokens(response)
    if tokens.responses:
        _field(run, "tokens", f"input {tokens.input}, output {tokens.output}, total {tokens.total}")


def _is_rpc_session(response: RecordedResponse) -> bool:
    """Whether every frame of a connection is a JSON-RPC message (an MCP session)."""
    frames = response.frames or []
    return bool(frames) and all(
        isinstance(f.data, dict) and f.data.get("jsonrpc") == "2.0" for f in frames
    )


def _render_messages(run: Run, response: RecordedResponse) -> None:
    """An MCP session's messages in order (`→` sent, `←` received), each as a call."""
    from hashreplay.core.mcp_transcript import RECEIVED_MARK, SENT_MARK, message_line

    run.console.line(run.console.style(f"messages ({len(response.frames or [])}):", "bold"))
    for frame in response.frames or []:
        sent = frame.direction.value == "sent"
        mark = run.console.style(SENT_MARK if sent else RECEIVED_MARK, "cyan")
        if isinstance(frame.data, dict):
            text = message_line(frame.data)
        else:
            text = f"{frame.type.value} {frame.data if frame.data is not None else ''}"
        _indented(run, text, prefix=mark)
    if response.ended is not None:
        _field(run, "ended", f"{response.ended.state} after {response.ended.after_chunks}")


def _body_text(body: Any, encoding: BodyEncoding) -> str:
    ref = parse_ref(body)
    if ref is not None:
        return ref.describe()
    if encoding is BodyEncoding.BASE64:
        return f"(binary, {len(str(body)) * 3 // 4} bytes as base64)"
    if encoding is BodyEncoding.TEXT:
        return str(body)
    if encoding is BodyEncoding.EMPTY or body is None:
        return "(empty)"
    return orjson.dumps(body, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()
