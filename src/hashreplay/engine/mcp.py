"""Replaying one recorded MCP session to a live client, with no server (docs/design.md, "MCP
servers"): sans-I/O, the adapter (`adapters/mcp.py`) carries its answers to the client's
streams.

The recording is the session's messages in the order they crossed the pipe, each `sent` (by
the client) or `received` (from the server, with `after_sent`: how many messages the client
had sent before it arrived), and how the session ended. Replay:

- **Matching**: each request the client sends takes the next recorded request of the same
  `method` whose compared params (`core/mcp.compared`, under the test's `ignore` paths) are
  equal, whatever its place; the recorded answer then goes out with the live request's `id`,
  and progress notifications recorded under the recorded request's `progressToken` go out
  under the live one's. A request with no such recording is a miss: noted on the test's
  owner (the test fails even if the client swallows the error) and answered at once with a
  JSON-RPC error whose message is the miss report, so the client never waits for it. A
  client's answer to a server request is compared with the recorded answer to that request
  (a difference is a miss too); a client notification takes the next recorded one of its
  method, and one the recording lacks (a cancellation) is no miss.
- **Order**: what the server sent goes out in recorded order, each message once the client
  has sent as many requests and answers as it had when the message arrived (client
  notifications are not counted: a client may send them at other moments), and an answer or
  progress notification only once the request it belongs to was matched. A message whose
  request the client never sent is passed over, so one changed call cannot stall the rest.
- **The end**: a session recorded as cut (the server exited or crashed) ends the same way
  once its place is reached: the client's read stream ends, as it did live. A session the
  client closed never ends from the server's side. A request the recorded server never
  answered is never answered here either: the client's own timeout (`read_timeout_seconds`,
  or a deadline around the call) ends it, as it did live.
- **Stalls**: when the client waits for an answer that is recorded but gated on messages it
  has not sent (it sends fewer than it did live), `stalled` says so; after the adapter's
  bounded wait, `give_up` answers that request with an error naming what the answer waited
  for, and notes the failure.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Sequence
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from hashreplay.core.constants import FIXED_EPOCH
from hashreplay.core.errors import ReplayFailure, ReplayMiss
from hashreplay.core.format import EndState, Frame, FrameDirection, FrameType, RecordedResponse
from hashreplay.core.frames import comparable, frame_paths
from hashreplay.core.mcp import (
    Kind,
    compared,
    describe_command,
    kind_of,
    method_of,
    prepared_server_message,
    progress_token,
    server_times,
    stdio_request,
    strings_of,
    with_progress_token,
)
from hashreplay.core.normalise import MIN_EMBEDDED_ID, IdRegistry
from hashreplay.core.normalise_response import normalise_response_values
from hashreplay.engine.frame_log import SWITCHING_PROTOCOLS
from hashreplay.engine.http import IncomingRequest

if TYPE_CHECKING:
    from hashreplay.engine.frame_log import FrameLog
    from hashreplay.engine.replay import Decision, Record, Replay
    from hashreplay.engine.session import Session

#: The JSON-RPC error code of hashreplay's answers (a miss, a stall): in the range JSON-RPC
#: leaves to implementations, so a client shows its message.
MISS_ERROR_CODE = -32099

#: How long (seconds) the adapter waits, while the client waits for a recorded answer that
#: is gated on messages the client has not sent, before `give_up`.
STALL_TIMEOUT = 5.0


class Direction(str, Enum):
    SENT = "sent"
    RECEIVED = "received"


class Message(NamedTuple):
    """One recorded message: its direction, its JSON-RPC message, and for a received one
    how many messages the client had sent before it arrived."""

    direction: Direction
    data: Any
    after_sent: int = 0


class Ending(str, Enum):
    #: the client closed the session (whatever the server did afterwards)
    CLOSED = "closed"
    #: the server's output ended while the client still used it (exit, crash)
    CUT = "cut"


class End(NamedTuple):
    """The recorded session's end, reached once the client sent `after_sent` messages."""

    how: Ending
    after_sent: int = 0


#: What `next_message` says when nothing is to be delivered now.
WAIT: Any = None


def _id_key(value: Any) -> str:
    """A JSON-RPC id as a dictionary key that keeps `1` and `"1"` apart."""
    return json.dumps(value)


class McpReplay:
    """One recorded session answering one live client."""

    def __init__(
        self,
        messages: Sequence[Message],
        end: End,
        *,
        command: Any,
        file: str,
        test_id: str | None,
        fail: Callable[[ReplayFailure], None],
        record_command: str,
        ignore: Sequence[str] = (),
        normalise: Callable[[Any], Any] | None = None,
        request_hash: str = "",
    ) -> None:
        """`command` is the stored session request's body (`{"command", "args"}`), `file`
        the recording as reports name it, `fail` notes a failure on the test's owner,
        `record_command` the command that records the session again, `ignore` the test's
        `ignore` paths (those over frames apply: `frames[*].params.arguments.ts`),
        `normalise` what makes a live client message the stored form (as recording
        normalised it), `request_hash` the session's key (named by its misses)."""
        self.messages = list(messages)
        self.end = end
        self.command = describe_command(command)
        self.file = file
        self.test_id = test_id
        self._paths = frame_paths(ignore)
        self._normalise = normalise
        self.request_hash = request_hash
        self._fail = fail
        self.record_command = record_command
        self._sent = [i for i, m in enumerate(self.messages) if m.direction is Direction.SENT]
        self._received = [
            i for i, m in enumerate(self.messages) if m.direction is Direction.RECEIVED
        ]
        # the recorded client requests and answers among the first n sent messages
        counted = [0]
        for i in self._sent:
            kind = kind_of(self.messages[i].data)
            counted.append(counted[-1] + (kind is not None and kind is not Kind.NOTIFICATION))
        self._counted = counted
        self._belongs = {i: self._request_of(i) for i in self._received}
        self._consumed: set[int] = set()
        self._delivered: set[int] = set()
        #: recorded sent index → the live request's id / progress token
        self._live_ids: dict[int, Any] = {}
        self._live_tokens: dict[int, Any] = {}
        self._live_counted = 0
        self._answers: list[dict[str, Any]] = []
        self._ended = False
        self.failures: list[ReplayFailure] = []

    # --- what belongs to what --------------------------------------------------------------

    def _request_of(self, received: int) -> int | None:
        """The recorded client request a received message belongs to (an answer to it, or
        progress under its token), or None."""
        data = self.messages[received].data
        kind = kind_of(data)
        if kind is not None and kind.is_answer:
            key = _id_key(data.get("id"))
            for i in reversed(self._sent):
                sent = self.messages[i].data
                if i < received and kind_of(sent) is Kind.REQUEST and _id_key(sent["id"]) == key:
                    return i
            return None
        if kind is Kind.NOTIFICATION and method_of(data) == "notifications/progress":
            params = data.get("params")
            token = params.get("progressToken") if isinstance(params, dict) else None
            if token is None:
                return None
            for i in reversed(self._sent):
                if i < received and progress_token(self.messages[i].data) == token:
                    return i
        return None

    def _required(self, received: int) -> int:
        """How many client requests and answers must have been sent before `received`."""
        after = self.messages[received].after_sent
        return self._counted[min(after, len(self._counted) - 1)]

    # --- the client sends -----------------------------------------------------------------

    def sent(self, message: Any) -> None:
        """The client sent `message` (a JSON-RPC message as JSON)."""
        live = message
        if self._normalise is not None:
            message = self._normalise(message)
        kind = kind_of(message)
        if kind is None:
            self._miss_unreadable(message)
            return
        if kind is Kind.NOTIFICATION:
            found = self._next_sent(Kind.NOTIFICATION, message)
            if found is not None:
                self._consumed.add(found)
            return
        self._live_counted += 1
        if kind is Kind.REQUEST:
            self._request(message, live)
        else:
            self._answer(message)

    def _shown(self, message: Any, index: int) -> Any:
        """What is compared of `message` as the recorded message at `index` (the `ignore`
        paths naming that frame, or every frame, left out)."""
        if self._paths:
            message = comparable(message, index, self._paths)
        return compared(message) if isinstance(message, dict) else message

    def _next_sent(self, kind: Kind, message: Any) -> int | None:
        method = method_of(message)
        for i in self._sent:
            if i in self._consumed:
                continue
            data = self.messages[i].data
            if kind_of(data) is not kind or method_of(data) != method:
                continue
            if kind is Kind.NOTIFICATION or self._shown(data, i) == self._shown(message, i):
                return i
        return None

    def _request(self, message: Any, live: Any) -> None:
        """`message` as normalised for comparing; the answer goes out with `live`'s id and
        progress token (as the client sent them, never normalised)."""
        found = self._next_sent(Kind.REQUEST, message)
        if found is None:
            self._miss(message, live.get("id"))
            return
        self._consumed.add(found)
        self._live_ids[found] = live.get("id")
        self._live_tokens[found] = progress_token(live)

    def _answer(self, message: Any) -> None:
        """The client answered a server request: compared with the recorded answer."""
        key = _id_key(message.get("id"))
        for i in self._sent:
            data = self.messages[i].data
            kind = kind_of(data)
            if i in self._consumed or kind is None or not kind.is_answer:
                continue
            if _id_key(data.get("id")) == key:
                self._consumed.add(i)
                if self._shown(data, i) != self._shown(message, i):
                    self._differs(message, data, i, f"the answer to the server's request {key}")
                return
        what = f"an answer to the server's request {key}, which the recording does not hold"
        self._note(f"the client sent {what}")

    # --- the server's side ----------------------------------------------------------------

    def next_message(self) -> Any:
        """The next message to hand the client (a JSON-RPC message as JSON, with live ids),
        `WAIT` when there is none yet, or `self.end` when the recorded session ends here."""
        if self._answers:
            return self._answers.pop(0)
        for i in self._received:
            if i in self._delivered:
                continue
            if self._required(i) > self._live_counted:
                break
            owner = self._belongs[i]
            if owner is not None and owner not in self._consumed:
                continue  # belongs to a request this client did not send (yet)
            self._delivered.add(i)
            return self._live(i, owner)
        if not self._ended and self.end.how is Ending.CUT and self._end_reached():
            self._ended = True
            return self.end
        return WAIT

    def _end_reached(self) -> bool:
        count = self._counted[min(self.end.after_sent, len(self._counted) - 1)]
        if count > self._live_counted:
            return False
        return all(
            i in self._delivered or self._belongs[i] not in self._consumed for i in self._received
        )

    def _live(self, index: int, owner: int | None) -> Any:
        data: dict[str, Any] = dict(self.messages[index].data)
        if owner is None:
            return data
        if "method" not in data:
            data["id"] = self._live_ids.get(owner)
        elif self._live_tokens.get(owner) is not None:
            data = with_progress_token(data, self._live_tokens[owner])
        return data

    def stalled(self) -> str | None:
        """What a waiting client waits for in vain, or None: a matched request whose
        recorded answer is gated on more requests and answers than the client has sent."""
        for i in self._received:
            owner = self._belongs[i]
            data = self.messages[i].data
            if i in self._delivered or owner is None or owner not in self._consumed:
                continue
            if "method" not in data and self._required(i) > self._live_counted:
                method = method_of(self.messages[owner].data)
                return (
                    f"the recorded answer to {method} came after the client had sent "
                    f"{self._required(i)} requests and answers; this client has sent "
                    f"{self._live_counted} and sends no more"
                )
        return None

    def give_up(self) -> None:
        """The stall `stalled` names lasted the bounded wait: fail the test with it and
        answer the waiting requests with its report."""
        why = self.stalled()
        if why is None:
            return
        report = self._note(why).report
        for i in self._received:
            owner = self._belongs[i]
            data = self.messages[i].data
            if i in self._delivered or owner is None or owner not in self._consumed:
                continue
            if "method" not in data and self._required(i) > self._live_counted:
                self._delivered.add(i)
                self._answers.append(self._error(self._live_ids.get(owner), report))

    # --- misses ---------------------------------------------------------------------------

    def _report(self, what: str) -> str:
        test = f"test {self.test_id}" if self.test_id else "no test"
        return (
            f"hashreplay: MCP session replay miss ({test}): {what}\n"
            f"  server: {self.command}\n"
            f"  recording: {self.file}\n"
            f"  to record the session again: {self.record_command}"
        )

    def _note(self, what: str) -> ReplayFailure:
        failure = ReplayMiss(
            self._report(what), test_id=self.test_id, request_hash=self.request_hash
        )
        self.failures.append(failure)
        self._fail(failure)
        return failure

    def _error(self, live_id: Any, message: str) -> dict[str, Any]:
        return {
            "jsonrpc": "2.0",
            "id": live_id,
            "error": {"code": MISS_ERROR_CODE, "message": message, "data": {"file": self.file}},
        }

    def _miss(self, message: Any, live_id: Any) -> None:
        from hashreplay.core.diff import first_difference

        method = method_of(message)
        candidates = [
            i
            for i in self._sent
            if kind_of(self.messages[i].data) is Kind.REQUEST
            and method_of(self.messages[i].data) == method
        ]
        if not candidates:
            what = f"request {method}: the recording holds no {method} request"
        elif all(i in self._consumed for i in candidates):
            what = (
                f"request {method}: all {len(candidates)} recorded {method} requests were "
                "answered already"
            )
        else:
            nearest = next(i for i in candidates if i not in self._consumed)
            diff = first_difference(
                self._shown(self.messages[nearest].data, nearest),
                self._shown(message, nearest),
                "params",
            )
            shown = diff.describe() if diff is not None else "params differ"
            what = f"request {method}: {shown}"
        failure = self._note(what)
        self._answers.append(self._error(live_id, failure.report))

    def _differs(self, live: Any, recorded: Any, index: int, what: str) -> None:
        from hashreplay.core.diff import first_difference

        diff = first_difference(self._shown(recorded, index), self._shown(live, index))
        shown = diff.describe() if diff is not None else "differs"
        self._note(f"{what}: {shown}")

    def _miss_unreadable(self, message: Any) -> None:
        self._note(f"the client sent something that is no JSON-RPC message: {message!r:.80}")


# --- the session's decision -----------------------------------------------------------------


def session_request(command: Any, args: Sequence[str]) -> IncomingRequest:
    """A stdio session as the engine keys it (`core/mcp.stdio_request`): no headers, the
    command line as its JSON body; the environment and working directory are not in it."""
    method, url, body = stdio_request(os.fspath(command), [str(a) for a in args])
    return IncomingRequest(method, url, (("content-type", "application/json"),), orjson.dumps(body))


def decide(session: Session, command: Any, args: Sequence[str]) -> Decision:
    """The one decision for a stdio session: `Replay` (answered by its recording, the next
    of its key in the test), `Record`, `Miss` (the test fails with the report) or `Live`."""
    return session.decide(session_request(command, args))


def _messages(response: RecordedResponse) -> tuple[list[Message], End]:
    """A stored session's messages and end, as the replayer takes them."""
    messages = []
    for frame in response.frames or []:
        direction = Direction(frame.direction.value)
        messages.append(Message(direction, frame.data, frame.after_sent or 0))
    ended = response.ended
    if ended is not None and ended.state is EndState.ERROR:
        before = messages[: ended.after_chunks]
        sent = sum(1 for m in before if m.direction is Direction.SENT)
        return messages, End(Ending.CUT, sent)
    return messages, End(Ending.CLOSED)


def _problem(response: RecordedResponse) -> str | None:
    """Why a stored exchange cannot be replayed as an MCP session (a field and what is
    wrong), or None."""
    if response.frames is None:
        return "response.frames: an MCP session's recording holds its messages as frames"
    for index, frame in enumerate(response.frames):
        if frame.type is not FrameType.TEXT or kind_of(frame.data) is None:
            return f"response.frames[{index}]: expected a JSON-RPC message in a text frame"
    return None


def replayer(session: Session, decision: Replay) -> McpReplay:
    """The recorded session of a `Replay` decision, ready to answer a live client; a
    recording that is no MCP session fails the test naming its file and field (a
    `RecordingError` noted as a miss)."""
    # a session that is recorded already is recorded again only by `record`:
    # record-if-missing would replay it and miss the same way
    from hashreplay.core.constants import RERECORD_COMMAND
    from hashreplay.core.frames import normalised_sent

    prep = decision.prep
    owner = session.owners.owner(prep.test_id)
    tally = session.owners.tally
    shown = prep.shown_test_id or ""

    def fail(failure: ReplayFailure) -> None:
        if isinstance(failure, ReplayMiss):
            tally.missed()
        owner.fail(failure)

    def normalise(message: Any) -> Any:
        frame = Frame(direction=FrameDirection.SENT, type=FrameType.TEXT, data=message)
        return normalised_sent(frame, session.keyer.rules, session.redactor, owner.ids()).data

    file = _shown_path(decision.path, session.config.root)
    messages, end = _messages(decision.response)
    rule = prep.rule
    return McpReplay(
        messages,
        end,
        command=prep.request.body,
        file=file,
        test_id=prep.shown_test_id,
        fail=fail,
        record_command=RERECORD_COMMAND.format(nodeid=shown),
        ignore=() if rule is None else rule.ignore,
        normalise=normalise,
        request_hash=prep.hash,
    )


def unusable(session: Session, decision: Replay) -> ReplayMiss | None:
    """A `Replay` whose recording is no MCP session: the miss it is (noted), or None."""
    problem = _problem(decision.response)
    if problem is None:
        return None
    from hashreplay.core.errors import RecordingError

    error = RecordingError(decision.path, f"{problem}; re-record it")
    return session.miss(decision.prep, error)


def _shown_path(path: Path, root: Path) -> str:
    try:
        return os.fspath(path.relative_to(root))
    except ValueError:
        return os.fspath(path)


class McpLog:
    """A live session being recorded: the frame log (`engine/frame_log.FrameLog`) the
    adapter feeds with each JSON-RPC message as it crosses, in order."""

    def __init__(self, session: Session, decision: Record, command: Any, args: Sequence[str]):
        url = session_request(command, args).url
        self.log: FrameLog = session.frame_log(decision, url)
        self._prep = decision.prep
        self._view = session.view
        self._owner = session.owners.owner(decision.prep.test_id)
        self._sent_strings: set[str] = set()
        #: a drift run writes nothing: the check maps the ids onto the recorded ones
        self._drift = session.drift is not None
        self.is_started = False
        self.server_gone = False

    def started(self) -> None:
        """The server process is running (a spawn that failed records nothing)."""
        self.log.answered(SWITCHING_PROTOCOLS, [])
        self.is_started = True

    def sent(self, data: Any) -> None:
        if not self.server_gone:
            self.log.sent(FrameType.TEXT, orjson.dumps(data).decode())
            self._sent_strings.update(strings_of(data))

    def received(self, data: Any) -> None:
        self.log.received(FrameType.TEXT, orjson.dumps(data).decode())
        index = len(self.log.frames) - 1
        if isinstance(data, dict) and not self.log.too_large and not self._drift:
            self._owner.note_ids(self._view, self._prep, functools.partial(self._note, data, index))

    def _note(
        self, data: dict[str, Any], index: int, ids: IdRegistry, frames: str, known: dict[str, str]
    ) -> None:
        """Register the server-made ids of the message at `index` as staging will (the
        session's recording normalises it the same way when it is written), and its times
        in the test's id map as the fixed epoch they are written as, so a request that
        quotes them keys them as replay will."""
        for time in server_times(data):
            if len(time) >= MIN_EMBEDDED_ID:
                known[time] = FIXED_EPOCH
        where = f"{frames}[{index}].data"
        named = frozenset(self._sent_strings - ids.stable.keys())
        data = prepared_server_message(data, ids, where=where, known_ids=known, named=named)
        normalise_response_values([data], ids, where=where, known_ids=known, named=named)

    def server_ended(self) -> None:
        """The server's output ended while the client still used the session (it exited
        or crashed): the session is stored as cut, and replays so."""
        if not self.server_gone:
            self.server_gone = True
            self.log.cut()

    def client_closed(self) -> None:
        """The client ended the session (its `stdio_client` context exited): complete,
        unless the server had gone first."""
        self.log.completed()

    def forget(self) -> None:
        """A session the user stopped (Ctrl-C, a cancelled task) is no answer: never
        written, not even as abandoned at the test's end."""
        self._owner.ended(self.log)


async def arecord(session: Session, log: McpLog) -> Path | None:
    """Write a recorded session once it ended (never blocking the loop)."""
    log.client_closed()
    return await session.arecord_connection(log.log)
