"""The usage log's decisions in isolation: outcomes, merging worker reports, full-suite rules."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hashreplay import Mode
from hashreplay.core.format import RecordedRequest, RecordedResponse, new_recording
from hashreplay.engine.prune import KEPT_FOREIGN, REASON_UNUSED, judge, plan_prune
from hashreplay.engine.usage import RunUsage, TestUsage, UsageCollector, read_usage, write_usage
from hashreplay.plugin.run import merge_worker_piece


@pytest.mark.parametrize(
    ("phases", "outcome", "completed"),
    [
        (("passed", "passed", "passed"), "passed", True),
        (("passed", "failed", "passed"), "failed", False),
        (("failed", None, "passed"), "error", False),
        (("passed", "passed", "failed"), "error", False),
        (("skipped", None, "passed"), "skipped", False),
        (("passed", "skipped", "passed"), "skipped", False),  # pytest.skip() or xfail
        (("passed", "passed", None), "incomplete", False),  # interrupted before teardown
        (("passed", None, "passed"), "incomplete", False),  # --setup-only
    ],
)
def test_a_test_ran_to_completion_only_when_every_phase_did(
    phases: tuple[str | None, str | None, str | None], outcome: str, completed: bool
) -> None:
    setup, call, teardown = phases
    test = TestUsage(setup=setup, call=call, teardown=teardown, mode="replay")
    assert (test.outcome, test.completed, test.prunable) == (outcome, completed, completed)


def test_live_or_passthrough_tests_are_never_prunable() -> None:
    done = {"setup": "passed", "call": "passed", "teardown": "passed"}
    assert not TestUsage(**done, mode="live").prunable
    assert not TestUsage(**done, mode="replay", passthrough=True).prunable
    assert TestUsage(**done, mode="record-if-missing").prunable


def _collector(test_ids: list[str], ran: list[str]) -> UsageCollector:
    collector = UsageCollector()
    collector.note_collected(test_ids)
    for test_id in ran:
        collector.note_start(test_id, 0)
        for when in ("setup", "call", "teardown"):
            collector.note_report(test_id, when, "passed")
        collector.note_finish(test_id, 0, Mode.REPLAY)
    return collector


def test_workers_are_merged_and_a_silent_worker_makes_the_run_partial(tmp_path: Path) -> None:
    controller = UsageCollector()
    worker_a = _collector(["t::a", "t::b"], ["t::a"])
    worker_a.add_files({"t::a": [tmp_path / "tests" / "recordings" / "1.json"]}, tmp_path)
    worker_b = _collector(["t::a", "t::b"], ["t::b"])
    for worker in (worker_a, worker_b):
        controller.merge_worker(worker.piece.model_dump(mode="json"))
    run = controller.finish(root=tmp_path, mode=Mode.REPLAY, reasons=[])
    assert run.full_suite, run.partial_reasons
    assert run.tests["t::a"].files == ["tests/recordings/1.json"]

    crashed = UsageCollector()
    crashed.merge_worker(worker_a.piece.model_dump(mode="json"))
    merge_worker_piece(crashed, None, "gw1")  # testnodedown of a worker that died: no piece
    partial = crashed.finish(root=tmp_path, mode=Mode.REPLAY, reasons=[])
    assert not partial.full_suite
    assert partial.partial_reasons == [
        "worker gw1 ended without reporting its usage",
        "did not run: 1 test (stopped early, or a worker crashed)",
    ]
    garbled = UsageCollector()
    garbled.merge_worker({"tests": "not a mapping"})
    assert garbled.piece.notes == ["a worker sent an unreadable usage report"]


def test_the_same_test_from_two_workers_keeps_the_worse_outcome(tmp_path: Path) -> None:
    first = _collector(["t::a"], ["t::a"])
    second = UsageCollector()
    second.note_report("t::a", "setup", "passed")
    second.note_report("t::a", "call", "failed")
    second.note_report("t::a", "teardown", "passed")
    second.note_finish("t::a", 0, Mode.LIVE)
    first.merge_worker(second.piece.model_dump(mode="json"))
    merged = first.piece.tests["t::a"]
    assert (merged.outcome, merged.mode, merged.passthrough) == ("failed", "live", True)


def test_files_of_unknown_test_ids_count_as_used(tmp_path: Path) -> None:
    collector = _collector(["t::a"], ["t::a"])
    server_file = tmp_path / "tests" / "recordings" / "2.json"
    collector.add_files(
        {"t::served": [server_file], None: [tmp_path / "recordings" / "3.json"]}, tmp_path
    )
    run = collector.finish(root=tmp_path, mode=Mode.REPLAY, reasons=[])
    assert run.outside_tests == ["recordings/3.json", "tests/recordings/2.json"]
    assert run.used_files() == {"recordings/3.json", "tests/recordings/2.json"}


def test_plan_prune_rules(tmp_path: Path) -> None:
    collector = _collector(["t::a", "t::b"], ["t::a", "t::b"])
    collector.note_deselected([])
    run = collector.finish(root=tmp_path, mode=Mode.REPLAY, reasons=[])
    run.started = time.time() + 60  # every file below is older than the run

    def recording(test_id: str | None, name: str) -> tuple[Path, object]:
        path = tmp_path / "tests" / "recordings" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
        request = RecordedRequest(method="POST", url="http://x/v1/chat", endpoint="/v1/chat")
        return path, new_recording(
            test_id=test_id, request=request, responses=[RecordedResponse(status=200)]
        )

    files = [
        recording("t::a", "a.json"),
        recording("t::gone", "gone.json"),
        recording(None, "outside.json"),
    ]
    found = plan_prune(run, files, tmp_path)  # type: ignore[arg-type]
    # only a test id this run collected is judged: `t::gone` (a removed test, or a proxy's
    # test id naming a collected file) is kept and counted
    assert [(u.path.name, u.reason) for u in found] == [("a.json", REASON_UNUSED)]
    kept = judge(run, files, tmp_path).kept  # type: ignore[arg-type]
    assert [(u.path.name, u.reason) for u in kept] == [
        ("gone.json", KEPT_FOREIGN),
        ("outside.json", "no test id, and this run did not use it"),
    ]
    partial = collector.finish(root=tmp_path, mode=Mode.REPLAY, reasons=["-k 'a'"])
    partial.started = run.started
    assert [u.path.name for u in plan_prune(partial, files, tmp_path)] == ["a.json"]  # type: ignore[arg-type]
    fresh = collector.finish(root=tmp_path, mode=Mode.REPLAY, reasons=[])
    fresh.started = time.time() - 60  # the files changed after the run started
    assert plan_prune(fresh, files, tmp_path) == []  # type: ignore[arg-type]


def test_a_finished_run_shares_no_state_with_the_collector(tmp_path: Path) -> None:
    collector = _collector(["t::a"], ["t::a"])
    collector.add_files({"t::a": [tmp_path / "recordings" / "1.json"]}, tmp_path)
    run = collector.finish(root=tmp_path, mode=Mode.REPLAY, reasons=[])
    run.tests["t::a"].files.append("other.json")
    run.tests["t::a"].call = "failed"
    again = collector.finish(root=tmp_path, mode=Mode.REPLAY, reasons=[])
    assert again.tests["t::a"].files == ["recordings/1.json"]
    assert again.tests["t::a"].outcome == "passed"
    assert again.tests["t::a"].model_dump(mode="json") == TestUsage(
        setup="passed", call="passed", teardown="passed", mode="replay", files=["recordings/1.json"]
    ).model_dump(mode="json")


def test_the_log_a_run_writes_is_what_its_models_read_back(tmp_path: Path) -> None:
    """A run writes the log from the models it fills; reading it back gives the same
    `RunUsage`, computed fields and all."""
    collector = _collector(["t::a", "t::b", "t::c"], ["t::a", "t::b"])
    collector.note_report("t::b", "call", "failed")
    collector.note_finish("t::b", 1, Mode.LIVE)
    collector.note_deselected(["t::d"])
    collector.note("a note")
    worker = _collector(["t::e"], ["t::e"])
    collector.merge_worker(worker.piece_json())
    collector.add_files(
        {"t::a": [tmp_path / "r" / "1.json"], None: [tmp_path / "r" / "2.json"]}, tmp_path
    )
    run = collector.finish(root=tmp_path, mode=Mode.REPLAY, reasons=["-k 'a'"])
    written = run.model_dump(mode="json")
    read = RunUsage.model_validate(written)
    assert read.model_dump(mode="json") == written
    assert written["tests"]["t::b"]["outcome"] == "failed"
    assert written["tests"]["t::e"]["completed"] is True
    assert written["partial_reasons"] == [
        "-k 'a'",
        "a note",
        "deselected: 1 test",
        "did not run: 1 test (stopped early, or a worker crashed)",
    ]
    path = write_usage(run, tmp_path)
    assert read_usage(tmp_path).model_dump(mode="json") == written
    assert path == tmp_path / ".hashreplay" / "usage.json"
