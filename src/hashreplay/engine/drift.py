"""A drift run's results (docs/design.md §15, "Drift").

A drift run (`pytest --hashreplay-drift`) sends every intercepted call live and writes no
recording; each live answer is compared by shape (`core/diff.py`) with the response
recorded for the same call, in call order, as replay would have answered it. `DriftCheck`
keeps the results per test id: drifted shapes, recordings no live call asked for, live calls
with no recording, and apart from those the calls that could not be checked (a network
error, a 5xx, a 429: never drift). `write_result` / `read_result` / `render` are what the
plugin and `hashreplay drift-report` share.
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from hashreplay.core.atomic import write_bytes_atomic
from hashreplay.core.constants import STATE_DIRNAME
from hashreplay.core.errors import RecordingError
from hashreplay.core.format import EndState, RecordedResponse
from hashreplay.core.network import placeholder_keys
from hashreplay.core.secret_values import NO_SECRETS, SecretValues, SeenSecrets
from hashreplay.core.shape import compare, shape_of
from hashreplay.core.transcript import printable
from hashreplay.engine.owner import Call, Owners, TestRecordings
from hashreplay.engine.unconsumed import FileIndex

if TYPE_CHECKING:
    from hashreplay.core.config import Config
    from hashreplay.core.redact import Redactor
    from hashreplay.engine.keys import Prepared
    from hashreplay.engine.record import Outcome
    from hashreplay.engine.state import StoreView


class Host(Protocol):
    """What a drift check uses of its session (`engine.session.Session`)."""

    config: Config
    owners: Owners
    view: StoreView
    files: FileIndex
    redactor: Redactor
    seen_secrets: SeenSecrets

    def stored_id(self, test_id: str | None) -> str | None: ...


__all__ = [
    "DRIFT_FILENAME",
    "DriftCheck",
    "clear_result",
    "drift_path",
    "keys_problem",
    "read_result",
    "render",
    "write_result",
]

#: The full result of the last drift run, under the project's `.hashreplay/`.
DRIFT_FILENAME = "drift.json"
#: The version of `drift.json`'s layout.
RESULT_VERSION = 1

#: What an entry of a result is: the shape differs, a recording no live call used, a live
#: call with no recording, a live call that failed (not drift).
DRIFTED = "drift"
NOT_CALLED = "recording not called live"
NOT_RECORDED = "live call not recorded"
UNCHECKED = "could not check"

#: Headers are not shape: none is kept of a live answer.
_ALL_HEADERS: frozenset[str] = frozenset()


def _scrubbed(value: Any, scrub: Callable[[str], str]) -> Any:
    if isinstance(value, list):
        return [_scrubbed(item, scrub) for item in value]
    return scrub(value) if isinstance(value, str) else value


def _relative(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


# --- one run's results ----------------------------------------------------------------------


def _failed_live(response: RecordedResponse) -> str | None:
    """Why a live answer cannot be checked (no response, a 5xx, a 429), or None."""
    if response.status is None:
        exc = response.exception
        return f"no response ({exc.type}: {exc.message})" if exc else "no response"
    if response.status == 429 or response.status >= 500:
        return f"the live call answered {response.status}"
    return None


class DriftCheck:
    """A drift run's results, per test id (thread-safe; several calls may end at once)."""

    def __init__(self, session: Host) -> None:
        self.session = session
        self._lock = threading.Lock()
        #: test id -> its entries (each: kind, endpoint, file, differences or reason)
        self.entries: dict[str, list[dict[str, Any]]] = {}
        #: live answers compared with a recording
        self.checked = 0

    def note(
        self, test_id: str | None, entry: dict[str, Any], secrets: SecretValues = NO_SECRETS
    ) -> None:
        """Keep an entry redacted as a recording is (docs/design.md §7): field names come from
        the live answer, so a key it echoes (the request's own, `secrets`) is removed too; and
        under the test id as files hold it, so a secret in a parametrised id is never printed
        in the drift table nor written to drift.json ("Test ids")."""
        redactor, seen = self.session.redactor, self.session.seen_secrets.scrubber

        def scrub(text: str) -> str:
            return seen.text(secrets.text(redactor.text(text)))

        shown = self.session.stored_id(test_id) if test_id is not None else None
        kept = {k: _scrubbed(v, scrub) for k, v in entry.items()}
        with self._lock:
            self.entries.setdefault(scrub(shown or "(no test)"), []).append(kept)

    def check(
        self,
        test_id: str | None,
        endpoint: str,
        file: str,
        recorded: RecordedResponse | None,
        live: RecordedResponse,
        *,
        secrets: SecretValues = NO_SECRETS,
    ) -> None:
        """Compare one live answer with its recording (None: nothing was recorded);
        `secrets`: the credential values the live request carried."""
        failed = _failed_live(live)
        if failed is not None:
            self.note(
                test_id,
                {"kind": UNCHECKED, "endpoint": endpoint, "file": file, "reason": failed},
                secrets,
            )
            return
        if recorded is None:
            self.note(
                test_id,
                {
                    "kind": NOT_RECORDED,
                    "endpoint": endpoint,
                    "file": file,
                    "differences": ["the code makes this call; no recording has it"],
                },
                secrets,
            )
            return
        with self._lock:
            self.checked += 1
        differences = compare(shape_of(recorded), shape_of(live))
        if differences:
            self.note(
                test_id,
                {"kind": DRIFTED, "endpoint": endpoint, "file": file, "differences": differences},
                secrets,
            )

    def not_called(self, test_id: str | None, endpoint: str, file: str, count: int) -> None:
        what = "response" if count == 1 else "responses"
        self.note(
            test_id,
            {
                "kind": NOT_CALLED,
                "endpoint": endpoint,
                "file": file,
                "differences": [f"{count} recorded {what} no live call asked for"],
            },
        )

    def merge(self, sent: Mapping[str, Any]) -> None:
        """Add what a pytest-xdist worker sent (`as_dict`)."""
        with self._lock:
            self.checked += int(sent.get("checked", 0))
            for test_id, entries in (sent.get("entries") or {}).items():
                self.entries.setdefault(test_id, []).extend(entries)

    def as_dict(self) -> dict[str, Any]:
        with self._lock:
            return {
                "checked": self.checked,
                "entries": {k: list(v) for k, v in self.entries.items()},
            }

    def result(self) -> dict[str, Any]:
        """What `drift.json` holds: one entry per drifted test id, with its differences, and
        apart the calls that could not be checked."""
        drifted: dict[str, list[dict[str, Any]]] = {}
        unchecked: dict[str, list[dict[str, Any]]] = {}
        with self._lock:
            for test_id in sorted(self.entries):
                for entry in self.entries[test_id]:
                    into = unchecked if entry["kind"] == UNCHECKED else drifted
                    into.setdefault(test_id, []).append(entry)
            checked = self.checked
        now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
        return {
            "version": RESULT_VERSION,
            "finished": now.isoformat().replace("+00:00", "Z"),
            "checked": checked,
            "drifted": drifted,
            "could_not_check": unchecked,
        }

    @property
    def drifted(self) -> bool:
        with self._lock:
            return any(e["kind"] != UNCHECKED for v in self.entries.values() for e in v)

    # --- fed by the session -------------------------------------------------------------

    def record(self, prep: Prepared, outcome: Outcome) -> None:
        """A drift run's live answer to `prep` (where a recording run would write it):
        compared with the next response recorded for the call, in call order (as replay
        would have answered it); nothing is written."""
        from hashreplay.engine.record import stored_response  # drift runs only

        session = self.session
        live = stored_response(outcome, session.redactor, _ALL_HEADERS, secrets=prep.secrets)
        endpoint = f"{prep.request.method} {prep.request.endpoint}"
        view = session.view
        owner = session.owners.owner(prep.test_id)
        req = prep.request  # every call of a drift run is live (the fixture's `calls`)
        owner.note_call(Call(req.method, req.endpoint, req.body, live.status, "live"))
        try:
            if prep.shared:
                paths = view.model_list_paths(prep.hash, prep.test_id)
                recorded = view.read(paths[0]).response if paths else None
                path = paths[0] if paths else view.store.path_for(prep.test_id, prep.hash)
            else:
                # the owner maps the live ids onto the recorded exchange's, as replay keys
                # the next request (docs/design.md §5): a follow-up that quotes one matches
                recorded, path, live = owner.drift_next(view, prep, live, session.owners.tally)
        except RecordingError as exc:
            self.note(
                prep.test_id,
                {
                    "kind": UNCHECKED,
                    "endpoint": endpoint,
                    "file": "",
                    "reason": f"its recording cannot be read: {exc}",
                },
                prep.secrets,
            )
            return
        file = _relative(path, session.config.root)
        if (
            recorded is not None
            and live.end_state is EndState.ABANDONED
            and recorded.end_state is not EndState.ABANDONED
        ):
            self.note(
                prep.test_id,
                {
                    "kind": UNCHECKED,
                    "endpoint": endpoint,
                    "file": file,
                    "reason": "the test stopped reading the live stream",
                },
                prep.secrets,
            )
            return
        self.check(prep.test_id, endpoint, file, recorded, live, secrets=prep.secrets)

    async def arecord(self, prep: Prepared, outcome: Outcome) -> None:
        """`record` for event loops (it reads at most one recording, as replay does)."""
        self.record(prep, outcome)

    def end_test(self, test_id: str) -> None:
        """At a test's end: the recorded responses of the test no live call asked for."""
        session = self.session
        files = session.files.files_of(test_id, session.stored_id(test_id))
        owner = session.owners.get(test_id)
        if owner is not None and owner.passed_through:
            files = []  # a server under test replays those itself
        if owner is None:  # it made no call: every file it has is unused
            owner = TestRecordings(test_id, session.owners.defaults)
        left = owner.unused(files)
        for item in left:
            try:
                request = session.view.read(item.path).request
                endpoint = f"{request.method} {request.endpoint}"
            except RecordingError:
                endpoint = "?"
            self.not_called(
                test_id, endpoint, _relative(item.path, session.config.root), item.count
            )


# --- the result file --------------------------------------------------------------------------


def drift_path(root: Path) -> Path:
    return root / STATE_DIRNAME / DRIFT_FILENAME


def clear_result(root: Path) -> None:
    """Remove the last run's `drift.json` as a run starts: an interrupted run writes none,
    and must not leave an older one for `drift-report` to show."""
    drift_path(root).unlink(missing_ok=True)


def write_result(root: Path, result: Mapping[str, Any]) -> Path:
    """Write `drift.json` atomically (a reader sees the old file or the new, whole)."""
    path = drift_path(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    content = orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
    write_bytes_atomic(path, content)
    return path


def read_result(root: Path) -> dict[str, Any] | None:
    """The last drift run's result, or None when there is none. A damaged file raises
    ValueError naming it."""
    path = drift_path(root)
    try:
        data = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError) as exc:
        msg = f"{path} cannot be read ({exc}); run `pytest --hashreplay-drift` again"
        raise ValueError(msg) from None
    if not isinstance(data, dict) or data.get("version") != RESULT_VERSION:
        msg = f"{path} is not a drift result this version wrote; run `pytest --hashreplay-drift`"
        raise ValueError(msg)
    return data


# --- rendering --------------------------------------------------------------------------------


def _cell(text: str) -> str:
    """Text from a live answer as `hashreplay show` shows it (control characters escaped),
    newlines too: it never acts on a terminal nor forges a line."""
    return printable(str(text)).replace("\n", "\\n").replace("\t", "\\t")


def _table(rows: Sequence[tuple[str, str, str]]) -> list[str]:
    head = ("test", "endpoint", "first differences")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(2)]
    return [f"  {a:<{widths[0]}}  {b:<{widths[1]}}  {c}".rstrip() for a, b, c in [head, *rows]]


def _rows(
    tests: Mapping[str, Iterable[Mapping[str, Any]]], every: bool
) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    for test_id, entries in tests.items():
        for entry in entries:
            lines = list(entry.get("differences") or [entry.get("reason", "")])
            if entry["kind"] not in (DRIFTED, UNCHECKED):
                lines = [f"{entry['kind']}: {line}" for line in lines]
            shown = lines if every else lines[:2]
            if not every and len(lines) > 2:
                shown[-1] += f" (+{len(lines) - 2} more)"
            for i, line in enumerate(shown):
                rows.append(
                    (
                        _cell(test_id) if i == 0 else "",
                        _cell(entry["endpoint"]) if i == 0 else "",
                        _cell(line),
                    )
                )
    return rows


def render(
    result: Mapping[str, Any], *, every: bool = False, where: str | None = None
) -> list[str]:
    """A drift result as lines: a headline, the drifted tests as a table (test, endpoint,
    first differences; `every`: all of them, with each file), the calls not checked; control
    characters escaped (`_cell`)."""
    drifted: Mapping[str, list[dict[str, Any]]] = result.get("drifted") or {}
    unchecked: Mapping[str, list[dict[str, Any]]] = result.get("could_not_check") or {}
    calls = sum(len(v) for v in unchecked.values())
    head = (
        f"hashreplay drift: {len(drifted)} test(s) drifted; {result.get('checked', 0)} live "
        "answer(s) compared with their recordings"
    )
    if calls:
        head += f", {calls} call(s) could not be checked"
    lines = [head + (f" ({result['finished']})" if every and result.get("finished") else "")]
    if drifted:
        lines += _table(_rows(drifted, every))
        if every:
            files = sorted({e["file"] for v in drifted.values() for e in v if e.get("file")})
            lines += ["  recordings:", *(f"    {_cell(f)}" for f in files)]
    if unchecked:
        lines.append("  could not check (not drift; the live call failed):")
        lines += _table(_rows(unchecked, every))
    if where is not None:
        lines.append(f"  full result: {where} (`hashreplay drift-report` shows it)")
    return [_cell(line) for line in lines]


# --- keys -----------------------------------------------------------------------------------


def keys_problem(replay_env: bool | Mapping[str, str], environ: Mapping[str, str]) -> str | None:
    """Why a drift run cannot start here, or None: every provider key variable keyless replay
    knows of is unset or holds its replay placeholder, so no live call could be answered (a
    replay-only environment: a fork's CI, a laptop without keys)."""
    placeholders = placeholder_keys(replay_env)
    variables = [name for names in placeholders.values() for name in names]
    if not variables:  # `replay_env = false`: no placeholders in play, nothing to tell by
        return None
    if any(environ.get(n) and environ[n] not in placeholders for n in variables):
        return None
    held = [n for n in variables if environ.get(n) in placeholders]
    shown = ", ".join(held[:4]) + (", …" if len(held) > 4 else "")
    state = (
        f"{shown} hold(s) the replay placeholder and the others are unset"
        if held
        else ("none of the provider key variables is set")
    )
    return (
        "--hashreplay-drift sends every intercepted call to the real API, and this environment "
        f"has no key to send: {state} (checked {', '.join(variables[:6])}, …). Set the key of "
        "each provider your tests call (e.g. OPENAI_API_KEY=sk-…) before pytest starts; "
        "drift checks belong where the keys are, such as a nightly CI job (docs/usage.md, "
        '"Drift"). Nothing was sent.'
    )
