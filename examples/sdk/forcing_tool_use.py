from __future__ import annotations

import asyncio
from typing import Any, Literal

from offline import is_auto_mode, model
from pydantic import BaseModel

from raygents import Agent, ModelSettings, ToolCall, ToolResult, start, tool
from raygents import RunContext as RunContextWrapper

FunctionToolResult = tuple[ToolCall, ToolResult]
ToolsToFinalOutputResult = ToolsToFinalOutputFunction = Any

"""
This example shows how to force the agent to use a tool. It uses `ModelSettings(tool_choice="required")`
to force the agent to use any tool.

You can run it with 3 options:
1. `default`: The default behavior, which is to send the tool output to the LLM. In this case,
    `tool_choice` is not set, because otherwise it would result in an infinite loop - the LLM would
    call the tool, the tool would run and send the results to the LLM, and that would repeat
    (because the model is forced to use a tool every time.)
2. `first_tool_result`: The first tool result is used as the final output.
3. `custom`: A custom tool use behavior function is used. The custom function receives all the tool
    results, and chooses to use the first tool result to generate the final output.

Usage:
python examples/agent_patterns/forcing_tool_use.py -t default
python examples/agent_patterns/forcing_tool_use.py -t first_tool
python examples/agent_patterns/forcing_tool_use.py -t custom
"""


class Weather(BaseModel):
    city: str
    temperature_range: str
    conditions: str


@tool
def get_weather(city: str) -> Weather:
    print("[debug] get_weather called")
    return Weather(city=city, temperature_range="14-20C", conditions="Sunny with wind")


async def custom_tool_use_behavior(
    context: RunContextWrapper[Any], results: list[FunctionToolResult]
) -> ToolsToFinalOutputResult:
    weather: Weather = Weather.model_validate_json(results[0][1].content)
    return f"{weather.city} is {weather.conditions}."


async def main(tool_use_behavior: Literal["default", "first_tool", "custom"] = "default"):
    if tool_use_behavior == "default":
        behavior: Literal["run_llm_again", "stop_on_first_tool"] | ToolsToFinalOutputFunction = (
            "run_llm_again"
        )
    elif tool_use_behavior == "first_tool":
        behavior = "stop_on_first_tool"
    elif tool_use_behavior == "custom":
        behavior = custom_tool_use_behavior

    agent = Agent(
        name="Weather agent",
        instructions="You are a helpful agent.",
        tools=[get_weather],
        tool_use_behavior=behavior,
        model_settings=ModelSettings(
            tool_choice="required" if tool_use_behavior != "default" else None
        ),
        model=model("Weather agent"),
    )

    result = await start(agent, input="What's the weather in Tokyo?")
    print(result.final_output)


async def auto_demo() -> None:
    for behavior in ("default", "first_tool", "custom"):
        print(f"=== {behavior} ===")
        await main(behavior)
        print()


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument(
        "-t",
        "--tool-use-behavior",
        type=str,
        default="default",
        choices=["default", "first_tool", "custom"],
        help=(
            "The behavior to use for tool use. "
            "default sends tool outputs back to the model, first_tool uses the first tool result as the final output, "
            "custom runs a custom tool use behavior function."
        ),
    )
    args = parser.parse_args()
    if is_auto_mode():
        asyncio.run(auto_demo())
    else:
        asyncio.run(main(args.tool_use_behavior))
