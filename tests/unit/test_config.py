"""`hashreplay.core.config`: `[tool.hashreplay]` validation and mode precedence (docs/design.md §1, §9)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hashreplay.core.config import Config, ModeSource, load_config, load_config_reporting
from hashreplay.core.constants import RECORDINGS_DIRNAME
from hashreplay.core.errors import ConfigError
from hashreplay.core.modes import Mode, RecordFailures

MODES_LISTED = "replay, record-if-missing, record, live"
VALID_KEYS = (
    "allowed_hosts",
    "blob_threshold",
    "block_network",
    "callables",
    "drift_fail",
    "ignore",
    "ignore_body_keys",
    "keep_response_headers",
    "match_headers",
    "match_on",
    "max_age",
    "max_body_bytes",
    "mode",
    "model_list_endpoints",
    "pace",
    "passthrough",
    "record_failures",
    "record_timing",
    "recordings_dir",
    "redact_keys",
    "repeat",
    "replay_env",
    "scrub",
    "stale",
    "unconsumed",
    "volatile_patterns",
)


def write_pyproject(root: Path, table: str) -> Path:
    path = root / "pyproject.toml"
    path.write_text(f'[project]\nname = "demo"\n\n[tool.hashreplay]\n{table}\n', encoding="utf-8")
    return path


def test_defaults_without_pyproject(tmp_path: Path) -> None:
    config = load_config(tmp_path, env={})
    assert config.mode is Mode.REPLAY
    assert config.mode_source is ModeSource.DEFAULT
    assert config.recordings_dir == RECORDINGS_DIRNAME
    assert config.passthrough == ()
    assert config.match_headers == ()
    assert config.ignore_body_keys == ()
    assert config.redact_keys == ()
    assert config.keep_response_headers == ()
    assert config.callables == ()
    assert config.root == tmp_path.resolve()
    assert config.config_file is None
    assert config.common_dir == tmp_path.resolve() / RECORDINGS_DIRNAME


def test_pyproject_without_table_gives_defaults(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n', encoding="utf-8")
    config = load_config(tmp_path, env={})
    assert config.mode is Mode.REPLAY
    assert config.mode_source is ModeSource.DEFAULT
    assert config.config_file is None


def test_reads_table_from_pyproject(tmp_path: Path) -> None:
    pyproject = write_pyproject(
        tmp_path,
        'mode = "record-if-missing"\n'
        'recordings_dir = "cassettes"\n'
        'passthrough = ["http://localhost:9000"]\n'
        'match_headers = ["X-Tenant", "x-tenant", "Accept"]\n'
        'ignore_body_keys = ["request_id", "metadata.trace_id"]\n'
        'redact_keys = ["x-internal"]\n'
        'keep_response_headers = ["X-Custom"]\n'
        'callables = ["pkg.mod:Client.call"]\n',
    )
    config = load_config(tmp_path, env={})
    assert config.mode is Mode.RECORD_IF_MISSING
    assert config.mode_source is ModeSource.FILE
    assert config.recordings_dir == "cassettes"
    assert config.common_dir == tmp_path.resolve() / "cassettes"
    assert config.passthrough == ("http://localhost:9000",)
    # Header names are lower-cased, de-duplicated and sorted.
    assert config.match_headers == ("accept", "x-tenant")
    assert config.ignore_body_keys == ("request_id", "metadata.trace_id")
    assert config.redact_keys == ("x-internal",)
    assert config.keep_response_headers == ("x-custom",)
    assert config.callables == ("pkg.mod:Client.call",)
    assert config.config_file == pyproject


@pytest.mark.parametrize(
    ("file_mode", "env_mode", "explicit", "expected", "source"),
    [
        (None, None, None, Mode.REPLAY, ModeSource.DEFAULT),
        ("record", None, None, Mode.RECORD, ModeSource.FILE),
        ("record", "live", None, Mode.LIVE, ModeSource.ENV),
        (None, "live", None, Mode.LIVE, ModeSource.ENV),
        ("record", "live", "record-if-missing", Mode.RECORD_IF_MISSING, ModeSource.OPTION),
        (None, None, "live", Mode.LIVE, ModeSource.OPTION),
        (None, "record", Mode.REPLAY, Mode.REPLAY, ModeSource.OPTION),
        # An empty environment variable counts as unset.
        ("record", "", None, Mode.RECORD, ModeSource.FILE),
    ],
)
def test_mode_precedence_file_env_explicit(
    tmp_path: Path,
    file_mode: str | None,
    env_mode: str | None,
    explicit: str | Mode | None,
    expected: Mode,
    source: ModeSource,
) -> None:
    if file_mode is not None:
        write_pyproject(tmp_path, f'mode = "{file_mode}"')
    env = {} if env_mode is None else {"INFERENCE_MODE": env_mode}
    config = load_config(tmp_path, env=env, mode=explicit)
    assert config.mode is expected
    assert config.mode_source is source


def test_env_mode_is_whitespace_tolerant(tmp_path: Path) -> None:
    config = load_config(tmp_path, env={"INFERENCE_MODE": "  record-if-missing\n"})
    assert config.mode is Mode.RECORD_IF_MISSING


@pytest.mark.parametrize(
    ("table", "env", "mode", "source"),
    [
        ('mode = "Record"', {}, None, "mode"),
        ("", {"INFERENCE_MODE": "Record"}, None, "INFERENCE_MODE"),
        ("", {}, "Record", "--inference-mode"),
    ],
    ids=["config", "env", "option"],
)
def test_a_mode_in_another_case_is_refused_from_every_source(
    tmp_path: Path, table: str, env: dict[str, str], mode: str | None, source: str
) -> None:
    write_pyproject(tmp_path, table)
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, env=env, mode=mode)
    assert (
        f"invalid {source} 'Record': expected one of {MODES_LISTED} "
        "(modes are lower-case: 'record')"
    ) in str(info.value)


def test_env_defaults_to_os_environ(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERENCE_MODE", "live")
    config = load_config(tmp_path)
    assert config.mode is Mode.LIVE
    assert config.mode_source is ModeSource.ENV


def test_unknown_key_names_key_file_and_valid_keys(tmp_path: Path) -> None:
    pyproject = write_pyproject(tmp_path, 'modee = "record"')
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, env={})
    message = str(info.value)
    assert "'modee'" in message
    assert str(pyproject) in message
    assert "valid keys are: " + ", ".join(VALID_KEYS) in message


@pytest.mark.parametrize("internal", ["root", "mode_source", "config_file"])
def test_internal_fields_in_file_are_unknown_keys(tmp_path: Path, internal: str) -> None:
    pyproject = write_pyproject(tmp_path, f'{internal} = "/elsewhere"')
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, env={})
    message = str(info.value)
    assert f"unknown key {internal!r}" in message
    assert str(pyproject) in message
    valid = message.split("valid keys are: ", 1)[1]
    assert internal not in valid
    assert valid.strip() == ", ".join(VALID_KEYS)


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ("passthrough = 3", "passthrough"),
        ('passthrough = "http://localhost"', "passthrough"),
        ("recordings_dir = 5", "recordings_dir"),
        ("match_headers = [1, 2]", "match_headers"),
        ("ignore_body_keys = true", "ignore_body_keys"),
    ],
)
def test_wrong_type_names_key_and_file(tmp_path: Path, line: str, key: str) -> None:
    pyproject = write_pyproject(tmp_path, line)
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, env={})
    message = str(info.value)
    assert key in message
    assert str(pyproject) in message


@pytest.mark.parametrize("value", ['"bogus"', '"recordd"', "3", '""'])
def test_invalid_mode_in_file_lists_modes_and_file(tmp_path: Path, value: str) -> None:
    pyproject = write_pyproject(tmp_path, f"mode = {value}")
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, env={})
    message = str(info.value)
    assert MODES_LISTED in message
    assert str(pyproject) in message


def test_invalid_mode_in_env_lists_modes_and_source(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, env={"INFERENCE_MODE": "replaying"})
    message = str(info.value)
    assert MODES_LISTED in message
    assert "INFERENCE_MODE" in message
    assert "'replaying'" in message


def test_invalid_explicit_mode_lists_modes(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, env={"INFERENCE_MODE": "record"}, mode="fast")
    message = str(info.value)
    assert MODES_LISTED in message
    assert "'fast'" in message
    assert "--inference-mode" in message


def test_malformed_toml_names_file(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text("[tool.hashreplay\nmode = 'record'\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, env={})
    assert str(pyproject) in str(info.value)


@pytest.mark.parametrize("toml", ["[tool]\nhashreplay = 3\n", "tool = 3\n", 'tool = "x"\n'])
def test_non_table_section_is_a_config_error(tmp_path: Path, toml: str) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(toml, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, env={})
    assert str(pyproject) in str(info.value)


def test_hashreplay_root_env_picks_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "project"
    project.mkdir()
    write_pyproject(project, 'mode = "record"')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("HASHREPLAY_ROOT", str(project))
    monkeypatch.delenv("INFERENCE_MODE", raising=False)
    config = load_config()  # the process environment
    assert config.root == project.resolve()
    assert config.mode is Mode.RECORD
    assert config.common_dir == project.resolve() / RECORDINGS_DIRNAME
    # an explicit environment mapping is the whole environment: the cwd is the root
    assert load_config(env={}).root == elsewhere.resolve()
    assert load_config(env={"HASHREPLAY_ROOT": str(project)}).root == project.resolve()


def test_root_defaults_to_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HASHREPLAY_ROOT", raising=False)
    monkeypatch.chdir(tmp_path)
    assert load_config(env={}).root == tmp_path.resolve()


def test_explicit_root_wins_over_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HASHREPLAY_ROOT", str(tmp_path / "nowhere"))
    assert load_config(tmp_path, env={}).root == tmp_path.resolve()


def test_overrides_win_over_file(tmp_path: Path) -> None:
    write_pyproject(tmp_path, 'recordings_dir = "from-file"\npassthrough = ["http://a"]')
    config = load_config(tmp_path, env={}, recordings_dir="from-option", passthrough=None)
    assert config.recordings_dir == "from-option"
    assert config.passthrough == ("http://a",)


def test_config_is_frozen() -> None:
    config = Config()
    with pytest.raises(ValueError, match="frozen"):
        config.mode = Mode.LIVE  # type: ignore[misc]


def test_volatile_patterns_are_validated(tmp_path: Path) -> None:
    write_pyproject(tmp_path, "volatile_patterns = [\"uuid\", 'order-(\\d+']")
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, env={})
    message = str(info.value)
    assert "volatile_patterns" in message
    assert "volatile pattern 'order-(" in message
    assert "neither a built-in name (uuid, iso-timestamp" in message


def test_model_list_endpoints_must_be_paths(tmp_path: Path) -> None:
    write_pyproject(tmp_path, 'model_list_endpoints = ["models"]')
    with pytest.raises(ConfigError, match="must be a path end like '/models'"):
        load_config(tmp_path, env={})


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (
            'passthrough = "http://localhost"',
            '`passthrough` must be a list of strings, got a string ("http://localhost")',
        ),
        (
            'match_headers = ["x-a", 2]',
            "`match_headers` must be a list of strings, got an integer (2) as item 2",
        ),
        ("recordings_dir = 5", "`recordings_dir` must be a string, got an integer (5)"),
        (
            "recordings_dir = 2020-01-01",
            "`recordings_dir` must be a string, got a date (2020-01-01)",
        ),
        (
            "ignore_body_keys = true",
            "`ignore_body_keys` must be a list of strings, got a boolean (true)",
        ),
        ("redact_keys = {a = 1}", "`redact_keys` must be a list of strings, got a table"),
    ],
)
def test_type_errors_speak_toml(tmp_path: Path, line: str, said: str) -> None:
    pyproject = write_pyproject(tmp_path, line)
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, env={})
    message = str(info.value)
    assert message.startswith(f"invalid [tool.hashreplay] in {pyproject}:\n  ")
    assert said in message
    assert "Input should" not in message and "tuple" not in message


def test_every_problem_is_listed(tmp_path: Path) -> None:
    write_pyproject(tmp_path, 'passthrough = "x"\nrecordings_dir = 1\nbogus = 2')
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, env={})
    lines = str(info.value).splitlines()[1:]
    assert len(lines) == 3
    assert any(line.startswith("  unknown key 'bogus'") for line in lines)


def test_every_problem_of_the_file_is_listed_at_once(tmp_path: Path) -> None:
    pyproject = write_pyproject(
        tmp_path,
        'mode = "Record"\npace = "fast"\nunconsumed = "sometimes"\nblock_network = "most"\n'
        'passthrough = "http://a"\nroot = "/elsewhere"\nmodee = 1\nmax_body_bytes = 0\n'
        'recordings_dir = "rec"',
    )
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, env={"INFERENCE_MODE": "often", "HASHREPLAY_PACE": "slow"})
    lines = str(info.value).splitlines()
    assert lines[0] == f"invalid [tool.hashreplay] in {pyproject}:"
    valid = "valid keys are: " + ", ".join(VALID_KEYS)
    assert sorted(lines[1:9]) == sorted(
        [
            f"  unknown key 'root'; {valid}",
            f"  unknown key 'modee'; {valid}",
            f"  mode: invalid mode 'Record': expected one of {MODES_LISTED} "
            "(modes are lower-case: 'record')",
            '  `pace`: \'fast\' is not a pace; use "instant", "recorded" or "fixed:<ms>" '
            '(e.g. "fixed:50") (got "fast")',
            '  `unconsumed`: \'sometimes\' is not valid; use one of "warn", "fail", "ignore" '
            '(got "sometimes")',
            "  `block_network`: must be one of 'non-loopback', 'all', 'off' (got \"most\")",
            '  `passthrough` must be a list of strings, got a string ("http://a")',
            "  `max_body_bytes` must be at least 1, got 0",
        ]
    )
    assert lines[9:] == [  # the environment's problems follow the file's
        'HASHREPLAY_PACE: \'slow\' is not a pace; use "instant", "recorded" or "fixed:<ms>" '
        '(e.g. "fixed:50")',
        f"invalid INFERENCE_MODE 'often': expected one of {MODES_LISTED}",
    ]


def test_reporting_keeps_every_valid_setting_when_a_mode_is_given(tmp_path: Path) -> None:
    write_pyproject(tmp_path, 'mode = "Record"\nrecordings_dir = "rec"\npace = 3')
    config, problem = load_config_reporting(tmp_path, env={"INFERENCE_MODE": "record"})
    assert (config.mode, config.mode_source) == (Mode.RECORD, ModeSource.ENV)
    assert config.recordings_dir == "rec"  # valid: kept
    assert str(config.pace) == "instant"  # in error: its default
    assert problem is not None
    assert "mode: invalid mode 'Record'" in str(problem) and "`pace`" in str(problem)
    # the file's mode is valid and another key is not: the file's mode counts
    write_pyproject(tmp_path, 'mode = "live"\npace = 3')
    config, problem = load_config_reporting(tmp_path, env={})
    assert (config.mode, config.mode_source) == (Mode.LIVE, ModeSource.FILE)
    assert problem is not None and "`pace`" in str(problem)
    assert load_config_reporting(tmp_path, env={}, mode="replay")[0].mode is Mode.REPLAY


def test_reporting_refuses_when_the_mode_is_unknown(tmp_path: Path) -> None:
    write_pyproject(tmp_path, 'mode = "sometimes"\npace = 3')
    with pytest.raises(ConfigError, match="mode: invalid mode 'sometimes'"):
        load_config_reporting(tmp_path, env={})
    with pytest.raises(ConfigError, match="invalid INFERENCE_MODE 'Replay'"):
        load_config_reporting(tmp_path, env={"INFERENCE_MODE": "Replay"})
    write_pyproject(tmp_path, 'mode = "live"')
    assert load_config_reporting(tmp_path, env={}) == (load_config(tmp_path, env={}), None)


def test_record_failures_defaults_to_answers_only_and_is_a_closed_set(tmp_path: Path) -> None:
    assert load_config(tmp_path, env={}).record_failures is RecordFailures.RESPONSES
    write_pyproject(tmp_path, 'record_failures = "all"')
    assert load_config(tmp_path, env={}).record_failures is RecordFailures.ALL
    pyproject = write_pyproject(tmp_path, 'record_failures = "All"')
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, env={})
    assert str(info.value).splitlines() == [
        f"invalid [tool.hashreplay] in {pyproject}:",
        '  `record_failures`: \'All\' is not valid; use one of "responses", "all" (got "All")',
    ]
