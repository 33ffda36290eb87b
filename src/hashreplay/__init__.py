"""hashreplay: deterministic, offline, free tests for LLM applications.

Records the HTTP calls a test suite makes into a content-addressed store of small JSON
files and replays them offline. See DESIGN.md for the contract and README.md to start.
"""

from __future__ import annotations

from hashreplay.adapters.callables import record_callable, unpatch_callables
from hashreplay.core.config import Config, ModeSource, load_config
from hashreplay.core.constants import (
    FORMAT_VERSION,
    KEY_VERSION,
    SECRET_PLACEHOLDER,
    TEST_ID_HEADER,
)
from hashreplay.core.context import current_test_id, test_context
from hashreplay.core.diff import Difference, first_difference
from hashreplay.core.errors import (
    BodyTooLarge,
    ConfigError,
    HashReplayError,
    HashReplayWarning,
    RecordingError,
    ReplayMiss,
)
from hashreplay.core.key import endpoint_of, is_model_list, request_hash
from hashreplay.core.mode import Mode
from hashreplay.core.normalise import normalise_request_body
from hashreplay.core.recording import RecordedRequest, RecordedResponse, Recording
from hashreplay.core.redact import Redactor
from hashreplay.core.store import Store
from hashreplay.core.typed import TypeAllowlist, from_jsonable, to_jsonable
from hashreplay.engine.session import IncomingRequest, Session
from hashreplay.server.install import install, uninstall

__version__ = "0.1.0"

__all__ = [
    "FORMAT_VERSION",
    "KEY_VERSION",
    "SECRET_PLACEHOLDER",
    "TEST_ID_HEADER",
    "BodyTooLarge",
    "Config",
    "ConfigError",
    "Difference",
    "HashReplayError",
    "HashReplayWarning",
    "IncomingRequest",
    "Mode",
    "ModeSource",
    "RecordedRequest",
    "RecordedResponse",
    "Recording",
    "RecordingError",
    "Redactor",
    "ReplayMiss",
    "Session",
    "Store",
    "TypeAllowlist",
    "__version__",
    "current_test_id",
    "endpoint_of",
    "first_difference",
    "from_jsonable",
    "install",
    "is_model_list",
    "load_config",
    "normalise_request_body",
    "record_callable",
    "request_hash",
    "test_context",
    "to_jsonable",
    "uninstall",
    "unpatch_callables",
]
