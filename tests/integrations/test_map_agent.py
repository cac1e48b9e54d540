"""map_agent on a real ray.data dataset: every row gets its run's output, status and usage."""

from __future__ import annotations

import pytest

import raygents as rg
from raygents.integrations.ray_data import map_agent
from raygents.testing import FunctionModel, text

pytestmark = pytest.mark.usefixtures("rt")


def shout(req: rg.ModelRequest) -> rg.ModelResponse:
    said = req.messages[-1].text
    if said.endswith("7"):
        raise ValueError(f"no answer to {said!r}")
    return text(said.upper(), input_tokens=4, output_tokens=1)


def test_a_dataset_of_a_few_hundred_rows_goes_through_the_agent() -> None:
    import ray.data

    agent = rg.Agent("data-shout", model=FunctionModel(shout))
    rows = [{"id": i, "question": f"row {i}"} for i in range(300)]
    ds = ray.data.from_items(rows)
    out = map_agent(ds, agent, input_column="question", output_column="answer", batch_size=25)
    got = sorted(out.take_all(), key=lambda row: row["id"])
    assert [row["id"] for row in got] == list(range(300))
    for row in got:
        if str(row["id"]).endswith("7"):
            assert row["status"] == "failed" and row["answer"] is None
            assert "no answer to" in row["error"]
        else:
            assert row["status"] == "completed" and row["error"] is None
            assert row["answer"] == f"ROW {row['id']}"
            usage = {"input_tokens": 4, "output_tokens": 1, "requests": 1, "cost_usd": None}
            assert row["usage"] == usage


def test_a_missing_input_column_is_named() -> None:
    import ray.data

    agent = rg.Agent("data-missing", model=FunctionModel(shout))
    ds = map_agent(ray.data.from_items([{"text": "a"}]), agent)
    with pytest.raises(Exception, match="no column 'input'"):
        ds.take_all()


def test_map_agent_checks_its_arguments() -> None:
    import ray.data

    ds = ray.data.from_items([{"input": "a"}])
    with pytest.raises(rg.UserError, match="batch_size"):
        map_agent(ds, rg.Agent("data-args"), batch_size=0)
    with pytest.raises(rg.UserError, match="Agent"):
        map_agent(ds, "agent")  # type: ignore[arg-type]
    with pytest.raises(rg.UserError, match="max_cost_usd"):
        map_agent(ds, rg.Agent("data-args"), max_cost_usd=float("nan"))


def test_each_rows_run_has_its_budget_in_dollars_and_its_cost() -> None:
    import ray.data

    price = rg.Price(input_per_mtok=1000.0, output_per_mtok=0.0)  # (4 tokens: $0.004)
    agent = rg.Agent(
        "data-priced", model=FunctionModel(shout), model_settings=rg.ModelSettings(price=price)
    )
    rows = [{"input": f"row {i}"} for i in range(3)]
    got = map_agent(ray.data.from_items(rows), agent, max_cost_usd=1.0).take_all()
    assert [row["usage"]["cost_usd"] for row in got] == [pytest.approx(0.004)] * 3


def test_a_job_budget_stops_the_rows_once_their_runs_used_it() -> None:
    import ray.data

    agent = rg.Agent("data-job-budget", model=FunctionModel(shout))  # 5 tokens a row
    rows = [{"input": f"row {i}", "id": i} for i in range(0, 200, 10)]  # (none ends in 7)
    out = map_agent(
        ray.data.from_items(rows), agent, batch_size=2, concurrency=1, job_max_tokens=30
    )
    got = out.take_all()
    statuses = [row["status"] for row in got]
    # 6 rows reach the budget; the rest of its batch is suspended, and no later batch starts
    assert 6 <= statuses.count("completed") <= 7
    assert statuses.count("suspended") == len(rows) - statuses.count("completed")
    assert all(row["error"] for row in got if row["status"] == "suspended")


def test_map_agent_checks_its_job_budget() -> None:
    import ray.data

    ds = ray.data.from_items([{"input": "a"}])
    with pytest.raises(rg.UserError, match="job_max_cost_usd"):
        map_agent(ds, rg.Agent("data-args"), job_max_cost_usd=-1.0)
