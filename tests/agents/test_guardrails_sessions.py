"""Guardrails and sessions, running inside the agent actors."""

from __future__ import annotations

from pathlib import Path

import pytest

import raygents as rg
from raygents.guardrails import (
    GuardrailResult,
    SensitiveDataGuardrail,
    input_guardrail,
    output_guardrail,
)
from raygents.sessions import MemorySession, SQLiteSession
from raygents.testing import FunctionModel, ScriptedModel, calls, text

pytestmark = pytest.mark.usefixtures("rt")


@input_guardrail
def no_secrets_please(ctx: rg.RunContext, messages: list[rg.Message]) -> GuardrailResult | None:
    if any("password" in m.text for m in messages):
        return GuardrailResult(True, "asks for a password")
    return None


@input_guardrail(name="exploding")
def exploding(ctx: rg.RunContext, messages: list[rg.Message]) -> bool:
    raise ValueError("guardrail bug")


@output_guardrail
async def no_shouting(ctx: rg.RunContext, message: rg.Message) -> bool:
    return message.text.isupper()


def test_input_guardrail_trips_before_any_model_call() -> None:
    model = ScriptedModel([text("never")])
    agent = rg.Agent("guarded_in", model=model, input_guardrails=[no_secrets_please])
    with pytest.raises(rg.InputGuardrailTripped) as info:
        rg.run(agent, "what is the admin password?")
    assert info.value.guardrail == "no_secrets_please"
    assert info.value.guardrail_message == "asks for a password"
    assert model.calls == []
    assert rg.run(agent.clone(model=ScriptedModel([text("hi")])), "hello").final_output == "hi"


def test_a_failing_guardrail_fails_the_run_naming_it() -> None:
    agent = rg.Agent("guarded_err", model=ScriptedModel([]), input_guardrails=[exploding])
    with pytest.raises(rg.RaygentsError, match=r"exploding.*guardrail bug"):
        rg.run(agent, "x")


def test_output_guardrail_trips_and_nothing_is_saved(tmp_path: Path) -> None:
    session = SQLiteSession(tmp_path / "s.db")
    agent = rg.Agent(
        "guarded_out",
        model=ScriptedModel([text("I AM SHOUTING")]),
        output_guardrails=[no_shouting],
        session=session,
    )
    with pytest.raises(rg.OutputGuardrailTripped):
        rg.run(agent, "hi", session_id="conv1")
    assert session.load("conv1") == []


def test_builtin_sensitive_data_guardrail_in_a_run() -> None:
    agent = rg.Agent(
        "leaky",
        model=ScriptedModel([text("use key sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z")]),
        output_guardrails=[SensitiveDataGuardrail()],
    )
    with pytest.raises(rg.OutputGuardrailTripped) as info:
        rg.run(agent, "key?")
    assert "Ab3dEf6h" not in str(info.value)


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
def test_sessions_prepend_history_and_save_on_success(kind: str, tmp_path: Path) -> None:
    session = SQLiteSession(tmp_path / "chat.db") if kind == "sqlite" else MemorySession()
    model = FunctionModel(lambda req: text(f"seen {len(req.messages)}"))
    agent = rg.Agent(f"chatty_{kind}", model=model, session=session)
    assert rg.run(agent, "one", session_id="conv").final_output == "seen 1"
    second = rg.run(agent, "two", session_id="conv")
    assert second.final_output == "seen 3"
    assert [m.text for m in session.load("conv")] == ["one", "seen 1", "two", "seen 3"]
    assert rg.run(agent, "other", session_id="conv2").final_output == "seen 1"


def test_concurrent_runs_on_one_session_are_refused(tmp_path: Path) -> None:
    session = SQLiteSession(tmp_path / "busy.db")
    agent = rg.Agent(
        "busy", model=FunctionModel(lambda req: text("ok"), latency_s=1.0), session=session
    )
    first = rg.start(agent, "a", session_id="shared")
    next(e for e in first.events() if e.type == "agent_start")
    second = rg.start(agent, "b", session_id="shared")
    with pytest.raises(rg.UserError, match="in use by run"):
        second.result(timeout_s=60)
    assert first.result(timeout_s=60).final_output == "ok"
    assert len(session.load("shared")) == 2


def test_session_id_needs_a_session_and_a_valid_id(tmp_path: Path) -> None:
    with pytest.raises(rg.UserError, match="no session"):
        rg.start(rg.Agent("nosession", model=ScriptedModel([])), "x", session_id="a")
    agent = rg.Agent("badid", model=ScriptedModel([]), session=SQLiteSession(tmp_path / "x.db"))
    with pytest.raises(rg.UserError):
        rg.start(agent, "x", session_id="../etc")


def test_handoff_input_filter_splits_after_session_history(tmp_path: Path) -> None:
    session = SQLiteSession(tmp_path / "h.db")
    session.save("h", [rg.Message("user", "old"), rg.Message("assistant", "older answer")])

    def only_input(data: rg.HandoffInputData) -> list[rg.Message]:
        return list(data.input_history)

    target = rg.Agent(
        "filtered_target", model=FunctionModel(lambda req: text(str(len(req.messages))))
    )
    source = rg.Agent(
        "filtered_source",
        handoffs=[rg.handoff(target, input_filter=only_input)],
        model=ScriptedModel([calls(("transfer_to_filtered_target", {}))]),
        session=session,
    )
    assert rg.run(source, "new", session_id="h").final_output == "3"


def test_a_history_rewritten_by_an_input_filter_replaces_the_session(tmp_path: Path) -> None:
    session = SQLiteSession(tmp_path / "r.db")
    session.save("r", [rg.Message("user", "old"), rg.Message("assistant", "older answer")])

    def drop_oldest(data: rg.HandoffInputData) -> list[rg.Message]:
        return list(data.input_history)[1:]

    target = rg.Agent("rewrite_target", model=FunctionModel(lambda req: text("done")))
    source = rg.Agent(
        "rewrite_source",
        handoffs=[rg.handoff(target, input_filter=drop_oldest)],
        model=ScriptedModel([calls(("transfer_to_rewrite_target", {}))]),
        session=session,
    )
    assert rg.run(source, "new", session_id="r").final_output == "done"
    # the run's conversation, not the stored one with the rewritten one after it
    assert [m.text for m in session.load("r")] == ["older answer", "new", "done"]
