"""The store as the engine sees it: files on disk plus writes still queued behind.

A write-behind session (the pytest plugin's) hands each file's content to a writer thread,
as bytes or as the stage that serialises them; until they are on disk, every read here sees
them, through the writer's own interface (a read of a version not serialised yet serialises
it on the reading thread).
"""

from __future__ import annotations

from pathlib import Path

from hashreplay.core.names import model_list_name_prefix, recording_name
from hashreplay.core.recording import Recording
from hashreplay.core.store import Found, Store
from hashreplay.core.temp_files import awrite_bytes_atomic, write_bytes_atomic
from hashreplay.core.writer import BackgroundWriter, Content


class StoreView:
    def __init__(self, store: Store, writer: BackgroundWriter | None) -> None:
        self.store = store
        self.writer = writer

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
        if self.writer is not None:
            self.writer.submit(path, content)
        else:
            write_bytes_atomic(path, _bytes(content), self.store.temp_dir)

    async def awrite(self, path: Path, content: Content) -> None:
        if self.writer is not None:
            self.writer.submit(path, content)
        else:
            await awrite_bytes_atomic(path, _bytes(content), self.store.temp_dir)

    def flush(self) -> None:
        """Wait until every queued write is on disk; a RecordingError for one that failed."""
        if self.writer is not None:
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _bytes(content: Content) -> bytes:
    return content if isinstance(content, bytes) else content()
