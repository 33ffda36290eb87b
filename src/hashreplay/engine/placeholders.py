"""Keyless replay for the front ends (docs/design.md §2): placeholders for unset provider key
variables while a replay-mode run or test runs, taken away again for tests in another mode
and when the run ends. Only variables that were unset are ever touched.

Used by the pytest plugin and by `hashreplay.install()`, so it lives below both (the plugin
package imports pytest; a server process calling `install()` must not).
"""

from __future__ import annotations

import os
import threading
from collections.abc import MutableMapping

from hashreplay.core.config import Config
from hashreplay.core.modes import Mode
from hashreplay.core.network import missing, replay_env_values


class Placeholders:
    def __init__(self, config: Config, environ: MutableMapping[str, str] | None = None) -> None:
        self.environ = os.environ if environ is None else environ
        self.values = replay_env_values(config.replay_env)
        #: the variables that get a placeholder in an empty environment: when each is set,
        #: there is nothing to do (one lookup each, the whole per-test cost)
        self._usual = tuple(missing(self.values, {}))
        self._set: dict[str, str] = {}
        self._lock = threading.Lock()

    def apply(self, mode: Mode) -> None:
        """Placeholders on in replay mode, off in every other mode."""
        if mode is Mode.REPLAY:
            self._add()
        else:
            self.remove()

    def _add(self) -> None:
        # after each test of a replay run: the watched variables themselves are looked at,
        # since a test may delete one and set another (the environment's size cannot tell)
        get = self.environ.get
        for name in self._usual:
            if not get(name):
                break
        else:
            return
        with self._lock:
            for name, value in missing(self.values, self.environ).items():
                self.environ[name] = value
                self._set[name] = value

    def remove(self) -> None:
        """Take away every placeholder this object set (and that nobody changed since)."""
        with self._lock:
            for name, value in self._set.items():
                if self.environ.get(name) == value:
                    del self.environ[name]
            self._set.clear()

    @property
    def active(self) -> dict[str, str]:
        return dict(self._set)
