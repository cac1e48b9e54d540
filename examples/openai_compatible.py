"""Run an agent with tools on any OpenAI-compatible server (OpenAI, vLLM, Ollama, LiteLLM).

    OPENAI_API_KEY=sk-... python examples/openai_compatible.py
    OPENAI_BASE_URL=http://127.0.0.1:8000/v1 RAYGENTS_MODEL=my-model \
        python examples/openai_compatible.py

Without either variable it says so and exits.
"""

from __future__ import annotations

import os
import sys

import raygents as rg


@rg.tool(num_cpus=1)
def count_primes(limit: int) -> int:
    """Count the primes below a limit (CPU-heavy, runs as a Ray task).

    Args:
        limit: the exclusive upper bound.
    """
    sieve = bytearray([1]) * max(limit, 2)
    sieve[0:2] = b"\x00\x00"
    for i in range(2, int(limit**0.5) + 1):
        if sieve[i]:
            sieve[i * i :: i] = bytearray(len(sieve[i * i :: i]))
    return sum(sieve[:limit])


def main() -> int:
    if not (os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL")):
        print("set OPENAI_API_KEY or OPENAI_BASE_URL to run this example")
        return 0
    model = rg.OpenAIChatModel(os.environ.get("RAYGENTS_MODEL", "gpt-4o-mini"))
    agent = rg.Agent(
        "mathematician", "Use your tools; answer briefly.", tools=[count_primes], model=model
    )
    handle = rg.run_streamed(
        agent, "How many primes are there below 2,000,000 and below 3,000,000?"
    )
    for event in handle.events():
        if event.type == "llm_delta":
            print(event.delta, end="", flush=True)
        elif event.type == "tool_end":
            print(f"\n[{event.tool_name} -> {event.result}]")
    print()
    rg.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
