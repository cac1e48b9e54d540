"""The error tree: every error builds from a message alone and survives pickling."""

from __future__ import annotations

import pickle

import pytest
from ray import cloudpickle

import raygents as rg
from raygents import errors

ALL = [getattr(errors, name) for name in errors.__all__ if isinstance(getattr(errors, name), type)]

FIELDS = {
    rg.MaxTurnsExceeded: {"max_turns": 3},
    rg.MaxToolDepthExceeded: {"max_depth": 2},
    rg.InputGuardrailTripped: {"guardrail": "g", "guardrail_message": "no"},
    rg.OutputGuardrailTripped: {"guardrail": "g", "guardrail_message": "no"},
    rg.SuspendedError: {"cause": rg.SUSPEND_FOR_CHECKPOINT, "checkpoint": {"seq": 1}},
    rg.RunInterrupted: {
        "pending": [rg.PendingApproval(call_id="c", agent_name="a", tool_name="t", arguments="{}")]
    },
    rg.ToolNotFound: {"tool_name": "nope"},
    rg.ModelError: {"status_code": 429, "retryable": True},
    rg.OutputValidationError: {"errors": [("/a", "bad")], "output": "{}"},
    rg.CheckpointError: {"key": "runs/r/1"},
    rg.CheckpointCorrupt: {"key": "runs/r/1", "reason": "checksum"},
}


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
def test_every_error_is_a_raygents_error_built_from_a_message(cls: type) -> None:
    error = cls("something happened")
    assert isinstance(error, rg.RaygentsError)
    assert str(error) == "something happened"


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.__name__)
@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps], ids=["pickle", "cloudpickle"])
def test_every_error_survives_pickling_with_its_fields(cls: type, dumps: object) -> None:
    fields = FIELDS.get(cls, {})
    error = cls("boom", run_id="run-1", **fields)
    copy = pickle.loads(dumps(error))  # type: ignore[operator]
    assert type(copy) is cls
    assert copy.message == "boom" and copy.run_id == "run-1"
    for name, value in fields.items():
        assert getattr(copy, name) == value
    assert "run-1" in str(copy)


def test_unknown_fields_are_refused() -> None:
    with pytest.raises(TypeError, match="unexpected fields"):
        rg.ToolNotFound("x", color="red")


def test_with_run_id_keeps_an_existing_id() -> None:
    error = rg.UserError("x", run_id="a")
    assert error.with_run_id("b").run_id == "a"
    assert rg.UserError("y").with_run_id("b").run_id == "b"
