"""Ids that become store key segments (run, session and job ids) and agent names: checked at
the API boundary with a clear ``UserError``, before anything starts."""

from __future__ import annotations

from typing import Any

import pytest

import raygents as rg
from raygents import ids
from raygents.runtime.driver import runs
from raygents.sessions import validate_session_id
from raygents.testing import ScriptedModel

HOSTILE = [
    "victim/x",
    "v/fence.3",
    "../x",
    "..",
    ".",
    ".hidden",
    "a..b",
    "%2e%2e",
    "%2e%2e%2fx",
    "a\x00b",
    "a\nb",
    "x" * 2000,
    "x" * 129,
    "v\u0456ctim",  # a Cyrillic i: looks like "victim"
    "\uff56\uff49\uff43\uff54\uff49\uff4d",  # fullwidth "victim"
    "victim\u200b",  # zero-width space
    "-flag",
    "a b",
    "",
]
GOOD = ["a", "0", "_x", "run-18f3a.7b", "user-42.v2", "A" * 128, "6f1c2f0e-uuid"]


@pytest.mark.parametrize("value", GOOD)
@pytest.mark.parametrize("what", ["run id", "session id", "job id"])
def test_single_segments_pass(value: str, what: ids.IdKind) -> None:
    assert ids.validate_id(value, what) == value


@pytest.mark.parametrize("value", HOSTILE)
@pytest.mark.parametrize("what", ["run id", "session id", "job id"])
def test_hostile_ids_are_refused_naming_the_id(value: str, what: ids.IdKind) -> None:
    with pytest.raises(rg.UserError, match=f"invalid {what}") as info:
        ids.validate_id(value, what)
    message = str(info.value)
    assert len(message) < 400, "a long id is cut in the message"
    assert "letters, digits" in message, "the message says what an id may hold"


@pytest.mark.parametrize("value", [None, 7, b"run", ["r"]])
def test_ids_must_be_str(value: Any) -> None:
    with pytest.raises(rg.UserError, match="must be a str"):
        ids.validate_id(value, "run id")


@pytest.mark.parametrize("value", HOSTILE)
def test_session_ids_use_the_same_rule(value: str) -> None:
    with pytest.raises(rg.UserError, match="invalid session id"):
        validate_session_id(value)


@pytest.fixture
def no_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any use of the runtime fails the test: ids are checked before anything starts."""

    def refuse() -> None:
        raise AssertionError("the runtime was used before the id was checked")

    monkeypatch.setattr(runs, "current", refuse)


def _agent() -> rg.Agent:
    return rg.Agent("boundary", model=ScriptedModel([]))


@pytest.mark.usefixtures("no_runtime")
@pytest.mark.parametrize("value", ["victim/x", "v/fence.3", "../x", "%2e%2e", "a\x00b", "x" * 2000])
def test_the_api_refuses_hostile_run_ids_before_any_remote_call(value: str) -> None:
    with pytest.raises(rg.UserError, match="invalid run id"):
        rg.start(_agent(), "hi", run_id=value)
    with pytest.raises(rg.UserError, match="invalid run id"):
        rg.run(_agent(), "hi", run_id=value)
    with pytest.raises(rg.UserError, match="invalid run id"):
        rg.resume(value, agent=_agent())
    with pytest.raises(rg.UserError, match="invalid run id"):
        rg.attach(value)


@pytest.mark.usefixtures("no_runtime")
def test_the_api_refuses_a_hostile_session_id() -> None:
    agent = rg.Agent("sessioned", model=ScriptedModel([]), session=rg.MemorySession())
    with pytest.raises(rg.UserError, match="invalid session id"):
        rg.start(agent, "hi", session_id="victim/x")


@pytest.mark.parametrize(
    "name", ["Billing Support", "triage", "Agent #2 (EU)", "Übersetzer", "x" * 128]
)
def test_agent_names_may_hold_spaces_and_unicode(name: str) -> None:
    assert ids.validate_agent_name(name) == name
    assert rg.Agent(name).name == name


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("a/b", "'/'"),
        ("a\x00b", "control character"),
        ("line\nbreak", "control character"),
        ("tab\there", "control character"),
        ("bell\x07", "control character"),
        ("del\x7f", "control character"),
        ("x" * 129, "at most 128"),
        ("   ", "non-empty"),
        ("", "non-empty"),
    ],
)
def test_agent_names_without_slashes_or_control_characters(name: str, why: str) -> None:
    with pytest.raises(rg.UserError, match=why):
        ids.validate_agent_name(name)
    with pytest.raises(rg.UserError, match=why):
        rg.Agent(name)


def test_agent_name_must_be_str() -> None:
    with pytest.raises(rg.UserError, match="non-empty string"):
        rg.Agent(42)  # type: ignore[arg-type]
