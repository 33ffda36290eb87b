"""Re-record the example suite against the local fake upstream (no key, no internet).

    python scripts/record_examples.py

Runs the suite from the repository root, as CI replays it: per-suite files land in
`examples/tests/recordings/`, shared model lists in the top-level `recordings/`. The fake
listens on a free port: a loopback upstream's URL is stored without its port, so the files
are identical on every re-record. Users record their own suites against the real API instead:
`INFERENCE_MODE=record-if-missing pytest` with their key in the environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from tests.fakes.upstream import FakeUpstream

    with FakeUpstream() as fake:
        env = {
            **os.environ,
            "OPENAI_BASE_URL": f"{fake.url}/v1",
            "OPENAI_API_KEY": "sk-example-recording-key-0123456789",
            "INFERENCE_MODE": "record",
        }
        return subprocess.call(
            [sys.executable, "-m", "pytest", "-p", "hashreplay", "examples/", "-q"],
            cwd=ROOT,
            env=env,
        )


if __name__ == "__main__":
    sys.exit(main())
