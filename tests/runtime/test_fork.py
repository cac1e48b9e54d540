"""Forks: a follow-up to a completed run, a failed run branched before its failure with a
corrected agent, two forks from one point, and the effects a fork runs (its own keys)."""

from __future__ import annotations

from pathlib import Path

import pytest
from spaces import Namespaces

import raygents as rg
from raygents.core.messages import ModelRequest, ModelResponse
from raygents.testing import FunctionModel, call, calls, text

pytestmark = [pytest.mark.usefixtures("rt"), pytest.mark.timeout(120)]


@pytest.fixture
def store(module_raygents: Namespaces) -> str:
    """raygents on the module's namespace over a file store (its tests share both)."""
    return module_raygents.file_store()


@rg.tool(num_cpus=0)
def charge(ctx: rg.ToolContext, amount: int) -> str:
    """Charge a card (writes one line per charge, with its idempotency key)."""
    with open(ctx.context["ledger"], "a") as ledger:
        ledger.write(f"{ctx.idempotency_key} {amount}\n")
    return f"charged {amount}"


def _user_texts(req: ModelRequest) -> list[str]:
    return [m.content or "" for m in req.messages if m.role == "user"]


def _answer_each_question(req: ModelRequest) -> ModelResponse:
    return text(f"answers to: {' | '.join(_user_texts(req))}")


def test_a_completed_run_is_asked_a_follow_up(store: str) -> None:
    agent = rg.Agent("fork_chat", model=FunctionModel(_answer_each_question))
    first = rg.run(agent, "weather in Paris?")
    before = rg.history(first.run_id)
    follow = rg.fork(first.run_id, agent=agent, input="and in Rome?").result(timeout_s=60)
    assert follow.run_id != first.run_id
    assert follow.final_output == "answers to: weather in Paris? | and in Rome?"
    assert [m.role for m in follow.messages] == ["user", "assistant", "user", "assistant"]
    assert rg.history(first.run_id) == before  # the source is untouched
    assert [c.reason for c in rg.history(follow.run_id)] == ["final"]


def _charge_then_fail(req: ModelRequest) -> ModelResponse:
    if any(m.role == "tool" for m in req.messages):
        raise rg.ModelError("the provider refused", retryable=False)
    return calls(call("charge", {"amount": 5}, id="call_pay"))


def _charge_then_answer(req: ModelRequest) -> ModelResponse:
    if any(m.role == "tool" for m in req.messages):
        return text(f"paid; {' | '.join(_user_texts(req))}")
    return calls(call("charge", {"amount": 5}, id="call_pay"))


def _failed_run(tmp_path: Path) -> tuple[str, dict[str, str], Path]:
    ledger = tmp_path / "ledger"
    context = {"ledger": str(ledger)}
    broken = rg.Agent("fork_pay", tools=[charge], model=FunctionModel(_charge_then_fail))
    handle = rg.start(broken, "pay 5", context=context)
    with pytest.raises(rg.ModelError):
        handle.result(timeout_s=60)
    return handle.run_id, context, ledger


def test_a_failed_run_is_branched_before_its_failure_with_a_corrected_agent(
    store: str, tmp_path: Path
) -> None:
    run_id, _, ledger = _failed_run(tmp_path)
    found = rg.history(run_id)
    assert [c.reason for c in found] == ["intent", "results", "failed"]
    fixed = rg.Agent("fork_pay", tools=[charge], model=FunctionModel(_charge_then_answer))
    result = rg.fork(run_id, agent=fixed, at=found[1].seq).result(timeout_s=60)
    assert result.final_output == "paid; pay 5"
    assert ledger.read_text() == f"{run_id}:call_pay 5\n"  # the charge was not made again
    assert [c.reason for c in rg.history(run_id)] == ["intent", "results", "failed"]


def test_a_fork_from_an_intent_runs_the_calls_with_keys_of_its_own(
    store: str, tmp_path: Path
) -> None:
    run_id, _, ledger = _failed_run(tmp_path)
    fixed = rg.Agent("fork_pay", tools=[charge], model=FunctionModel(_charge_then_answer))
    handle = rg.fork(run_id, agent=fixed, at=1, run_id="fork-of-pay")
    assert handle.result(timeout_s=60).final_output == "paid; pay 5"
    keys = [line.split()[0] for line in ledger.read_text().splitlines()]
    assert keys == [f"{run_id}:call_pay", "fork-of-pay:call_pay"]


def test_two_forks_from_one_point_explore_two_answers(store: str) -> None:
    agent = rg.Agent("fork_two", model=FunctionModel(_answer_each_question))
    source = rg.run(agent, "pick a city")
    left = rg.fork(source.run_id, agent=agent, input="Paris")
    right = rg.fork(source.run_id, agent=agent, input="Rome")
    assert left.result(timeout_s=60).final_output == "answers to: pick a city | Paris"
    assert right.result(timeout_s=60).final_output == "answers to: pick a city | Rome"
    assert left.run_id != right.run_id


@rg.tool(num_cpus=0, needs_approval=True)
def refund(ctx: rg.ToolContext, amount: int) -> str:
    """Refund a card (one line per refund)."""
    with open(ctx.context["ledger"], "a") as ledger:
        ledger.write(f"{ctx.idempotency_key} -{amount}\n")
    return f"refunded {amount}"


def _refund(req: ModelRequest) -> ModelResponse:
    if any(m.role == "tool" for m in req.messages):
        return text("refunded")
    return calls(call("refund", {"amount": 5}, id="call_refund"))


def test_a_fork_of_a_run_awaiting_approval_asks_for_its_own(store: str, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    agent = rg.Agent("fork_refund", tools=[refund], model=FunctionModel(_refund))
    source = rg.start(agent, "refund 5", context={"ledger": str(ledger)})
    with pytest.raises(rg.RunInterrupted):
        source.result(timeout_s=60)
    fork = rg.fork(source.run_id, agent=agent, run_id="fork-of-refund")
    with pytest.raises(rg.RunInterrupted) as asked:
        fork.result(timeout_s=60)
    assert [p.call_id for p in asked.value.pending] == ["call_refund"]
    approved = rg.resume("fork-of-refund", agent=agent, approvals={"call_refund": True})
    assert approved.result(timeout_s=60).final_output == "refunded"
    assert ledger.read_text() == "fork-of-refund:call_refund -5\n"
    assert rg.history(source.run_id)[-1].reason == "interrupt"  # the source still waits


@rg.input_guardrail
def no_passwords(ctx: rg.RunContext, messages: list[rg.Message]) -> bool:
    return any("password" in m.text for m in messages)


def test_a_forks_new_input_passes_the_input_guardrails(store: str) -> None:
    agent = rg.Agent(
        "fork_guarded", model=FunctionModel(_answer_each_question), input_guardrails=[no_passwords]
    )
    source = rg.run(agent, "hello")
    with pytest.raises(rg.InputGuardrailTripped):
        rg.fork(source.run_id, agent=agent, input="the password?").result(timeout_s=60)
    fine = rg.fork(source.run_id, agent=agent, input="and goodbye").result(timeout_s=60)
    assert fine.final_output == "answers to: hello | and goodbye"
