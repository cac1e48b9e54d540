"""A chat loop that starts each turn on the last agent of the one before (the SDK's
customer-service pattern) never restarts a run: another start agent is another graph of the
same agents, and their actors keep serving the graphs before it."""

from __future__ import annotations

import time

import pytest

import raygents as rg
from raygents.testing import FunctionModel, call, calls, text

pytestmark = pytest.mark.usefixtures("rt")


def routed(to: str) -> rg.Model:
    """Hands the conversation to ``to`` when the user asks for it, else answers."""

    def reply(request: rg.ModelRequest) -> rg.ModelResponse:
        last = request.messages[-1]
        if last.role == "user" and to in last.text:
            return calls(call(f"transfer_to_{to}", {}))
        return text(f"{request.agent_name} answers")

    return FunctionModel(reply)


@pytest.mark.timeout(120)
def test_turns_on_the_last_agent_reuse_the_actors_of_the_turns_before() -> None:
    faq = rg.Agent("loop_faq", "Answer questions.", model=routed("loop_triage"))
    triage = rg.Agent("loop_triage", "Route.", handoffs=[faq], model=routed("loop_faq"))
    faq.handoffs = [triage]
    other = rg.Agent("loop_other", "Alone.", model=routed("nobody"))
    lone_faq = rg.Agent("loop_faq_alone", "x", model=routed("nobody"))

    current, items, recovered, took = triage, [], [], []
    for ask in ("to loop_faq please", "a question", "back to loop_triage", "hello"):
        started = time.perf_counter()
        handle = rg.start(current, [*items, {"role": "user", "content": ask}])
        result = handle.result(timeout_s=60)
        took.append(time.perf_counter() - started)
        recovered += [e for e in handle.events() if e.type == "recovered"]
        items, current = result.to_input_list(), result.last_agent
        rg.run(other, "another graph meanwhile")
        rg.run(lone_faq, "and another")
        time.sleep(2.5)  # (a retired actor exits once idle this long)
    assert [e.error for e in recovered] == []
    assert current is triage and result.final_output == "loop_triage answers"
    assert max(took[1:]) < 2.0, took
