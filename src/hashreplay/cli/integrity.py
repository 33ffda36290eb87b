"""Holding recordings to the current rules: `verify` (readable, current, redacted, correctly
named), `rehash` (re-key them after the hashing rules changed), `normalize` (re-apply the
response normaliser) and `mv` (re-key a renamed or moved test's recordings under its new
name, moving all of them or none). `verify` only reads; the others print each file they
change (with `--dry-run`, would change) and a summary.
"""

from __future__ import annotations

from pathlib import Path

from hashreplay.cli.output import printable
from hashreplay.cli.run import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, Run
from hashreplay.core.errors import RecordingError, SettingsError
from hashreplay.engine.files import (
    Loaded,
    Rules,
    find_recordings,
    load,
    outside_problem,
    renormalised,
    write_json,
)
from hashreplay.engine.files import verify as verify_file


def verify(run: Run) -> int:
    files = run.files(run.args.paths)
    rules = Rules(run.config)
    bad = 0
    for path in run.console.progress(files, "verifying"):
        if (outside := outside_problem(path, run.config.root)) is not None:
            problems = [outside]  # listed with the rest; its content is not the project's
        else:
            try:
                item = load(path, run.store)
            except RecordingError as exc:
                problems = [f"unreadable: {exc.problem}; to fix it: {run.unreadable_fix(path)}"]
            else:
                problems = verify_file(item, rules)
                note = rules.rule_note(item.recording)  # not a problem: said, not counted
                if note is not None:
                    run.console.line(printable(f"{run.show_path(path)}: note: {note}"))
        bad += bool(problems)
        for problem in problems:  # problems quote recorded values: shown, never interpreted
            run.console.line(printable(f"{run.show_path(path)}: {problem}"))
    strays = run.strays(run.args.paths)
    for stray in strays:
        run.console.line(printable(f"{run.show_path(stray.path)}: {stray.problem}"))
    run.console.line(f"Summary: {bad}/{len(files)} files with problems")
    if strays:
        run.console.line(f"Also: {len(strays)} symlinks or temp files in recordings directories")
    return EXIT_PROBLEMS if bad or strays else run.status


def rehash(run: Run) -> int:
    from hashreplay.engine.rehash import apply_rekeys, plan_rekey

    dry = run.args.dry_run
    files = run.files(run.args.paths)
    rules = Rules(run.config)
    plans = [
        plan
        for item in run.load_all(files, "reading")
        if (plan := plan_rekey(item, rules)) is not None
    ]
    result = apply_rekeys(plans, dry_run=dry)
    show = run.show_path
    for plan in result.done:
        if plan.renames:
            verb = "Would rename" if dry else "Renamed"
            run.console.line(f"{verb}: {show(plan.source)} -> {plan.target.name}")
        else:
            run.console.line(f"{'Would update' if dry else 'Updated'}: {show(plan.source)}")
    for plan in result.duplicates:
        verb = "Would remove duplicate" if dry else "Removed duplicate"
        run.console.line(f"{verb}: {show(plan.source)} (the same recording is {plan.target.name})")
    for plan, why in result.collisions:
        run.console.error(
            f"collision: cannot rename {show(plan.source)} to {plan.target.name}: {why}; "
            "compare the two (hashreplay show), delete the one no test needs, then run "
            "hashreplay rehash again"
        )
    changed = len(result.done) + len(result.duplicates)
    run.console.line(f"Summary: {changed}/{len(files)} files re-keyed")
    return EXIT_PROBLEMS if result.collisions else run.status


def normalize(run: Run) -> int:
    config, dry = run.config, run.args.dry_run
    paths = list(run.args.paths)
    if not paths and getattr(run.args, "default_scope", None) == "tests":
        paths = [p for p in (config.root / "tests", config.common_dir) if p.is_dir()]
        files = find_recordings(paths, config.common_dir) if paths else []
    else:
        files = run.files(paths)
    rules = Rules(config)
    modified = 0
    for item in run.load_all(files, "normalizing"):
        data = renormalised(item, rules)
        if data is None:
            continue
        modified += 1
        if dry:
            run.console.line(f"Would normalize: {run.show_path(item.path)}")
        else:
            write_json(item.path, data, rules.store)
            run.console.line(f"Normalized: {run.show_path(item.path)}")
    run.console.line(f"Summary: {modified}/{len(files)} files modified")
    return run.status


def move(run: Run) -> int:
    """`hashreplay mv OLD NEW` (docs/design.md §14): 0 when everything moved, 1 when OLD
    names nothing or a conflict or unreadable file stopped it (nothing moved), 2 for a
    malformed OLD or NEW."""
    from hashreplay.engine.rehash import apply_moves, parse_rename, plan_moves

    args, dry, show = run.args, run.args.dry_run, run.show_path
    try:
        rename = parse_rename(args.old, args.new)
    except SettingsError as exc:
        run.console.error(str(exc))
        return EXIT_USAGE
    loaded: list[Loaded] = []
    unreadable: list[tuple[Path, RecordingError]] = []
    for path in run.console.progress(run.files(), "reading"):
        try:
            loaded.append(load(path, run.store))
        except RecordingError as exc:
            unreadable.append((path, exc))
    result = plan_moves(loaded, Rules(run.config), rename, unreadable)
    if not result.moves and not result.unreadable:
        near = f"; recorded names like it: {', '.join(result.near)}" if result.near else ""
        run.console.error(
            f"no recording belongs to {rename.describe()}{near}. "
            "`hashreplay list --test PATTERN` lists the recorded test ids"
        )
        return EXIT_PROBLEMS
    apply_moves(result, run.config.root, rename, dry_run=dry)
    for path, problem in result.unreadable:
        run.console.error(
            f"cannot move {show(path)}: unreadable: {problem.problem}; to fix it: "
            f"{run.unreadable_fix(path)}, or delete it; then run the mv again"
        )
    for plan, _why in result.rekeyed.collisions:
        run.console.error(
            f"conflict: {show(plan.target)} already exists and holds a different recording "
            f"than {show(plan.source)}, which would move there; compare them (hashreplay diff "
            f"{show(plan.source)} {show(plan.target)}), delete the one no test needs, then "
            "run the mv again"
        )
    if result.refused:
        problems = len(result.unreadable) + len(result.rekeyed.collisions)
        run.console.line(
            f"Nothing moved: {problems} problem{'' if problems == 1 else 's'} above "
            f"({len(result.moves)} recordings of {rename.describe()} left as they are)"
        )
        return EXIT_PROBLEMS
    by_source = {m.rekey.source: m for m in result.moves}
    for plan in result.rekeyed.done:
        m = by_source[plan.source]
        verb = "Would move" if dry else "Moved"
        run.console.line(
            f"{verb}: {show(plan.source)} -> {show(plan.target)} ({m.old_id} -> {m.new_id})"
        )
    for plan in result.rekeyed.duplicates:
        verb = "Would remove duplicate" if dry else "Removed duplicate"
        run.console.line(f"{verb}: {show(plan.source)} (the same recording is {show(plan.target)})")
    if result.usage_problem is not None:
        run.console.warning(
            f"the usage log was left as it is: {result.usage_problem}; until the next run "
            "writes a new one, `hashreplay prune` may not see the moved recordings as used"
        )
    tests = len({m.new_id for m in result.moves})
    summary = (
        f"Summary: {len(result.moves)} recording{'' if len(result.moves) == 1 else 's'} of "
        f"{tests} test{'' if tests == 1 else 's'} {'would move' if dry else 'moved'}"
    )
    if result.usage_moved:
        summary += f"; usage log: {result.usage_moved} test ids renamed"
    run.console.line(summary + ("; dry run: nothing written" if dry else ""))
    return EXIT_OK
