"""The store as the engine sees it: files on disk plus writes still queued behind.

A write-behind session (the pytest plugin's) hands each file's content to a writer thread,
as bytes or as the stage that serialises them; until they are on disk, every read here sees
them, through the writer's own interface (a read of a version not serialised yet serialises
it on the reading thread).

Each test's recordings are read through it by their owner (`engine/owner.py`), once per key
on first use, so queued writes count.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from hashreplay.core.atomic import awrite_bytes_atomic, write_bytes_atomic
from hashreplay.core.format import RecordedRequest, Recording
from hashreplay.core.matching import MatchRule, RuleIndex
from hashreplay.core.names import model_list_name_prefix, recording_name
from hashreplay.core.store import Found, Store
from hashreplay.core.writer import BackgroundWriter, Content
from hashreplay.engine.keys import Prepared

#: `Keyer.key_of`: a request's hash under a matching rule (None: the default)
KeyOf = Callable[[RecordedRequest, "str | None", "MatchRule | None"], tuple[str, bool]]


class StoreView:
    def __init__(
        self, store: Store, writer: BackgroundWriter | None, key_of: KeyOf | None = None
    ) -> None:
        self.store = store
        self.writer = writer
        self.key_of = key_of
        self.rules = RuleIndex()
        #: a write-behind run's recording names per directory, listed on first use
        self._listed: dict[Path, frozenset[str] | None] = {}

    def read_other_rule(self, prep: Prepared) -> tuple[str, MatchRule | None, Found] | None:
        """After `prep.hash` missed: its recording under another matching rule that the
        test's directories hold (docs/design.md §14), as its hash, rule and file. Only a miss
        pays for this; each directory's rules are read once."""
        if self.key_of is None:
            return None
        for rule in self.rules.after_miss(self.store.search_dirs(prep.test_id), prep.rule):
            hash_hex = self.key_of(prep.request, prep.shown_test_id, rule)[0]
            found = self.read_first(prep.test_id, hash_hex)
            if found is not None:
                return hash_hex, rule, found
        return None

    def read_first(self, test_id: str | None, hash_hex: str) -> Found | None:
        """Like `Store.read_first`, but sees writes still queued."""
        writer = self.writer
        if writer is not None and writer.has_pending():
            for directory in self.store.search_dirs(test_id):
                path = directory / recording_name(hash_hex)
                content = writer.pending(path)
                if content is not None:
                    return Found(path, self.store.parse(content, path))
        return self.store.read_first(test_id, hash_hex)

    def read_previous(self, test_id: str | None, hash_hex: str) -> Found | None:
        """What record mode re-records held before (its days, docs/recordings.md "Age"):
        `read_first`, except that a write-behind run (the pytest plugin's, whose directories
        change only through its own writes and its workers' other tests) lists each
        directory once, on first use, and opens only a name that was there: a new
        recording costs no failed `open` per search directory. A file this run made since
        holds today's day anyway."""
        if self.writer is not None:
            name = recording_name(hash_hex)
            for directory in self.store.search_dirs(test_id):
                names = self._names(directory)
                if names is None or name in names:
                    break
            else:
                return None
        return self.read_first(test_id, hash_hex)

    def _names(self, directory: Path) -> frozenset[str] | None:
        """The `.json` names `directory` held when first asked (None: it cannot be listed,
        so every name is looked for)."""
        if directory in self._listed:
            return self._listed[directory]
        try:
            with os.scandir(directory) as entries:
                names: frozenset[str] | None = frozenset(
                    e.name for e in entries if e.name.endswith(".json")
                )
        except FileNotFoundError:
            names = frozenset()
        except OSError:
            names = None
        self._listed[directory] = names
        return names

    def model_list_paths(self, hash_hex: str, test_id: str | None) -> list[Path]:
        paths = set(self.store.model_list_paths(hash_hex, test_id))
        if self.writer is not None:
            prefix = model_list_name_prefix(hash_hex)
            paths.update(p for p in self.writer.pending_paths() if p.name.startswith(prefix))
        return sorted(paths, key=lambda p: p.name)

    def read(self, path: Path) -> Recording:
        content = self.writer.pending(path) if self.writer is not None else None
        return self.store.parse(content, path) if content is not None else self.store.read(path)

    def exists(self, path: Path) -> bool:
        return (self.writer is not None and self.writer.is_pending(path)) or path.exists()

    def write(self, path: Path, content: Content) -> None:
        self._drop_read_ahead(path)
        if self.writer is not None:
            self.writer.submit(path, content)
        else:
            write_bytes_atomic(path, _bytes(content), self.store.temp_dir)

    async def awrite(self, path: Path, content: Content) -> None:
        self._drop_read_ahead(path)
        if self.writer is not None:
            self.writer.submit(path, content)
        else:
            await awrite_bytes_atomic(path, _bytes(content), self.store.temp_dir)

    def _drop_read_ahead(self, path: Path) -> None:
        """A file this run writes is read from disk (or the queue) from now on."""
        ahead = self.store.ahead
        if ahead is not None:
            ahead.written(str(path))

    def flush(self) -> None:
        """Wait until every queued write is on disk; a RecordingError for one that failed."""
        if self.writer is not None:
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _bytes(content: Content) -> bytes:
    return content if isinstance(content, bytes) else content()
