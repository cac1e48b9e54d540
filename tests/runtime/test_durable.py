"""Durable runs: checkpoints, graceful suspend, resume, approvals, corrupt checkpoints."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
import ray
from spaces import Namespaces

import raygents as rg
from raygents.runtime.actor.children import child_run_id
from raygents.testing import FunctionModel, ScriptedModel, call, calls, text

pytestmark = pytest.mark.usefixtures("rt")


@pytest.fixture(scope="module")
def store_urls(
    tmp_path_factory: pytest.TempPathFactory, session_s3: object, s3_key_audit: Any
) -> dict[str, str]:
    """The module's store of each kind (an S3 bucket's keys are audited at the end of the
    session)."""
    from s3_server import create_bucket

    bucket = s3_key_audit.watch(create_bucket(session_s3.endpoint_url))  # type: ignore[attr-defined]
    return {
        "file": f"file://{tmp_path_factory.mktemp('durable') / 'ckpt'}",
        "s3": f"s3://{bucket}/runs",
        "memory": "memory://",
    }


@pytest.fixture
def store(
    module_raygents: Namespaces, store_urls: dict[str, str], request: pytest.FixtureRequest
) -> str:
    """raygents on the module's namespace of the test's store kind (its tests share it)."""
    kind = getattr(request, "param", "file")
    module_raygents.use(kind, store=store_urls[kind])
    return store_urls[kind]


def runs_folder(store: str) -> Path:
    """Where a ``file://`` store keeps its runs' records."""
    return Path(store.removeprefix("file://")) / "runs"


def ledger_tool(name: str, seconds: float = 0.0) -> rg.Tool:
    """A tool that records each execution in the ledger file given as run context."""

    def body(ctx: rg.ToolContext, value: str) -> str:
        time.sleep(seconds)
        with open(ctx.context["ledger"], "a") as f:
            f.write(json.dumps({"key": ctx.idempotency_key, "value": value}) + "\n")
        return f"{name}({value})"

    body.__name__ = name
    body.__doc__ = f"Record {name}."
    return rg.tool(num_cpus=0)(body)


def ledger(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def left_behind(folder: Path) -> list[str]:
    """What a run left in its folder besides its completion marker (``done.<epoch>``, kept:
    a completed run is never claimed again)."""
    try:
        return [p.name for p in folder.iterdir() if not p.name.startswith("done.")]
    except FileNotFoundError:
        return []


def answer_after_tools(done: str = "done") -> FunctionModel:
    """Calls ``work`` once, then answers with the number of tool results seen."""

    def reply(req: rg.ModelRequest) -> rg.ModelResponse:
        results = [m for m in req.messages if m.role == "tool"]
        if not results:
            return calls(call("work", {"value": "x"}, id="call_work"))
        return text(f"{done}: {len(results)} result(s)")

    return FunctionModel(reply)


@pytest.mark.parametrize("store", ["memory", "file", "s3"], indirect=True)
def test_suspend_while_a_tool_runs_then_resume_without_rerunning_it(
    store: str, tmp_path: Path
) -> None:
    book = tmp_path / "ledger"
    agent = rg.Agent("worker", tools=[ledger_tool("work", 1.0)], model=answer_after_tools())
    handle = rg.start(agent, "go", context={"ledger": str(book)})
    next(e for e in handle.events() if e.type == "tool_start")
    handle.suspend()
    with pytest.raises(rg.SuspendedError) as info:
        handle.result(timeout_s=60)
    assert info.value.checkpoint is None, "the checkpoint was stored, not carried inline"
    assert len(ledger(book)) == 1, "the in-flight tool finished"
    assert [r.status for r in rg.runs() if r.run_id == handle.run_id] == ["suspended"]
    result = rg.resume(handle.run_id, agent=agent, context={"ledger": str(book)}).result(
        timeout_s=60
    )
    assert result.final_output == "done: 1 result(s)"
    assert len(ledger(book)) == 1, "the finished tool did not run again"
    assert result.turns == 2


def test_a_run_suspended_after_a_handoff_resumes_at_the_target(store: str, tmp_path: Path) -> None:
    """Each agent's actor writes the run's records in turn (on a file store, itself)."""
    book = tmp_path / "ledger"

    def bill(req: rg.ModelRequest) -> rg.ModelResponse:
        if not any(m.tool_call_id == "call_work" for m in req.messages):
            return calls(call("work", {"value": "x"}, id="call_work"))
        return text("refunded")

    billing = rg.Agent("billing_d", tools=[ledger_tool("work", 1.0)], model=FunctionModel(bill))
    route = FunctionModel(lambda req: calls(call("transfer_to_billing_d", {}, id="route")))
    triage = rg.Agent("triage_d", handoffs=[billing], model=route)
    handle = rg.start(triage, "refund", context={"ledger": str(book)})
    next(e for e in handle.events() if e.type == "tool_start")
    handle.suspend()
    with pytest.raises(rg.SuspendedError) as info:
        handle.result(timeout_s=60)
    assert info.value.checkpoint is None
    (entry,) = [r for r in rg.runs() if r.run_id == handle.run_id]
    assert (entry.status, entry.agent_name) == ("suspended", "billing_d")
    result = rg.resume(handle.run_id, agent=triage, context={"ledger": str(book)}).result(
        timeout_s=60
    )
    assert result.final_output == "refunded" and result.last_agent is billing
    assert len(ledger(book)) == 1, "the tool ran once"


def test_a_run_resumed_at_once_is_running_in_the_run_table(store: str) -> None:
    """The suspended run's end travels to the coordinator in a batch; a resume right after
    must not be overtaken by it (the table would say suspended while the run runs)."""
    from raygents.runtime.driver import client

    slow = FunctionModel(lambda req: text("late"), latency_s=0.8)
    agent = rg.Agent("resumed_at_once", model=slow)
    handle = rg.start(agent, "go")
    handle.suspend()  # before its first model call
    with pytest.raises(rg.SuspendedError):
        handle.result(timeout_s=60)
    again = rg.resume(handle.run_id, agent=agent)  # no runs() in between: nothing flushed
    time.sleep(0.4)  # the resumed run is inside its model call
    coordinator = client.current().coordinator
    assert ray.get(coordinator.get_run.remote(handle.run_id)).status == "running"
    assert again.result(timeout_s=60).final_output == "late"


def test_timeout_budget_suspends_and_resume_completes(store: str, tmp_path: Path) -> None:
    book = tmp_path / "ledger"
    agent = rg.Agent("budget", tools=[ledger_tool("work", 1.5)], model=answer_after_tools())
    handle = rg.start(agent, "go", context={"ledger": str(book)}, timeout_s=0.5)
    with pytest.raises(rg.SuspendedError):
        handle.result(timeout_s=60)
    result = rg.resume(handle.run_id, agent=agent, context={"ledger": str(book)}).result(
        timeout_s=60
    )
    assert result.final_output.startswith("done") and len(ledger(book)) == 1


def test_suspend_before_the_first_turn_checkpoints_the_input(store: str) -> None:
    model = ScriptedModel([text("hello")])
    agent = rg.Agent("early", model=model)
    handle = rg.start(agent, "hi there", run_id=f"early-{os.urandom(3).hex()}")
    handle.suspend()
    with pytest.raises(rg.SuspendedError):
        handle.result(timeout_s=60)
    assert model.calls == []
    result = rg.resume(handle.run_id, agent=agent).result(timeout_s=60)
    assert result.final_output == "hello" and result.messages[0].text == "hi there"


def test_nested_suspend_and_resume_three_levels_deep(store: str, tmp_path: Path) -> None:
    book = tmp_path / "ledger"

    def leaf_model(req: rg.ModelRequest) -> rg.ModelResponse:
        if not any(m.role == "tool" for m in req.messages):
            return calls(call("work", {"value": req.messages[0].text}, id="call_leaf"))
        return text(f"leaf saw {req.messages[-1].text}")

    def via(tool: str) -> FunctionModel:
        def reply(req: rg.ModelRequest) -> rg.ModelResponse:
            results = [m.text for m in req.messages if m.role == "tool"]
            if not results:
                return calls(call(tool, {"input": "deep"}, id=f"call_{tool}"))
            return text(f"{tool} said: {results[0]}")

        return FunctionModel(reply)

    c = rg.Agent("level_c", tools=[ledger_tool("work", 1.0)], model=FunctionModel(leaf_model))
    b = rg.Agent("level_b", tools=[c.as_tool()], model=via("level_c"))
    a = rg.Agent("level_a", tools=[b.as_tool()], model=via("level_b"))
    handle = rg.start(a, "start", context={"ledger": str(book)})
    next(e for e in handle.events() if e.type == "tool_start" and len(e.path) == 2)
    handle.suspend()
    with pytest.raises(rg.SuspendedError):
        handle.result(timeout_s=60)
    statuses = {r.run_id: r.status for r in rg.runs()}
    nested = [rid for rid in statuses if rid.startswith(handle.run_id)]
    assert len(nested) == 3 and all(statuses[r] == "suspended" for r in nested)
    result = rg.resume(handle.run_id, agent=a, context={"ledger": str(book)}).result(timeout_s=60)
    assert result.final_output == "level_b said: level_c said: leaf saw work(deep)"
    assert len(ledger(book)) == 1


def test_completed_children_end_in_the_run_table_and_their_records_go(
    store: str, tmp_path: Path
) -> None:
    """Children are claimed in one call and their ends reported with the parent's records."""
    worker = rg.Agent(
        "ends_worker", tools=[ledger_tool("work")], model=answer_after_tools("worked")
    )
    fan = calls(*[call("ends_worker", {"input": f"part {i}"}, id=f"c{i}") for i in range(6)])
    lead = rg.Agent(
        "ends_lead", tools=[worker.as_tool()], model=ScriptedModel([fan, text("merged")])
    )
    book = tmp_path / "ledger.jsonl"
    handle = rg.start(lead, "go", context={"ledger": str(book)})
    assert handle.result(timeout_s=60).final_output == "merged"
    children = {child_run_id(handle.run_id, f"c{i}") for i in range(6)}
    runs_dir = runs_folder(store)
    deadline = time.monotonic() + 10
    while True:
        statuses = {r.run_id: r.status for r in rg.runs() if r.run_id in children}
        left = [n for r in (*children, handle.run_id) for n in left_behind(runs_dir / r)]
        if statuses == dict.fromkeys(children, "completed") and not left:
            break
        assert time.monotonic() < deadline, (statuses, left)
        time.sleep(0.05)
    assert len(ledger(book)) == 6


def test_a_run_with_tools_has_a_directory_for_its_records_and_leaves_only_its_result(
    store: str, tmp_path: Path
) -> None:
    """The agent actor makes a fresh run's directory while its first model call runs (its first
    record goes there); a run that ends without a record leaves only its completion marker,
    which keeps its result."""
    agent = rg.Agent(
        "answers_at_once",
        tools=[ledger_tool("work")],
        model=FunctionModel(lambda request: text("no tools needed"), latency_s=2.0),
    )
    runs = runs_folder(store)
    for attempt in range(2):  # (the first starts the agent's actor)
        handle = rg.start(agent, "go")
        folder = runs / handle.run_id
        if attempt:
            deadline = time.monotonic() + 1.8
            while not folder.is_dir():
                assert time.monotonic() < deadline, "no directory made during the model call"
                time.sleep(0.01)
            assert list(folder.iterdir()) == []
        assert handle.result(timeout_s=60).final_output == "no tools needed"
        assert sorted(p.name for p in folder.iterdir()) == ["done.1"]
    # Runs that end at once (the directory is made in a thread) leave the same.
    quick = rg.Agent(
        "answers_quickly",
        tools=[ledger_tool("work")],
        model=FunctionModel(lambda request: text("no tools needed")),
    )
    ids = [rg.run(quick, "go").run_id for _ in range(5)]
    for run_id in ids:
        assert sorted(p.name for p in (runs / run_id).iterdir()) == ["done.1"]


@rg.tool(num_cpus=0, needs_approval=True)
def delete_all(target: str) -> str:
    """Delete everything in a target."""
    return f"deleted {target}"


@rg.tool(num_cpus=0)
def look(target: str) -> str:
    """Look at a target."""
    return f"looked at {target}"


def approval_model() -> FunctionModel:
    def reply(req: rg.ModelRequest) -> rg.ModelResponse:
        results = [m.text for m in req.messages if m.role == "tool"]
        if not results:
            return calls(
                call("look", {"target": "db"}, id="c_look"),
                call("delete_all", {"target": "db"}, id="c_del"),
            )
        return text(" | ".join(results))

    return FunctionModel(reply)


def test_approval_interrupts_then_approve_runs_the_batch(store: str) -> None:
    agent = rg.Agent("careful", tools=[look, delete_all], model=approval_model())
    handle = rg.start(agent, "clean up")
    with pytest.raises(rg.RunInterrupted) as info:
        handle.result(timeout_s=60)
    assert [(p.call_id, p.tool_name) for p in info.value.pending] == [("c_del", "delete_all")]
    assert handle.status() == "awaiting_approval"
    with pytest.raises(rg.ApprovalDecisionsMismatch):
        rg.resume(handle.run_id, agent=agent, approvals={"c_look": True})
    with pytest.raises(rg.ApprovalDecisionsMismatch):
        rg.resume(handle.run_id, agent=agent, approvals={})
    result = rg.resume(handle.run_id, agent=agent, approvals={"c_del": True}).result(timeout_s=60)
    assert result.final_output == "looked at db | deleted db"


def test_denied_calls_get_the_denial_message(store: str) -> None:
    agent = rg.Agent(
        "careful2",
        tools=[look, delete_all],
        model=approval_model(),
    )
    handle = rg.start(agent, "clean up")
    with pytest.raises(rg.RunInterrupted):
        handle.result(timeout_s=60)
    decision = rg.ApprovalDecision(False, "not today")
    result = rg.resume(handle.run_id, agent=agent, approvals={"c_del": decision}).result(
        timeout_s=60
    )
    assert result.final_output == "looked at db | not today"


def test_should_approve_wins_over_the_tool_list(store: str) -> None:
    approval = rg.Approval(
        tools=["look"], should_approve=lambda ctx, call: call.name == "delete_all"
    )
    agent = rg.Agent("policy", tools=[look, delete_all], model=approval_model(), approval=approval)
    with pytest.raises(rg.RunInterrupted) as info:
        rg.run(agent, "clean")
    assert [p.tool_name for p in info.value.pending] == ["delete_all"]


def test_nested_approvals_of_siblings_and_levels_surface_on_the_root(store: str) -> None:
    def guarded(req: rg.ModelRequest) -> rg.ModelResponse:
        results = [m.text for m in req.messages if m.role == "tool"]
        if not results:
            return calls(
                call(
                    "delete_all",
                    {"target": req.messages[0].text},
                    id=f"del_{req.agent_name}_{req.messages[0].text}",
                )
            )
        return text(results[0])

    leaf = rg.Agent("leaf_guard", tools=[delete_all], model=FunctionModel(guarded))

    def middle_reply(req: rg.ModelRequest) -> rg.ModelResponse:
        results = [m.text for m in req.messages if m.role == "tool"]
        if not results:
            return calls(call("leaf_guard", {"input": "deep"}, id="call_leaf"))
        return text(f"middle: {results[0]}")

    middle = rg.Agent("middle_guard", tools=[leaf.as_tool()], model=FunctionModel(middle_reply))

    def root_reply(req: rg.ModelRequest) -> rg.ModelResponse:
        results = [m.text for m in req.messages if m.role == "tool"]
        if not results:
            return calls(
                call("leaf_guard", {"input": "a"}, id="call_a"),
                call("leaf_guard", {"input": "b"}, id="call_b"),
                call("middle_guard", {"input": "m"}, id="call_m"),
            )
        return text(" / ".join(results))

    root = rg.Agent(
        "root_guard", tools=[leaf.as_tool(), middle.as_tool()], model=FunctionModel(root_reply)
    )
    handle = rg.start(root, "go")
    with pytest.raises(rg.RunInterrupted) as info:
        handle.result(timeout_s=60)
    pending = {p.call_id: p for p in info.value.pending}
    assert set(pending) == {"del_leaf_guard_a", "del_leaf_guard_b", "del_leaf_guard_deep"}
    assert pending["del_leaf_guard_deep"].run_id.count(".") == 2
    decisions = {"del_leaf_guard_a": True, "del_leaf_guard_b": False, "del_leaf_guard_deep": True}
    result = rg.resume(handle.run_id, agent=root, approvals=decisions).result(timeout_s=60)
    assert result.final_output == (
        "deleted a / Tool call was denied by human review. / middle: deleted deep"
    )


def test_resume_twice_gives_the_same_handle(store: str) -> None:
    agent = rg.Agent(
        "twice", tools=[look], model=FunctionModel(lambda req: text("ok"), latency_s=0.5)
    )
    handle = rg.start(agent, "x")
    handle.suspend()
    with pytest.raises(rg.SuspendedError):
        handle.result(timeout_s=60)
    first = rg.resume(handle.run_id, agent=agent)
    assert rg.resume(handle.run_id, agent=agent) is first
    assert first.result(timeout_s=60).final_output == "ok"
    assert rg.attach(handle.run_id) is first


def test_resume_errors(store: str) -> None:
    with pytest.raises(rg.RunNotFound):
        rg.resume("no-such-run", agent=rg.Agent("x", model=ScriptedModel([])))
    agent = rg.Agent("named", model=ScriptedModel([text("never")]))
    handle = rg.start(agent, "x")
    handle.suspend()
    with pytest.raises(rg.SuspendedError):
        handle.result(timeout_s=60)
    with pytest.raises(rg.UserError, match=r"'named'.*not in the graph"):
        rg.resume(handle.run_id, agent=rg.Agent("other", model=ScriptedModel([])))
    with pytest.raises(rg.ApprovalDecisionsMismatch):
        rg.resume(handle.run_id, agent=agent, approvals={"nothing": True})


def test_the_checkpointed_turn_limit_wins_over_the_live_agent(store: str) -> None:
    def reply(req: rg.ModelRequest) -> rg.ModelResponse:
        done = sum(1 for m in req.messages if m.role == "tool")
        return (
            text("finished")
            if done >= 2
            else calls(call("look", {"target": str(done)}, id=f"c{done}"))
        )

    agent = rg.Agent(
        "limited", tools=[look], model=FunctionModel(reply, latency_s=0.3), max_turns=5
    )
    handle = rg.start(agent, "x")
    next(e for e in handle.events() if e.type == "tool_end")
    handle.suspend()
    with pytest.raises(rg.SuspendedError):
        handle.result(timeout_s=60)
    tighter = agent.clone(max_turns=1)
    assert rg.resume(handle.run_id, agent=tighter).result(timeout_s=60).final_output == "finished"


def test_corrupt_and_truncated_checkpoints_are_refused(store: str) -> None:
    from raygents.runtime.driver import client

    agent = rg.Agent("fragile_ckpt", model=ScriptedModel([text("never")]))
    handle = rg.start(agent, "x")
    handle.suspend()
    with pytest.raises(rg.SuspendedError):
        handle.result(timeout_s=60)
    root = runs_folder(store) / handle.run_id
    (path,) = sorted(root.iterdir())
    data = path.read_bytes()
    # a new coordinator (this one keeps the run's records in memory) reads the store
    ray.kill(client.current().coordinator, no_restart=False)
    for damaged in (data[: len(data) // 2], data[:-1] + bytes([data[-1] ^ 1])):
        path.unlink()
        path.write_bytes(damaged)
        with pytest.raises(rg.CheckpointCorrupt):
            rg.resume(handle.run_id, agent=agent)


def test_s3_unreachable_suspend_carries_the_checkpoint_inline(
    own_raygents: None, session_s3: object, tmp_path: Path
) -> None:
    from s3_server import create_bucket

    url = f"s3://{create_bucket(session_s3.endpoint_url)}/runs"  # type: ignore[attr-defined]
    rg.shutdown()
    rg.init(namespace=f"s3-down-{os.urandom(3).hex()}", store=url)
    agent = rg.Agent("offline_store", model=ScriptedModel([text("never")]))
    session_s3.stop()  # type: ignore[attr-defined]
    try:
        handle = rg.start(agent, "x")
        handle.suspend()
        with pytest.raises(rg.SuspendedError) as info:
            handle.result(timeout_s=120)
    finally:
        session_s3.start()  # type: ignore[attr-defined]
    assert info.value.checkpoint is not None
    assert info.value.checkpoint.messages[0].text == "x"
    assert "not stored" in str(info.value)


def test_a_run_keeps_going_while_its_coordinator_restarts(store: str, tmp_path: Path) -> None:
    book = tmp_path / "ledger"

    def reply(req: rg.ModelRequest) -> rg.ModelResponse:
        done = sum(1 for m in req.messages if m.role == "tool")
        return (
            text(f"finished after {done}")
            if done >= 2
            else calls(call("work", {"value": str(done)}, id=f"w{done}"))
        )

    agent = rg.Agent("survivor", tools=[ledger_tool("work", 1.0)], model=FunctionModel(reply))
    handle = rg.start(agent, "go", context={"ledger": str(book)})
    events = iter(handle.events())
    next(e for e in events if e.type == "tool_end")
    next(e for e in events if e.type == "checkpoint")  # the first batch's results are durable
    next(e for e in events if e.type == "tool_start")  # the second tool is in flight
    coordinator = ray.get_actor(
        "raygents:coordinator", namespace=rg.runtime.driver.client.current().namespace
    )
    ray.kill(coordinator, no_restart=False)  # its agent actors are not its: they go on
    result = handle.result(timeout_s=120)
    assert result.final_output == "finished after 2"
    assert not any(e.type == "recovered" for e in handle.events()), "nothing was lost"
    values = [entry["value"] for entry in ledger(book)]
    assert sorted(values) == ["0", "1"], "each call ran once"
    assert handle.run_id in {info.run_id for info in rg.runs(status="completed")}


@rg.tool(num_cpus=0)
def slow_look(target: str) -> str:
    """Look at a target, slowly."""
    time.sleep(0.5)
    return f"looked at {target}"


def three_step_model() -> FunctionModel:
    def reply(req: rg.ModelRequest) -> rg.ModelResponse:
        done = sum(1 for m in req.messages if m.role == "tool")
        if done >= 2:
            return text(f"finished after {done}")
        return calls(call("slow_look", {"target": str(done)}, id=f"step{done}"))

    return FunctionModel(reply, latency_s=0.2)


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_durability_modes_write_what_they_promise(
    own_raygents: None, durability: str, tmp_path: Path
) -> None:
    root = tmp_path / "ckpt"
    rg.shutdown()
    rg.init(
        namespace=f"mode-{durability}-{os.urandom(3).hex()}",
        store=f"file://{root}",
        durability=durability,
    )
    agent = rg.Agent("moded", tools=[slow_look], model=three_step_model())
    handle = rg.start(agent, "go")
    events = iter(handle.events())
    next(e for e in events if e.type == "tool_start" and e.call_id == "step1")
    handle.suspend()
    with pytest.raises(rg.SuspendedError):
        handle.result(timeout_s=60)
    keys = sorted((root / "runs" / handle.run_id).iterdir())
    deadline = time.time() + 20  # async mode writes behind: wait for the backlog
    while durability == "async" and len(keys) < 4 and time.time() < deadline:
        time.sleep(0.1)
        keys = sorted((root / "runs" / handle.run_id).iterdir())
    if durability == "exit":
        assert len(keys) == 1, "exit mode writes only the suspend checkpoint"
    else:
        # the intents of two batches, the first batch's record, then the suspend (which
        # holds the second batch's results)
        assert len(keys) >= 4, keys
    result = rg.resume(handle.run_id, agent=agent).result(timeout_s=60)
    assert result.final_output == "finished after 2"
    deadline = time.time() + 20  # deleted in the background once the run completed
    while left_behind(root / "runs" / handle.run_id) and time.time() < deadline:
        time.sleep(0.1)
    assert not left_behind(root / "runs" / handle.run_id), "a completed run's checkpoints go"


@rg.tool(remote=False)
async def together(n: int) -> str:
    """Finish at about the same time as the other calls of the batch."""
    await asyncio.sleep(0.2)
    return f"t{n}"


def test_calls_that_finish_together_share_journal_records() -> None:
    def reply(req: rg.ModelRequest) -> rg.ModelResponse:
        results = [m.text for m in req.messages if m.role == "tool"]
        if results:
            return text(" ".join(results))
        return calls(*(call("together", {"n": i}, id=f"t{i}") for i in range(6)))

    handle = rg.start(
        rg.Agent("together_agent", tools=[together], model=FunctionModel(reply)), "go"
    )
    assert handle.result(timeout_s=60).final_output == "t0 t1 t2 t3 t4 t5"
    checkpoints = [e for e in handle.events() if e.type == "checkpoint"]
    # the intent, then one or two journal records for six calls (not six), and no record after
    # the batch: the journal already holds every result
    assert 2 <= len(checkpoints) <= 3, [e.data for e in checkpoints]
    assert [e.data["seq"] for e in checkpoints] == list(range(1, len(checkpoints) + 1))


@rg.tool(remote=False)
def quick(n: int) -> str:
    """Answer at once."""
    return f"q{n}"


@rg.tool(remote=False)
async def pause(seconds: float) -> str:
    """Wait ``seconds``."""
    await asyncio.sleep(seconds)
    return f"waited {seconds}"


def test_quick_calls_go_in_the_batch_record_and_slow_ones_at_once(store: str) -> None:
    batches = [
        [call("quick", {"n": i}, id=f"q{i}") for i in range(4)],
        [call("pause", {"seconds": 0.2}, id="p1"), call("pause", {"seconds": 1.0}, id="p2")],
        [call("quick", {"n": 9}, id="q9"), call("pause", {"seconds": 0.5}, id="p3")],
    ]

    def reply(req: rg.ModelRequest) -> rg.ModelResponse:
        results = [m.text for m in req.messages if m.role == "tool"]
        done = sum(1 for m in req.messages if m.role == "assistant")
        return calls(*batches[done]) if done < len(batches) else text(" ".join(results))

    agent = rg.Agent("journaled", tools=[quick, pause], model=FunctionModel(reply))
    handle = rg.start(agent, "go")
    assert handle.result(timeout_s=60).final_output == (
        "q0 q1 q2 q3 waited 0.2 waited 1.0 q9 waited 0.5"
    )
    events = [(e.type, e.call_id or (e.data or {}).get("seq")) for e in handle.events()]
    records = [seq for kind, seq in events if kind == "checkpoint"]
    assert records == list(range(1, 9)), events
    at = events.index
    # quick calls: the intent, then one record with all four results, after the batch
    assert at(("checkpoint", 2)) > max(at(("tool_end", f"q{i}")) for i in range(4))
    # a call that took a while is journaled as it finishes, before the batch ends; the
    # batch's last call goes in the batch's own record
    assert at(("tool_end", "p1")) < at(("checkpoint", 4)) < at(("tool_end", "p2"))
    assert at(("tool_end", "p2")) < at(("checkpoint", 5))
    # a quick call whose batch goes on is journaled within a moment, not with the batch
    assert at(("tool_end", "q9")) < at(("checkpoint", 7)) < at(("tool_end", "p3"))
    assert at(("tool_end", "p3")) < at(("checkpoint", 8))


def test_a_batch_record_that_fails_fails_the_run_before_the_reply_is_used(
    store: str, tmp_path: Path
) -> None:
    book = tmp_path / "ledger"
    root = Path(store.removeprefix("file://"))

    @rg.tool(remote=False)
    def wipe(ctx: rg.ToolContext) -> str:
        """Delete this run's records, so that its next one cannot be written."""
        import shutil

        shutil.rmtree(root / "runs" / ctx.run_id)
        return "wiped"

    def reply(req: rg.ModelRequest) -> rg.ModelResponse:
        if not any(m.role == "tool" for m in req.messages):
            return calls(call("wipe", {}, id="w"))
        return calls(call("work", {"value": "after"}, id="after"))

    agent = rg.Agent(
        "wiped", tools=[wipe, ledger_tool("work")], model=FunctionModel(reply, latency_s=0.2)
    )
    handle = rg.start(agent, "go", context={"ledger": str(book)})
    with pytest.raises(rg.RaygentsError, match="fenced"):
        handle.result(timeout_s=60)
    assert ledger(book) == [], "no tool of the next reply ran"


def test_a_suspend_during_a_model_call_keeps_the_batch_it_asks_for(
    store: str, tmp_path: Path
) -> None:
    book = tmp_path / "ledger"

    def reply(req: rg.ModelRequest) -> rg.ModelResponse:
        results = [m for m in req.messages if m.role == "tool"]
        if not results:
            return calls(call("work", {"value": "x"}, id="call_work"))
        return text(f"done: {len(results)} result(s)")

    agent = rg.Agent(
        "asked", tools=[ledger_tool("work")], model=FunctionModel(reply, latency_s=1.0)
    )
    handle = rg.start(agent, "go", context={"ledger": str(book)})
    next(e for e in handle.events() if e.type == "agent_start")
    time.sleep(0.2)  # the model call is in flight
    handle.suspend()
    with pytest.raises(rg.SuspendedError):
        handle.result(timeout_s=60)
    assert ledger(book) == [], "the batch the model asked for waits for the resume"
    result = rg.resume(handle.run_id, agent=agent, context={"ledger": str(book)}).result(
        timeout_s=60
    )
    assert result.final_output == "done: 1 result(s)"
    assert [entry["value"] for entry in ledger(book)] == ["x"]
    roles = [m.role for m in result.messages]
    assert roles == ["user", "assistant", "tool", "assistant"], "the model was not asked again"


def _held_first_call(gate: str) -> Any:
    """A model whose first call of each run waits until the file ``gate`` exists, then asks
    for a tool call; once the tool answered, it answers."""

    async def reply(request: Any) -> Any:
        if any(m.role == "tool" for m in request.messages):
            return text("ok")
        while not os.path.exists(gate):
            await asyncio.sleep(0.02)
        return calls(call("quick", {"n": 1}, id="q"))

    return FunctionModel(reply)


def test_many_runs_suspended_at_once_all_stop_and_resume(store: str, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    agent = rg.Agent("many", tools=[quick], model=_held_first_call(str(gate)))
    handles = [rg.start(agent, f"go {i}") for i in range(40)]
    for h in handles:  # every run is in its first model call, held there
        next(e for e in h.events() if e.type == "agent_start")
    for h in handles:
        h.suspend()
    time.sleep(1.0)  # (the requests reach the actor while every run is held)
    gate.touch()
    for h in handles:
        with pytest.raises(rg.SuspendedError):
            h.result(timeout_s=60)
    resumed = [rg.resume(h.run_id, agent=agent) for h in handles]
    assert [r.result(timeout_s=60).final_output for r in resumed] == ["ok"] * 40
