"""`hashreplay rehash`: re-key recordings after the hashing or normalising rules changed.

Each file's key is recomputed from its stored request (re-normalised under the current
rules), the file is renamed to it and its `key_version` updated, so no recording becomes
unreachable. The stored URL is brought to its current form too (a loopback upstream keeps
no port); the URL is not hashed, so that never renames a file. A rename never overwrites
a different file: that is reported as a collision.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hashreplay.core.constants import KEY_VERSION
from hashreplay.core.keys import stored_url
from hashreplay.engine.files import Loaded, Rules, write_like


@dataclass(frozen=True)
class Rekey:
    """One file re-keyed: where it is, where it belongs, and its new bytes."""

    source: Path
    target: Path
    content: bytes

    @property
    def renames(self) -> bool:
        return self.source.name != self.target.name


def plan_rekey(loaded: Loaded, rules: Rules) -> Rekey | None:
    """The file re-normalised and re-named under the current rules; None when it is current."""
    recording = loaded.recording
    body = rules.renormalised_body(recording)
    url = stored_url(recording.request.url)
    request = recording.request.replace(body=body, url=url)
    rule = rules.rule_of(recording)  # the file's own, else the project's (docs/design.md §14)
    match = None if rule is None else rule.as_json()
    updated = recording.replace(key_version=KEY_VERSION, request=request, match=match)
    content = rules.store.dump(updated)
    target = loaded.path.with_name(rules.file_name(recording, body))
    if target == loaded.path and content == loaded.content:
        return None
    return Rekey(loaded.path, target, content)


@dataclass
class RekeyResult:
    done: list[Rekey] = field(default_factory=list)
    #: Sources dropped because their target already held exactly the same recording.
    duplicates: list[Rekey] = field(default_factory=list)
    collisions: list[tuple[Rekey, str]] = field(default_factory=list)


class _Overlay:
    """The file system as it will be after the planned writes (all of them, or none)."""

    def __init__(self, write: bool) -> None:
        self.write = write
        self.changed: dict[Path, bytes | None] = {}

    def read(self, path: Path) -> bytes | None:
        if path in self.changed:
            return self.changed[path]
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError:
            return b""  # present but unreadable: never overwritten

    def put(self, path: Path, content: bytes, like: Path) -> None:
        if self.write:
            write_like(path, content, like)
        self.changed[path] = content

    def delete(self, path: Path) -> None:
        if self.write:
            path.unlink(missing_ok=True)
        self.changed[path] = None


def apply_rekeys(plans: Sequence[Rekey], *, dry_run: bool) -> RekeyResult:
    """Write every plan that can be written without overwriting a different file.

    A plan whose target is a file that itself still has to move waits for it (so `a → b`,
    `b → c` works in any order); a target holding a different recording is a collision,
    reported and left alone; one holding the very same bytes makes the source a duplicate.
    The new file is written before the old one is removed, so a crash loses nothing.
    """
    fs = _Overlay(write=not dry_run)
    result = RekeyResult()
    pending = list(plans)
    while pending:
        moving = {p.source.resolve() for p in pending if p.renames}
        waiting: list[Rekey] = []
        for plan in pending:
            if not plan.renames:
                fs.put(plan.source, plan.content, plan.source)
                result.done.append(plan)
                continue
            existing = fs.read(plan.target)
            if existing is None:
                fs.put(plan.target, plan.content, plan.source)
                fs.delete(plan.source)
                result.done.append(plan)
            elif plan.target.resolve() in moving:
                waiting.append(plan)
            elif existing == plan.content:
                fs.delete(plan.source)
                result.duplicates.append(plan)
            else:
                result.collisions.append((plan, "it exists and holds a different recording"))
        if len(waiting) == len(pending):
            result.collisions.extend(
                (p, "its target has to move first, in a cycle of renames") for p in waiting
            )
            break
        pending = waiting
    return result
