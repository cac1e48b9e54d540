"""The error tree: every error builds from a message alone and survives pickling."""

from __future__ import annotations

import pickle

import pytest
from ray import cloudpickle

import raygents as rg
from raygents import errors

ALL = [getattr(errors, name) for name in errors.__all__ if isinstance(getattr(errors, name), type)]

FIELDS = {
    rg.LimitExceeded: {"limit": "max_model_calls", "value": 40},
    rg.MaxTurnsExceeded: {"limit": "max_turns", "value": 3, "max_turns": 3},
    rg.MaxToolDepthExceeded: {"limit": "max_tool_depth", "value": 2, "max_depth": 2},
    rg.ModelOutputError: {
        "agent_name": "a",
        "tool_name": "add",
        "excerpt": "'{oops'",
        "max_output_retries": 3,
    },
    rg.InputGuardrailTripped: {"guardrail": "g", "guardrail_message": "no"},
    rg.OutputGuardrailTripped: {"guardrail": "g", "guardrail_message": "no"},
    rg.SuspendedError: {"cause": rg.SUSPEND_FOR_CHECKPOINT, "checkpoint": {"seq": 1}},
    rg.RunInterrupted: {
        "pending": [rg.PendingApproval(call_id="c", agent_name="a", tool_name="t", arguments="{}")]
    },
    rg.RunInDoubt: {
        "calls": [
            rg.InDoubt(
                call_id="c",
                agent_name="a",
                tool_name="t",
                arguments="{}",
                idempotency_key="r:c",
                started_at=1.0,
            )
        ]
    },
    rg.ResolutionsMismatch: {"missing": ["c"], "unknown": ["d"]},
    rg.ToolNotFound: {"tool_name": "nope"},
    rg.ModelError: {"status_code": 429, "retryable": True},
    rg.OutputValidationError: {"errors": [("/a", "bad")], "output": "{}"},
    rg.CheckpointError: {"key": "runs/r/1"},
    rg.CheckpointCorrupt: {"key": "runs/r/1", "reason": "checksum"},
    rg.TooManyRuns: {"tenant": "acme", "limit": 8},
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


# --- LimitExceeded -------------------------------------------------------------------------

# (class, fields given, the limit, value and older field it reads back)
LIMITS = [
    (rg.MaxTurnsExceeded, {"max_turns": 3}, "max_turns", 3, ("max_turns", 3)),
    (rg.MaxTurnsExceeded, {"value": 3}, "max_turns", 3, ("max_turns", 3)),
    (
        rg.MaxTurnsExceeded,
        {"limit": "max_model_calls", "value": 40},
        "max_model_calls",
        40,
        ("max_turns", 40),
    ),
    (rg.MaxToolDepthExceeded, {"max_depth": 2}, "max_tool_depth", 2, ("max_depth", 2)),
    (rg.MaxToolDepthExceeded, {}, "max_tool_depth", None, ("max_depth", None)),
    (rg.LimitExceeded, {"limit": "max_turns", "value": 5}, "max_turns", 5, None),
    (rg.LimitExceeded, {}, None, None, None),
]


@pytest.mark.parametrize(("cls", "fields", "limit", "value", "older"), LIMITS)
def test_a_limit_error_names_its_limit_and_value(
    cls: type[rg.LimitExceeded],
    fields: dict[str, object],
    limit: str | None,
    value: int | None,
    older: tuple[str, int | None] | None,
) -> None:
    for error in (
        cls("stop", run_id="r", **fields),
        pickle.loads(pickle.dumps(cls("stop", run_id="r", **fields))),
    ):
        assert isinstance(error, rg.LimitExceeded) and isinstance(error, rg.RaygentsError)
        assert (error.limit, error.value, error.run_id) == (limit, value, "r")
        if older is not None:
            assert getattr(error, older[0]) == older[1]


def test_except_limit_exceeded_catches_every_limit() -> None:
    for cls in (rg.MaxTurnsExceeded, rg.MaxToolDepthExceeded):
        with pytest.raises(rg.LimitExceeded):
            raise cls("stop")
    with pytest.raises(rg.MaxTurnsExceeded):  # (how callers caught it before)
        raise rg.MaxTurnsExceeded("stop", max_turns=3)
    assert not issubclass(rg.ModelOutputError, rg.LimitExceeded)
