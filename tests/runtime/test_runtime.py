"""The Ray runtime: agent actors, tool tasks, handoffs, agent-as-tool fan-out, events."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import time

import pytest
import ray
from actors import cached_actor
from pydantic import BaseModel, field_validator

import raygents as rg
from raygents.runtime.link.handles import actor_key
from raygents.runtime.link.settings import Settings
from raygents.testing import FunctionModel, ScriptedModel, call, calls, text

pytestmark = pytest.mark.usefixtures("rt")


@rg.tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first.
        b: the second.
    """
    return a + b


@rg.tool(num_cpus=0)
def where(ctx: rg.ToolContext) -> dict:
    """Report where and how the call ran."""
    rc = ray.get_runtime_context()
    return {
        "pid": os.getpid(),
        "task_name": rc.get_task_name(),
        "key": ctx.idempotency_key,
        "run_id": ctx.run_id,
        "agent": ctx.agent_name,
        "context": ctx.context,
    }


@rg.tool(num_cpus=0)
def nap(seconds: float) -> str:
    """Sleep, then report the time span slept."""
    start = time.time()
    time.sleep(seconds)
    return json.dumps([start, time.time()])


@rg.tool(num_cpus=0)
def boom(message: str) -> str:
    """Raise."""
    raise ValueError(message)


@rg.tool(num_cpus=0, timeout_s=0.5)
def hang() -> str:
    """Take too long."""
    time.sleep(30)
    return "never"


@rg.tool(num_cpus=0, max_retries=0)
def crash() -> str:
    """Kill the worker process."""
    os._exit(1)


@rg.tool(remote=False)
def local_pid() -> int:
    """Run inside the agent actor."""
    return os.getpid()


def tool_messages(result: rg.RunResult) -> list[str]:
    return [m.text for m in result.messages if m.role == "tool"]


def test_tool_calls_run_as_named_ray_tasks_in_worker_processes() -> None:
    model = ScriptedModel([calls(("where", {}), ("add", {"a": 2, "b": 3})), text("done")])
    agent = rg.Agent("runner", "Be brief.", tools=[where, add], model=model)
    result = rg.run(agent, "go", context={"tenant": "t1"})
    info = json.loads(tool_messages(result)[0])
    assert info["pid"] != os.getpid()
    assert info["task_name"] == "tool:where"
    assert info["key"] == f"{result.run_id}:{result.messages[1].tool_calls[0].id}"
    assert info["agent"] == "runner" and info["context"] == {"tenant": "t1"}
    assert tool_messages(result)[1] == "5"
    assert result.final_output == "done" and result.turns == 2
    assert result.last_agent is agent
    model.assert_complete()
    assert ray.get(cached_actor("runner").ping.remote()) != os.getpid(), "an actor of its own"


def test_a_context_only_cloudpickle_can_carry_reaches_tool_tasks() -> None:
    """A tool call goes to its task pickled by raygents; a context the standard pickler
    refuses (an instance of a class defined in a function) goes through cloudpickle."""

    class Tenant:
        def __init__(self, name: str) -> None:
            self.name = name

    @rg.tool(num_cpus=0)
    def tenant_of(ctx: rg.ToolContext) -> str:
        """Name the run's tenant."""
        return f"{type(ctx.context).__name__} {ctx.context.name} in {os.getpid()}"

    model = ScriptedModel([calls(("tenant_of", {})), text("done")])
    agent = rg.Agent("tenants", tools=[tenant_of], model=model)
    result = rg.run(agent, "go", context=rg.NotDurable(Tenant("t2")))  # (not plain data)
    kind, name, _, pid = tool_messages(result)[0].split()
    assert (kind, name) == ("Tenant", "t2") and int(pid) != os.getpid()


def test_parallel_tool_calls_overlap_and_keep_call_order() -> None:
    batch = calls(*[call("nap", {"seconds": 1.0}, id=f"c{i}") for i in range(4)])
    model = ScriptedModel([batch, text("rested")])
    handle = rg.start(rg.Agent("sleeper", tools=[nap], model=model), "nap")
    result = handle.result(timeout_s=120)
    # All four tasks are submitted before any finishes; Ray runs them as its workers allow
    # (how many at once depends on the machine, so that is measured in benchmarks/).
    kinds = [e.type for e in handle.events() if e.type in ("tool_start", "tool_end")]
    assert kinds == ["tool_start"] * 4 + ["tool_end"] * 4
    assert [m.tool_call_id for m in result.messages if m.role == "tool"] == [
        "c0",
        "c1",
        "c2",
        "c3",
    ]


def test_tool_errors_become_messages_and_the_run_continues() -> None:
    model = ScriptedModel(
        [calls(("boom", {"message": "kaput"}), ("hang", {}), ("crash", {})), text("recovered")]
    )
    agent = rg.Agent("fragile", tools=[boom, hang, crash], model=model)
    result = rg.run(agent, "try")
    failed, slow, crashed = tool_messages(result)
    assert failed == 'Error: cannot execute tool "boom": ValueError: kaput'
    assert slow.startswith('Error: cannot execute tool "hang": timed out after 0.5 s')
    assert crashed.startswith('Error: cannot execute tool "crash":') and "crash" in crashed
    assert result.final_output == "recovered"


class Place(BaseModel):
    x: int
    y: int = 0

    @field_validator("x")
    @classmethod
    def _not_negative(cls, x: int) -> int:  # not in the JSON schema: pydantic checks it
        if x < 0:
            raise ValueError("x must not be negative")
        return x


@rg.tool(num_cpus=0)
async def moved(place: Place, by: int = 1) -> Place:
    """Move a place (async, pydantic in and out)."""
    return Place(x=place.x + by, y=place.y)


class Echo(rg.Tool):
    """A custom tool: its ``execute`` runs in the task with the model's JSON arguments."""

    name = "echo"
    parameters = {"type": "object", "properties": {"text": {"type": "string"}}}  # noqa: RUF012
    num_cpus = 0

    async def execute(self, ctx: rg.ToolContext, arguments: str) -> rg.ToolResult:
        text = json.loads(arguments)["text"]
        return rg.ToolResult(f"{text} from {os.getpid()}", is_error=text == "bad")


class Sloppy(rg.Tool):
    name = "sloppy"
    num_cpus = 0

    async def execute(self, ctx: rg.ToolContext, arguments: str) -> rg.ToolResult:
        return 42  # type: ignore[return-value]


def test_every_kind_of_tool_runs_as_a_task_and_invalid_arguments_never_leave() -> None:
    batch = calls(
        ("moved", {"place": {"x": 1, "y": 0}, "by": 2}),
        ("echo", {"text": "hi"}),
        ("echo", {"text": "bad"}),
        ("sloppy", {}),
        ("moved", {"place": {"x": -1, "y": 0}, "by": 1}),
    )
    model = ScriptedModel([batch, text("done")])
    handle = rg.start(rg.Agent("kinds", tools=[moved, Echo(), Sloppy()], model=model), "go")
    result = handle.result(timeout_s=120)
    place, echo, bad, sloppy, invalid = tool_messages(result)
    assert json.loads(place) == {"x": 3, "y": 0}
    assert echo.startswith("hi from ") and int(echo.split()[-1]) != os.getpid()
    assert bad.startswith("bad from ")
    assert sloppy == 'Error: cannot execute tool "sloppy": execute() returned int, not ToolResult'
    assert invalid.startswith('Invalid parameters for tool "moved"')
    assert "x must not be negative" in invalid
    by_call = {e.call_id: e for e in handle.events() if e.type == "tool_end"}
    ends = [by_call[m.tool_call_id] for m in result.messages if m.role == "tool"]
    assert [e.is_error for e in ends] == [False, False, True, True, True]
    ran = ["worker_pid" in (e.data or {}) for e in ends]
    assert ran == [True, True, True, True, False]  # the invalid call got no task


def test_local_tools_run_inside_the_agent_actor() -> None:
    model = ScriptedModel([calls(("local_pid", {})), text("ok")])
    agent = rg.Agent("local", tools=[local_pid], model=model)
    result = rg.run(agent, "pid?")
    assert int(tool_messages(result)[0]) == ray.get(cached_actor("local").ping.remote())


def test_unknown_tool_fails_with_tool_not_found() -> None:
    model = ScriptedModel([calls(("nope", {}))])
    with pytest.raises(rg.ToolNotFound) as info:
        rg.run(rg.Agent("lost", tools=[add], model=model), "x")
    assert info.value.tool_name == "nope" and info.value.run_id


def test_provider_errors_surface_as_model_errors() -> None:
    model = ScriptedModel([RuntimeError("provider exploded")])
    with pytest.raises(rg.ModelError, match="provider exploded"):
        rg.run(rg.Agent("flaky", model=model), "x")


def test_handoff_moves_the_run_to_the_target_actor() -> None:
    billing = rg.Agent("billing", "Handle billing.", model=ScriptedModel([text("refund issued")]))
    triage_model = ScriptedModel([calls(("transfer_to_billing", {})), text("unused")])
    triage = rg.Agent("triage", "Route.", handoffs=[billing], model=triage_model)
    handle = rg.start(triage, "refund please")
    result = handle.result(timeout_s=60)
    assert result.last_agent is billing and result.final_output == "refund issued"
    assert result.turns == 2
    assert "## Handoffs" in triage_model.calls[0].system
    assert "- billing: Transfer the conversation to billing." in triage_model.calls[0].system
    events = [e.type for e in handle.events()]
    assert events.count("agent_start") == 2 and "handoff" in events and events[-1] == "complete"


def test_handoff_ping_pong_is_bounded_by_max_turns() -> None:
    bounce = FunctionModel(lambda req: calls(call(req.tools[0].name, {})))
    a = rg.Agent("ping", model=bounce, max_turns=5)
    b = rg.Agent("pong", model=bounce, max_turns=5)
    a.handoffs = [b]
    b.handoffs = [a]
    with pytest.raises(rg.MaxTurnsExceeded) as info:
        rg.run(a, "go")
    assert info.value.max_turns == 5


def test_handoff_input_filter_and_callback() -> None:
    seen: list[str] = []

    def keep_last(data: rg.HandoffInputData) -> list[rg.Message]:
        return [*data.input_history, rg.Message("user", f"{len(data.new_items)} new items")]

    target = rg.Agent("target", model=FunctionModel(lambda req: text(req.messages[-1].text)))
    source = rg.Agent(
        "source",
        handoffs=[rg.handoff(target, input_filter=keep_last, on_handoff=lambda ctx: None)],
        model=ScriptedModel([calls(("transfer_to_target", {}))]),
    )
    result = rg.run(source, "hello")
    assert result.final_output == "2 new items"
    assert [m.text for m in result.messages][:2] == ["hello", "2 new items"]
    assert not seen


class Report(BaseModel):
    title: str
    score: int


def test_run_typed_validates_and_parses() -> None:
    model = ScriptedModel([text('{"title": "ok", "score": 7}')])
    result = rg.run_typed(rg.Agent("typed", model=model), "rate", Report)
    assert result.output == Report(title="ok", score=7)
    assert model.calls[0].response_format["name"] == "report"


def test_run_typed_reports_failing_paths() -> None:
    model = ScriptedModel([text('{"title": "ok", "score": "high"}')])
    with pytest.raises(rg.OutputValidationError) as info:
        rg.run_typed(rg.Agent("typed_bad", model=model), "rate", Report)
    assert info.value.errors[0][0] == "/score"


def test_run_typed_wraps_non_object_types() -> None:
    model = ScriptedModel([text('{"value": [1, 2, 3]}')])
    result = rg.run_typed(rg.Agent("typed_list", model=model), "count", list[int])
    assert result.output == [1, 2, 3]


def test_agent_as_tool_fans_out_in_parallel_and_adds_usage() -> None:
    analyst = rg.Agent(
        "analyst",
        model=FunctionModel(lambda req: text(f"analysed {req.messages[0].text}"), latency_s=0.5),
    )
    fan = calls(*[call("analyst", {"input": f"part {i}"}, id=f"c{i}") for i in range(8)])
    lead = rg.Agent("lead", tools=[analyst.as_tool()], model=ScriptedModel([fan, text("merged")]))
    handle = rg.start(lead, "analyse")
    result = handle.result(timeout_s=60)
    assert tool_messages(result) == [f"analysed part {i}" for i in range(8)]
    assert result.usage.input_tokens == 20 + 8 * 10
    children = [e for e in handle.events() if e.path]
    starts = [i for i, e in enumerate(children) if e.type == "agent_start"]
    ends = [i for i, e in enumerate(children) if e.type == "agent_end"]
    assert len(starts) == 8 and len(ends) == 8
    assert max(starts) < min(ends), "children must all start before any finishes"
    assert {e.path[0] for e in children} == {f"analyst/c{i}" for i in range(8)}


def test_agent_tool_depth_limit_becomes_an_error_message() -> None:
    inner_model = ScriptedModel([])
    inner = rg.Agent("inner", model=inner_model, max_tool_depth=1)
    middle = rg.Agent(
        "middle",
        tools=[inner.as_tool()],
        model=ScriptedModel([calls(("inner", {"input": "deep"})), text("middle done")]),
    )
    outer = rg.Agent(
        "outer",
        tools=[middle.as_tool()],
        model=ScriptedModel([calls(("middle", {"input": "go"})), text("outer done")]),
    )
    result = rg.run(outer, "start")
    assert result.final_output == "outer done"
    assert inner_model.calls == []


def test_streamed_runs_deliver_deltas_and_child_events() -> None:
    child = rg.Agent("helper", model=ScriptedModel([text("child says hi")]))
    parent = rg.Agent(
        "streamer",
        tools=[child.as_tool()],
        model=ScriptedModel([calls(("helper", {"input": "hi"})), text("hello brave new world")]),
    )
    handle = rg.run_streamed(parent, "stream it")

    async def collect() -> list[rg.RunEvent]:
        return [e async for e in handle.events()]

    events = asyncio.run(collect())
    deltas = "".join(e.delta or "" for e in events if e.type == "llm_delta" and not e.path)
    assert deltas == "hello brave new world"
    child_deltas = "".join(e.delta or "" for e in events if e.type == "llm_delta" and e.path)
    assert child_deltas == "child says hi"
    assert events[-1].type == "complete"
    assert [e.type for e in handle.events()] == [e.type for e in events]


def test_events_of_a_run_that_does_not_stream_arrive_while_it_runs() -> None:
    """Its batches may wait a moment for company, but not for the run's end: the child's
    tool_start (two hops: child's actor, parent's actor, driver) arrives during the nap."""
    child = rg.Agent(
        "napper", tools=[nap], model=ScriptedModel([calls(("nap", {"seconds": 4})), text("ok")])
    )
    parent = rg.Agent(
        "waits_for_napper",
        tools=[child.as_tool()],
        model=ScriptedModel([calls(("napper", {"input": "nap"})), text("done")]),
    )
    handle = rg.start(parent, "go")
    for event in handle.events():
        if event.type == "tool_start" and event.path:
            break
    assert handle.status() == "running"  # the nap is still going on
    assert handle.result(60).final_output == "done"


def _cannot_load() -> None:
    raise RuntimeError("this context cannot be loaded here")


class _LoadsNowhere:
    def __reduce__(self) -> tuple[object, tuple[()]]:
        return (_cannot_load, ())


def test_a_context_that_cannot_be_loaded_fails_only_its_own_run() -> None:
    """Runs started together share one start call; one that cannot travel fails alone."""
    agent = rg.Agent("loads_context", model=ScriptedModel([text("fine")] * 10))
    rg.run(agent, "warm up")
    handles = [
        rg.start(agent, "a"),
        rg.start(agent, "bad", context=rg.NotDurable(_LoadsNowhere())),
        rg.start(agent, "b"),
    ]
    assert handles[0].result(60).final_output == "fine"
    with pytest.raises(rg.RaygentsError, match="cannot be loaded"):
        handles[1].result(60)
    assert handles[2].result(60).final_output == "fine"


def test_events_from_the_start_after_completion_and_await() -> None:
    agent = rg.Agent(
        "late", model=ScriptedModel([calls(("add", {"a": 1, "b": 1})), text("2")]), tools=[add]
    )
    handle = rg.start(agent, "1+1")

    async def wait() -> rg.RunResult:
        return await handle

    result = asyncio.run(wait())
    assert result.final_output == "2" and handle.status() == "completed"
    types = [e.type for e in handle.events()]
    assert types == [
        "agent_start",
        "checkpoint",
        "tool_start",
        "tool_end",
        "checkpoint",
        "agent_end",
        "complete",
    ]


def test_dynamic_instructions_see_the_run_context() -> None:
    model = FunctionModel(lambda req: text(req.system))
    agent = rg.Agent(
        "dyn", lambda ctx, agent: f"user={ctx.context['user']} agent={agent.name}", model=model
    )
    assert rg.run(agent, "who", context={"user": "ada"}).final_output == "user=ada agent=dyn"


def test_a_changed_definition_never_gets_the_old_behaviour() -> None:
    first = rg.Agent("versioned", "v1", model=FunctionModel(lambda req: text(req.system)))
    assert rg.run(first, "x").final_output == "v1"
    second = rg.Agent("versioned", "v2", model=FunctionModel(lambda req: text(req.system)))
    assert rg.run(second, "x").final_output == "v2"


def test_a_retired_actor_delivers_its_runs_before_it_exits() -> None:
    """A new definition retires the old agent's actor; the run it still has completes and
    reaches its driver, then the actor exits."""

    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True

    def pid_of(version: str) -> FunctionModel:
        return FunctionModel(lambda req: text(f"{version} {os.getpid()}"), latency_s=1.0)

    old = rg.start(rg.Agent("retiring", "v1", model=pid_of("v1")), "x")
    time.sleep(0.3)  # the old run is at its model call
    assert rg.run(rg.Agent("retiring", "v2", model=pid_of("v2")), "x").final_output[:2] == "v2"
    version, pid = old.result(timeout_s=60).final_output.split()
    assert version == "v1"
    deadline = time.monotonic() + 30
    while alive(int(pid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(int(pid))


@rg.tool(remote=False)
def collector() -> dict:
    """Report the garbage collector's settings in the process the call ran in."""
    return {"pid": os.getpid(), "first": gc.get_threshold()[0], "frozen": gc.get_freeze_count()}


def test_agent_actors_tune_their_garbage_collector() -> None:
    from raygents.runtime.link.process import GC_FIRST_THRESHOLD

    def model(req: rg.ModelRequest) -> rg.ModelResponse:
        last = req.messages[-1]
        return text(last.text) if last.role == "tool" else calls(("collector", {}))

    agent = rg.Agent("collecting", model=FunctionModel(model), tools=[collector])
    got = json.loads(rg.run(agent, "x").final_output)
    assert got["pid"] != os.getpid()
    assert got["first"] == GC_FIRST_THRESHOLD and got["frozen"] > 1000
    assert gc.get_threshold()[0] < GC_FIRST_THRESHOLD  # the driver's is left alone


def test_replicas_share_the_runs_of_one_agent() -> None:
    model = FunctionModel(lambda req: text(str(os.getpid())), latency_s=0.05)
    agent = rg.Agent("replicated", model=model, replicas=2)
    handles = [rg.start(agent, str(i)) for i in range(6)]
    pids = {h.result(timeout_s=60).final_output for h in handles}
    assert len(pids) == 2


def test_max_turns_option_caps_every_agent() -> None:
    model = FunctionModel(lambda req: calls(call("add", {"a": 1, "b": 1})))
    with pytest.raises(rg.MaxTurnsExceeded) as info:
        rg.run(rg.Agent("capped", tools=[add], model=model), "loop", max_turns=2)
    assert info.value.max_turns == 2


def test_openai_style_dict_input() -> None:
    model = FunctionModel(lambda req: text(f"{len(req.messages)}:{req.messages[-1].text}"))
    history = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"},
    ]
    assert rg.run(rg.Agent("dicts", model=model), history).final_output == "3:c"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"max_turns": 0}, "max_turns"), ({"timeout_s": -1}, "timeout_s")],
)
def test_bad_run_arguments_fail_fast(kwargs: dict, match: str) -> None:
    with pytest.raises(rg.UserError, match=match):
        rg.start(rg.Agent("bad", model=ScriptedModel([])), "x", **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"heartbeat_s": 0}, "heartbeat_s must be a positive number"),
        ({"heartbeat_s": float("nan")}, "heartbeat_s must be a positive"),
        ({"stale_after_s": -1.0}, "stale_after_s must be a positive"),
        ({"stale_after_s": "30"}, "stale_after_s must be a positive"),
        ({"heartbeat_s": 5.0, "stale_after_s": 2.0}, "must be at least heartbeat_s"),
        ({"max_attempts": 0}, "max_attempts must be an int of at least 1"),
        ({"max_attempts": 2.5}, "max_attempts"),
        ({"sigterm_grace_s": -1}, "sigterm_grace_s must be a number of seconds, at least 0"),
    ],
)
def test_bad_recovery_settings_fail_fast(kwargs: dict, match: str) -> None:
    with pytest.raises(rg.UserError, match=match):
        rg.init(**kwargs)


def test_empty_input_is_rejected() -> None:
    with pytest.raises(rg.UserError, match="empty"):
        rg.start(rg.Agent("empty", model=ScriptedModel([])), [])


def test_suspend_stops_at_the_next_turn() -> None:
    model = ScriptedModel([calls(("nap", {"seconds": 1.0})), text("never")])
    handle = rg.start(rg.Agent("suspender", tools=[nap], model=model), "nap")
    next(e for e in handle.events() if e.type == "tool_start")
    handle.suspend()
    with pytest.raises(rg.SuspendedError) as info:
        handle.result(timeout_s=60)
    assert info.value.cause == rg.SUSPEND_FOR_CHECKPOINT and info.value.run_id == handle.run_id
    assert handle.status() == "suspended"
    assert len(model.calls) == 1
    assert [e.type for e in handle.events()][-1] == "suspended"


def test_shutdown_then_init_in_the_same_namespace_gets_a_working_coordinator() -> None:
    """``shutdown()`` removes the coordinator it created and waits until its name is free, so
    the next ``init()`` never finds the dying one (nor do the new agent actors)."""
    try:
        for i in range(4):
            rg.shutdown()
            rg.init(store="memory://")
            answer = rg.run(rg.Agent(f"again{i}", model=ScriptedModel([text(f"hi {i}")])), "go")
            assert answer.final_output == f"hi {i}"
            assert rg.run(rg.Agent(f"again{i}", model=ScriptedModel([text("x")])), "go").turns == 1
    finally:
        rg.shutdown()
        rg.init(store="memory://")


def test_a_runtime_that_found_the_coordinator_leaves_it_running() -> None:
    """Only the runtime that created a (non-detached) coordinator removes it."""
    from raygents.runtime.driver import client

    rt = client.current()
    assert rt.created
    borrowed = client.Runtime(rt.namespace, False, Settings(store="memory://"))
    assert not borrowed.created
    borrowed.close()
    assert ray.get(rt.coordinator.settings.remote()).creator == rt.owner
    assert rg.run(rg.Agent("still_here", model=ScriptedModel([text("yes")])), "go").turns == 1


def test_the_run_table_shows_this_drivers_runs_as_soon_as_their_results_are_in() -> None:
    """Claims and ends of runs travel to the coordinator in small batches; reading the run
    table sends this driver's pending ones first."""
    from raygents.runtime.driver import client

    agent = rg.Agent("tabled", model=FunctionModel(lambda req: text("ok"), latency_s=0.05))
    handles = [rg.start(agent, f"run {i}") for i in range(8)]
    results = [h.result(timeout_s=60) for h in handles]
    table = {r.run_id: r for r in rg.runs()}
    owner = client.current().owner
    for result in results:
        info = table[result.run_id]
        assert (info.status, info.attempts, info.owner) == ("completed", 1, owner)
    assert rg.attach(results[0].run_id).result(timeout_s=10).final_output == "ok"


def test_a_driver_keeps_ended_runs_only_while_their_handles_are_in_use() -> None:
    """A long-lived driver must not hold every result and event log it ever saw: an ended run's
    handle goes once nobody references it; attach() then asks the coordinator."""
    import gc

    from raygents.runtime.driver import client

    agent = rg.Agent("forgotten", model=FunctionModel(lambda req: text("ok"), latency_s=0.02))
    kept = rg.start(agent, "keep me")
    dropped_ids = [rg.start(agent, f"drop {i}").run_id for i in range(20)]
    assert kept.result(timeout_s=60).final_output == "ok"
    for run_id in dropped_ids:
        assert rg.attach(run_id).result(timeout_s=60).final_output == "ok"
    gc.collect()
    handles = client.current().handles
    assert kept.run_id in handles and rg.attach(kept.run_id) is kept
    assert not set(dropped_ids) & set(handles.keys())
    again = rg.attach(dropped_ids[0])  # from the coordinator's table: replayed, then the end
    assert again.result(timeout_s=10).final_output == "ok"
    assert [e.type for e in again.events()] == ["agent_start", "complete"]
    assert [e.type for e in kept.events()][-1] == "complete" and len(kept.events().snapshot()) > 1


def test_a_coordinator_gone_for_good_is_replaced_by_the_next_call() -> None:
    """A coordinator killed for good (as its creator's exit does to it) gives its name up; the
    driver's next call, whatever it is, creates a new one, which rebuilds the run table from
    the store."""
    from raygents.runtime.driver import client

    namespace = f"gone-{os.urandom(3).hex()}"
    rg.shutdown()
    rg.init(namespace=namespace, store="memory://")
    try:
        rt = client.current()
        before = rg.run(rg.Agent("before", model=ScriptedModel([text("one")])), "go")
        old = rt.coordinator
        node = ray.get(old.settings.remote()).node
        ray.kill(old, no_restart=True)
        client._wait_until_free(namespace, old, timeout_s=10.0)
        # the new coordinator's run table comes from the store
        assert {r.run_id: r.status for r in rg.runs()} == {before.run_id: "completed"}
        assert actor_key(rt.coordinator) != actor_key(old) and rt.created
        assert ray.get(rt.coordinator.settings.remote()).node == node  # where its store is
        after = rg.run(rg.Agent("after", model=ScriptedModel([text("two")])), "go")
        assert after.final_output == "two"
        table = {r.run_id: r.status for r in rg.runs()}
        assert table == {before.run_id: "completed", after.run_id: "completed"}
    finally:
        rg.shutdown()
        rg.init(store="memory://")
