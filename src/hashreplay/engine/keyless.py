"""Keyless replay for the front ends (docs/design.md §12): placeholders for unset provider key
variables while a replay-mode run or test runs, taken away again for tests in another mode
and when the run ends. Only variables that were unset are ever touched.

Used by the pytest plugin and by `hashreplay.install()`, so it lives below both (the plugin
package imports pytest; a server process calling `install()` must not)."""

from __future__ import annotations

import os
import threading
from collections.abc import MutableMapping

from hashreplay.core.config import Config
from hashreplay.core.mode import Mode
from hashreplay.core.replay_env import missing, replay_env_values


class Placeholders:
    def __init__(self, config: Config, environ: MutableMapping[str, str] | None = None) -> None:
        self.environ = os.environ if environ is None else environ
        self.values = replay_env_values(config.replay_env)
        self._set: dict[str, str] = {}
        self._lock = threading.Lock()
        #: the environment's size when every placeholder was last checked in place
        self._checked_size: int | None = None

    def apply(self, mode: Mode) -> None:
        """Placeholders on in replay mode, off in every other mode."""
        if mode is Mode.REPLAY:
            self._add()
        else:
            self.remove()

    def _add(self) -> None:
        with self._lock:
            # after each test of a replay run: unless the environment lost or gained a
            # variable since the last look, every placeholder is still in place (looking up
            # each of ~15 variables again cost more than the rest of a test's hooks)
            size = len(self.environ)
            if self._checked_size == size:
                return
            for name, value in missing(self.values, self.environ).items():
                self.environ[name] = value
                self._set[name] = value
            self._checked_size = len(self.environ)

    def remove(self) -> None:
        """Take away every placeholder this object set (and that nobody changed since)."""
        with self._lock:
            self._checked_size = None
            for name, value in self._set.items():
                if self.environ.get(name) == value:
                    del self.environ[name]
            self._set.clear()

    @property
    def active(self) -> dict[str, str]:
        return dict(self._set)
