"""What lets the ported OpenAI Agents SDK examples run offline: a fake model for each of their
agents (deterministic functions of the conversation, reporting token counts like a real
model's), and the SDK examples' ``auto_mode`` helpers.

``EXAMPLES_INTERACTIVE_MODE=auto`` answers every prompt with its example's fallback, as in the
SDK; otherwise prompts read standard input, and the example ends with it.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable

from ray import cloudpickle

import raygents as rg
from raygents.testing import FunctionModel, call, calls, text

# The fake models run in agent actors, which cannot import this file: it travels by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

Reply = Callable[[rg.ModelRequest], rg.ModelResponse]

RECOMMENDED_PROMPT_PREFIX = (
    "# System context\n"
    "You are one of several agents. An agent can hand the conversation to another one by "
    "calling a handoff function, named `transfer_to_<agent_name>`. Transfers happen in the "
    "background: do not mention them to the user.\n"
)
"""A prompt prefix for agents that hand off (the SDK's ``handoff_prompt`` extension)."""


def is_auto_mode() -> bool:
    """Return True when examples should bypass interactive prompts."""
    return os.environ.get("EXAMPLES_INTERACTIVE_MODE", "").lower() == "auto"


def input_with_fallback(prompt: str, fallback: str) -> str:
    """The fallback text in auto mode, otherwise a line of standard input (the example ends
    with the input)."""
    if is_auto_mode():
        print(f"[auto-input] {prompt.strip()} -> {fallback}")
        return fallback
    try:
        return input(prompt)
    except EOFError:
        print()
        raise SystemExit(0) from None


def model(agent_name: str) -> rg.Model:
    """The fake model of an agent of the ported examples."""
    return FunctionModel(_REPLIES[agent_name])


def _last(request: rg.ModelRequest, role: str) -> rg.Message:
    return next(m for m in reversed(request.messages) if m.role == role)


def _called(request: rg.ModelRequest) -> str | None:
    """The tool whose result is the conversation's last message, if it is one."""
    last = request.messages[-1]
    if last.role != "tool":
        return None
    calls_made = (c for m in request.messages if m.role == "assistant" for c in m.tool_calls)
    return next((c.name for c in calls_made if c.id == last.tool_call_id), None)


# --- lifecycle_example.py, agent_lifecycle_example.py ------------------------------------
def _start_agent(request: rg.ModelRequest) -> rg.ModelResponse:
    if _called(request) == "random_number":
        number = int(request.messages[-1].text)
        if number % 2:
            return calls(
                call("transfer_to_multiply_agent", "{}"), input_tokens=167, output_tokens=14
            )
        return text(json.dumps({"number": number}), input_tokens=167, output_tokens=14)
    limit = int(re.findall(r"\d+", _last(request, "user").text)[-1])
    return calls(call("random_number", f'{{"max":{limit}}}'), input_tokens=143, output_tokens=15)


def _multiply_agent(request: rg.ModelRequest) -> rg.ModelResponse:
    if _called(request) == "multiply_by_two":
        product = int(request.messages[-1].text)
        return text(json.dumps({"number": product}), input_tokens=188, output_tokens=11)
    drawn = next(m.text for m in request.messages if m.role == "tool")
    return calls(call("multiply_by_two", f'{{"x":{drawn}}}'), input_tokens=162, output_tokens=16)


# --- llm_as_a_judge.py -------------------------------------------------------------------
def _outline_writer(request: rg.ModelRequest) -> rg.ModelResponse:
    version = 1 + sum(m.text.startswith("Feedback:") for m in request.messages)
    return text(f"Outline, draft {version}: a detective on a space station finds the culprit.")


def _evaluator(request: rg.ModelRequest) -> rg.ModelResponse:
    drafts = sum(m.role == "assistant" for m in request.messages)
    if drafts < 3:
        verdict = {"feedback": f"Draft {drafts} needs a twist.", "score": "needs_improvement"}
    else:
        verdict = {"feedback": "Good enough.", "score": "pass"}
    return text(json.dumps(verdict))


# --- forcing_tool_use.py -----------------------------------------------------------------
def _weather_agent(request: rg.ModelRequest) -> rg.ModelResponse:
    if _called(request) == "get_weather":
        weather = json.loads(request.messages[-1].text)
        return text(f"The weather in {weather['city']} is {weather['conditions'].lower()}.")
    return calls(call("get_weather", {"city": "Tokyo"}))


# --- customer_service.py -----------------------------------------------------------------
def _triage_agent(request: rg.ModelRequest) -> rg.ModelResponse:
    if "seat" in _last(request, "user").text.lower() and "change" in _last(request, "user").text:
        return calls(call("transfer_to_seat_booking_agent"))
    return calls(call("transfer_to_faq_agent"))


def _faq_agent(request: rg.ModelRequest) -> rg.ModelResponse:
    if _called(request) == "faq_lookup_tool":
        return text(request.messages[-1].text)
    question = _last(request, "user").text
    if "change" in question:
        return calls(call("transfer_to_triage_agent"))
    return calls(call("faq_lookup_tool", {"question": question}))


def _seat_booking_agent(request: rg.ModelRequest) -> rg.ModelResponse:
    return text("Sure. What is your confirmation number?")


_REPLIES: dict[str, Reply] = {
    "Start Agent": _start_agent,
    "Multiply Agent": _multiply_agent,
    "story_outline_generator": _outline_writer,
    "evaluator": _evaluator,
    "Weather agent": _weather_agent,
    "Triage Agent": _triage_agent,
    "FAQ Agent": _faq_agent,
    "Seat Booking Agent": _seat_booking_agent,
}
