"""An agent framework end to end against brisk: OpenAI's Agents SDK (openai-agents,
pinned in tests/requirements.txt) with its Chat Completions model pointed at `brisk serve`
on SmolLM2, one function tool, run to its end. SmolLM2-135M does not call a tool on its
own at temperature 0, so the first turn forces one (tool_choice "required", which the
SDK resets to "auto" after the call, as it does by default to avoid loops); the call's
arguments are valid for the tool's schema (the grammar holds them to it), the tool runs,
its result goes back to the model, and the run finishes with a final text answer within
its turn limit. Tracing is off: nothing leaves the machine."""
import asyncio

import pytest

SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1"

agents = pytest.importorskip("agents")


@pytest.mark.slow
def test_agent_runs_a_tool_to_the_end(smollm2_server):
    from openai import AsyncOpenAI

    agents.set_tracing_disabled(True)
    calls = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        calls.append(city)
        return f"It is sunny and 21 degrees in {city}."

    client = AsyncOpenAI(base_url=smollm2_server.base_url, api_key="unused", max_retries=0,
                         timeout=120 * smollm2_server.slow)
    model = agents.OpenAIChatCompletionsModel(model=SMOLLM2, openai_client=client)
    agent = agents.Agent(
        name="weather", model=model, tools=[get_weather],
        instructions="You answer questions about the weather with the get_weather tool.",
        model_settings=agents.ModelSettings(temperature=0, max_tokens=120,
                                            tool_choice="required"))
    result = asyncio.run(agents.Runner.run(agent, "What is the weather in Paris?",
                                           max_turns=4))
    assert calls and all(isinstance(c, str) and c.strip() for c in calls), calls
    assert any("paris" in c.lower() for c in calls), calls
    tool_items = [i for i in result.new_items if i.type == "tool_call_output_item"]
    assert len(tool_items) == len(calls) and "sunny" in str(tool_items[0].output)
    assert isinstance(result.final_output, str) and result.final_output.strip(), result
    assert result.new_items[-1].type == "message_output_item"
