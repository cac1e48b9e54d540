"""``trace()`` blocks: the runs started in one share its trace, under the block's own span,
and ``runs()`` shows its group id."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import raygents as rg
from raygents.core.envelope import RunState
from raygents.runtime.driver.tracegroup import current_workflow
from raygents.telemetry import otel, tracing


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """Tracing on in this process, its spans kept in memory."""
    exporter = InMemorySpanExporter()
    provider = otel.new_provider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "_tracer", otel.Tracing(provider))
    monkeypatch.setattr(tracing, "_checked", True)
    yield exporter
    provider.shutdown()


def test_runs_of_a_block_share_its_trace_under_its_span(spans: InMemorySpanExporter) -> None:
    with rg.trace("Joke workflow", group_id="thread-1", metadata={"user": "ann"}) as block:
        workflow = current_workflow()
        assert workflow is not None and workflow.group_id == "thread-1"
        ended = []
        for run_id in ("run-a", "run-b"):
            state = RunState(run_id=run_id, agent_name="joker", workflow=workflow)
            state = state.evolve(trace=tracing.trace_of(state))
            tracing.run_end(state, "joker", "completed", None)
            ended.append(state)
    assert current_workflow() is None, "the block's end makes no trace current"
    by_name = {s.name: s for s in spans.get_finished_spans()}
    block_span = by_name["Joke workflow"]
    trace_id = int(block.trace_id.removeprefix("trace_"), 16)
    assert block_span.context.trace_id == trace_id
    assert block_span.attributes is not None
    assert block_span.attributes["raygents.group_id"] == "thread-1"
    assert block_span.attributes["raygents.metadata.user"] == "ann"
    roots = [s for s in spans.get_finished_spans() if s.name == "invoke_workflow joker"]
    assert len(roots) == 2
    for root in roots:
        assert root.context.trace_id == trace_id
        assert root.parent is not None and root.parent.span_id == block_span.context.span_id
    assert roots[0].context.span_id != roots[1].context.span_id


def test_a_run_outside_a_block_has_a_trace_of_its_own(spans: InMemorySpanExporter) -> None:
    state = RunState(run_id="alone", agent_name="a")
    trace = tracing.trace_of(state)
    trace_id, _ = otel.run_ids("alone")
    assert trace is not None and trace.traceparent.split("-")[1] == f"{trace_id:032x}"
    assert not trace.workflow_span


def test_blocks_nest_and_a_disabled_one_groups_nothing() -> None:
    with rg.trace("outer") as outer:
        with rg.trace("inner", trace_id=rg.gen_trace_id()) as inner:
            found = current_workflow()
            assert found is not None and found.trace_id == inner.trace_id
        found = current_workflow()
        assert found is not None and found.trace_id == outer.trace_id
        with rg.trace("off", disabled=True):
            assert current_workflow() is None
    manual = rg.trace("manual")
    manual.start(mark_as_current=True)
    assert current_workflow() is not None
    manual.finish(reset_current=True)
    assert current_workflow() is None


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"workflow_name": ""}, "needs a workflow name"),
        ({"workflow_name": "w", "trace_id": "abc"}, "trace_id must be"),
        ({"workflow_name": "w", "group_id": 3}, "group_id must be a str"),
        ({"workflow_name": "w", "metadata": {1: "x"}}, "metadata must be a dict"),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, object], problem: str) -> None:
    with pytest.raises(rg.UserError, match=problem):
        rg.trace(**kwargs)  # type: ignore[arg-type]
