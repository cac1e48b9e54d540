"""A driver for the kept-results tests, on a private Ray instance of its own.

``run``: runs a typed agent that calls a tool (its run writes records) and a quick one that
does not, prints their outputs as a JSON line, then shuts raygents and Ray down. ``head``: a
fresh Ray instance over the same store; prints, as a JSON line, what ``runs()`` and
``attach().result()`` find (before and after this process knows the typed agent) and its
address, then stays up until its stdin closes.

Usage: ``python kept_driver.py run|head STORE_URL``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pydantic
import ray

import raygents as rg
from raygents.testing import FunctionModel, call, calls, text

NAMESPACE = "kept"


class Answer(pydantic.BaseModel):
    city: str
    population: int


@rg.tool(num_cpus=0)
def look_up(city: str) -> str:
    """Look a city up."""
    return f"{city}: 2100000"


def _reply(req: rg.ModelRequest) -> rg.ModelResponse:
    asked = next(m.text for m in req.messages if m.role == "user")
    if asked == "quick":
        return text("quick answer")
    if not any(m.role == "tool" for m in req.messages):
        return calls(call("look_up", {"city": "Paris"}, id="c1"))
    return text('{"city": "Paris", "population": 2100000}')


GEO = rg.Agent("geo", model=FunctionModel(_reply), tools=[look_up], output_type=Answer)
QUICK = rg.Agent("quick", model=FunctionModel(_reply))


def _result(result: rg.RunResult) -> dict[str, Any]:
    output = result.final_output
    return {
        "type": type(output).__name__,
        "output": output.model_dump() if isinstance(output, pydantic.BaseModel) else output,
        "text": result.output_text,
        "roles": [m.role for m in result.messages],
        "usage": result.usage.model_dump(),
        "turns": result.turns,
        "agent": result.last_agent.name,
        "input_count": result.input_count,
    }


def run(store: str) -> None:
    ray.init(address="local", num_cpus=1, include_dashboard=False)
    rg.init(namespace=NAMESPACE, store=store, handle_sigterm=False)
    geo = rg.run(GEO, "where", run_id="kept-geo")
    quick = rg.run(QUICK, "quick", run_id="kept-quick")
    print(json.dumps({"geo": _result(geo), "quick": _result(quick)}), flush=True)
    rg.shutdown()
    ray.shutdown()


def head(store: str) -> None:
    context = ray.init(address="local", num_cpus=1, include_dashboard=False)
    rg.init(namespace=NAMESPACE, store=store, handle_sigterm=False)
    runs = {i.run_id: [i.status, i.agent_name, i.turns] for i in rg.runs()}
    untyped = _result(rg.attach("kept-geo").result(timeout_s=60))
    quick = _result(rg.attach("kept-quick").result(timeout_s=60))
    rg.run(GEO, "where", run_id="kept-warm")  # this process now knows the agent "geo"
    typed = _result(rg.attach("kept-geo").result(timeout_s=60))
    found = {"runs": runs, "untyped": untyped, "typed": typed, "quick": quick}
    print(json.dumps({**found, "address": context.address_info["address"]}), flush=True)
    sys.stdin.read()
    rg.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    {"run": run, "head": head}[sys.argv[1]](sys.argv[2])
