"""Re-apply the response normaliser to recordings (docs/design.md §5) after its rules improved.

    python scripts/normalize_recordings.py [--dry-run] [PATHS...]

Rewrites response bodies only (ids, timestamps, durations, fingerprints); the request part of
every file stays byte-identical, so no file is renamed or orphaned. Default paths: every
`recordings` directory under `tests/`, plus the common directory. `--dry-run` writes nothing
and prints `Would normalize: <path>` for each file that would change. Both modes end with
`Summary: N/M files modified`. Unreadable files are reported, left untouched, and make the
exit status 1. The same as `hashreplay normalize` (which defaults to the whole project).
"""

from __future__ import annotations

import sys

from hashreplay.cli import normalize_script

if __name__ == "__main__":
    sys.exit(normalize_script(sys.argv[1:]))
