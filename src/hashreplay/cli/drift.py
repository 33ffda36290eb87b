"""`drift-report`: the last `pytest --hashreplay-drift` result, every difference of every
drifted test.
"""

from __future__ import annotations

from hashreplay.cli.run import EXIT_OK, EXIT_PROBLEMS, Run


def drift_report(run: Run) -> int:
    """The last drift run's result (`.hashreplay/drift.json`), every difference of every
    drifted test; 1 when it found drift or there is no result, else 0."""
    from hashreplay.engine.drift import drift_path, read_result, render

    root = run.config.root
    try:
        result = read_result(root)
    except ValueError as exc:
        run.console.error(str(exc))
        return EXIT_PROBLEMS
    if result is None:
        run.console.error(
            f"no drift result: {drift_path(root)} does not exist. Run `pytest "
            "--hashreplay-drift` with the providers' keys set (a run that was interrupted "
            "writes none)"
        )
        return EXIT_PROBLEMS
    for line in render(result, every=True):
        run.console.line(line)
    return EXIT_PROBLEMS if result.get("drifted") else EXIT_OK
