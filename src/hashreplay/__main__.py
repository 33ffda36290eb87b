"""`python -m hashreplay`: the same as the `hashreplay` command."""

from __future__ import annotations

from hashreplay.cli import entry_point

if __name__ == "__main__":
    entry_point()
