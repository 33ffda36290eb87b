"""A pytest run with an invalid `[tool.hashreplay]` stops before any test, listing every
problem at once (each naming its key), and a mode in another case is refused from the file
as from `INFERENCE_MODE`."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

MODES = "replay, record-if-missing, record, live"


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    for name in ("INFERENCE_MODE", "HASHREPLAY_PACE"):
        monkeypatch.delenv(name, raising=False)
    pytester.makepyfile(test_app="def test_nothing():\n    pass\n")
    return pytester


def table(pytester: pytest.Pytester, lines: str) -> None:
    pytester.makepyprojecttoml(
        '[tool.pytest.ini_options]\naddopts = "-p no:hypothesispytest -p no:asyncio"\n'
        f"[tool.hashreplay]\n{lines}\n"
    )


def test_every_problem_is_listed_in_one_run(project: pytest.Pytester) -> None:
    table(
        project,
        'mode = "Record"\nblock_network = "most"\nallowed_hosts = "db"\nunconsumed = "never"\n'
        "replay_envv = false",
    )
    run = project.runpytest()
    assert run.ret == pytest.ExitCode.USAGE_ERROR
    err = run.stderr.str()
    assert f"hashreplay: invalid [tool.hashreplay] in {project.path / 'pyproject.toml'}:" in err
    for line in (
        f"  mode: invalid mode 'Record': expected one of {MODES} (modes are lower-case: 'record')",
        "  `block_network`: must be one of 'non-loopback', 'all', 'off' (got \"most\")",
        '  `allowed_hosts` must be a list of strings, got a string ("db")',
        "  `unconsumed`: 'never' is not valid",
        "  unknown key 'replay_envv'; valid keys are: ",
    ):
        assert line in err
    assert "passed" not in run.stdout.str()


@pytest.mark.parametrize("where", ["config", "env"])
def test_a_mode_in_another_case_is_refused(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    if where == "config":
        table(project, 'mode = "Record"')
        source = "mode"
    else:
        table(project, "")
        monkeypatch.setenv("INFERENCE_MODE", "Record")
        source = "INFERENCE_MODE"
    run = project.runpytest()
    assert run.ret == pytest.ExitCode.USAGE_ERROR
    assert (
        f"invalid {source} 'Record': expected one of {MODES} (modes are lower-case: 'record')"
        in run.stderr.str()
    )
