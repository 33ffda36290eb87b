"""hashreplay: deterministic, offline, free tests for LLM applications.

Records the HTTP calls a test suite makes into a content-addressed store of small JSON
files and replays them offline. See DESIGN.md for the contract and README.md to start.
"""

from __future__ import annotations

from ._config import Config, ModeSource, load_config
from ._constants import FORMAT_VERSION, KEY_VERSION, SECRET_PLACEHOLDER, TEST_ID_HEADER
from ._context import current_test_id, test_context
from ._diff import Difference, first_difference
from ._errors import ConfigError, HashReplayError, HashReplayWarning, RecordingError, ReplayMiss
from ._hashing import endpoint_of, is_model_list, request_hash
from ._install import install, uninstall
from ._mode import Mode
from ._normalise import normalise_request_body
from ._recording import RecordedRequest, RecordedResponse, Recording
from ._redact import Redactor
from ._serialise import TypeAllowlist, from_jsonable, to_jsonable
from ._session import IncomingRequest, Session
from ._store import Store
from .adapters.callables import record_callable, unpatch_callables

__version__ = "0.1.0"

__all__ = [
    "FORMAT_VERSION",
    "KEY_VERSION",
    "SECRET_PLACEHOLDER",
    "TEST_ID_HEADER",
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
