"""The recorded sequence of one request hash within one test: read once on first use (from the
store view, so queued writes count), then consumed call by call."""

from __future__ import annotations

from hashreplay.core.mode import Mode
from hashreplay.core.normalise import new_id_registry
from hashreplay.engine.keying import Prepared, check_name
from hashreplay.engine.state import RecordedSequence, Tests
from hashreplay.engine.view import StoreView


def sequence_for(tests: Tests, view: StoreView, prep: Prepared) -> RecordedSequence:
    """The sequence of `prep`'s hash in its test (callers hold `tests.lock`). Record mode
    starts empty; a file that exists but cannot be used raises its RecordingError."""
    state = tests.state(prep.test_id)
    seq = state.sequences.get(prep.hash)
    if seq is not None:
        return seq
    found = None if prep.mode is Mode.RECORD else view.read_first(prep.test_id, prep.hash)
    if found is None:
        seq = RecordedSequence(
            [], new_id_registry(prep.hash), view.store.path_for(prep.test_id, prep.hash)
        )
    else:
        path, recording = found
        check_name(path, recording, prep)
        seq = RecordedSequence(
            recording.responses,
            new_id_registry(prep.hash, recording.id_normalization_mapping),
            path,
        )
    state.sequences[prep.hash] = seq
    return seq
