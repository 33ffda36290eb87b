"""Every string and number that users and their scripts rely on (docs/design.md) lives here."""

from __future__ import annotations

from typing import Final

#: Environment variable that selects the mode (docs/design.md §1).
MODE_ENV: Final = "INFERENCE_MODE"
#: pytest command-line option that selects the mode; wins over the environment.
MODE_OPTION: Final = "--inference-mode"
#: Environment variable naming the project root outside pytest (docs/design.md §9).
ROOT_ENV: Final = "HASHREPLAY_ROOT"
#: Header that carries the pytest test id to a server under test (docs/design.md §8).
TEST_ID_HEADER: Final = "X-HashReplay-Test-Id"
#: Header that identifies one execution of a test, so a long-running server under test (or
#: `hashreplay serve`) can tell a re-run of the same test from more calls of the same run.
RUN_HEADER: Final = "X-HashReplay-Run"
#: Header that names a conversation within one test (docs/scenarios.md): identical
#: requests of different conversations replay their own sequences.
CONVERSATION_HEADER: Final = "X-HashReplay-Conversation"
#: Header that carries a fault (a JSON object of `hashreplay_fault` arguments) to the proxy.
FAULT_HEADER: Final = "X-HashReplay-Fault"
#: Environment variable that sets `pace` (docs/scenarios.md).
PACE_ENV: Final = "HASHREPLAY_PACE"
#: Environment variable naming the UTC day hashreplay takes as today (`YYYY-MM-DD`): the day
#: stamped on new recordings and the day ages are measured from (docs/recordings.md, "Age").
TODAY_ENV: Final = "HASHREPLAY_TODAY"
#: The pytest marker that injects faults, and the marker of per-test options.
FAULT_MARKER: Final = "hashreplay_fault"
#: The conftest hooks that change what is keyed and what is written (docs/design.md §14).
REQUEST_HOOK: Final = "pytest_hashreplay_request"
RECORD_HOOK: Final = "pytest_hashreplay_before_record"
#: Opens a response template in a recorded body: `{{request:body.messages[-1].content}}`.
TEMPLATE_OPEN: Final = "{{request:"
#: What every redacted secret is replaced with (docs/design.md §7).
SECRET_PLACEHOLDER: Final = "[secret removed]"

#: Version of the recording file layout; a reader refuses any other (docs/design.md §4).
FORMAT_VERSION: Final = 1
#: Version of the normalising and hashing rules that name a file. Bump it whenever the same
#: request would hash differently, and re-key stores with `hashreplay rehash`.
KEY_VERSION: Final = 2

#: The `method` of call-layer recordings (their `endpoint` is the target's name).
CALL_METHOD: Final = "CALL"
#: The `method` of an MCP stdio session's recording (its URL is `mcp+stdio:<executable>`).
MCP_STDIO_METHOD: Final = "MCP"

#: Name of the per-suite and common recordings directories (docs/design.md §4).
RECORDINGS_DIRNAME: Final = "recordings"
#: Where hashreplay keeps files for itself (usage logs, caches), under the project root.
STATE_DIRNAME: Final = ".hashreplay"
#: Directory of shared large values, inside the common directory (docs/design.md §13).
BLOBS_DIRNAME: Final = "blobs"
#: The key that marks a blob reference in a stored body: `{"__blob__": <xxh3_128 hex>, ...}`.
BLOB_REF_KEY: Final = "__blob__"
#: Strings in bodies (and whole non-JSON bodies) longer than this many bytes become blobs.
DEFAULT_BLOB_THRESHOLD: Final = 64 * 1024
#: Bodies larger than this are not recorded, nor blobs larger read; a recording file is
#: read whatever its size (docs/design.md §13, §15).
DEFAULT_MAX_BODY_BYTES: Final = 64 * 1024 * 1024
#: Prefix of shared model-list recordings (docs/design.md §3).
MODEL_LIST_PREFIX: Final = "models-"

#: Prefix of the stable ids that replace volatile response ids (docs/design.md §5).
STABLE_ID_PREFIX: Final = "rec-"
#: What string timestamps (`created_at: "2025-…"`) are replaced with.
FIXED_EPOCH: Final = "1970-01-01T00:00:00.000000Z"

#: Marks the test id of a class-, module- or session-scoped fixture: `<file>::[fixture]<name>`.
FIXTURE_MARK: Final = "::[fixture]"

#: The command a user runs to fill in a missing recording (docs/design.md §6).
RECORD_COMMAND: Final = "INFERENCE_MODE=record-if-missing pytest {nodeid}"
#: The command that replaces a recording file that cannot be read: record-if-missing
#: refuses such a file again (it is there, but unusable); record overwrites it.
RERECORD_COMMAND: Final = "INFERENCE_MODE=record pytest {nodeid}"
#: What records a miss of a server under test (`hashreplay.install()`, docs/design.md §8):
#: its mode comes from its own environment, which the pytest command does not change.
SERVER_RECORD_STEP: Final = (
    "restart the server with INFERENCE_MODE=record-if-missing in its environment (the mode "
    "given to pytest does not reach it), then run the test again: pytest {nodeid}"
)

#: Status and headers of the answer to a replay miss: not retried by the OpenAI/Anthropic
#: SDKs (`x-should-retry: false`) nor by plain clients (4xx other than 408/409/429).
MISS_STATUS: Final = 404
MISS_HEADER: Final = "x-hashreplay-miss"
#: What the in-process server middleware adds to a response whose request had replay misses
#: in the server's own upstream calls (their count), so the test side counts them.
MISSES_HEADER: Final = "x-hashreplay-server-misses"
#: On an answer from a recording older than `max_age`, from a front end with no test end
#: (the proxy): its age, `<days>d` (docs/server.md, "Stale recordings").
STALE_HEADER: Final = "x-hashreplay-stale"

#: The git diff driver that shows recordings as conversations (`hashreplay git-setup`), and
#: the `.gitattributes` pattern that selects every per-suite and common recording.
GIT_DIFF_DRIVER: Final = "hashreplay"
GITATTRIBUTES_PATTERN: Final = "**/recordings/*.json"
