"""The runs of a batch job's items: started, resumed, or followed, as what the store and the
coordinator know of each says."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from raygents.agent import Agent
from raygents.errors import RaygentsError, UserError

if TYPE_CHECKING:
    from raygents.runtime.handle import RunHandle

__all__ = ["JobRuns"]


class JobRuns:
    """How each item of job ``job_id`` gets its run (blocking calls: one round trip to the
    coordinator, or a few)."""

    def __init__(self, agent: Agent, job_id: str, context: Any, options: Mapping[str, Any]) -> None:
        self._agent = agent
        self.job_id = job_id
        self._context = context
        self._options = dict(options)
        self._statuses: dict[str, str] = {}

    def read(self) -> None:
        """Ask the coordinator once which of the job's runs it knows, and their statuses."""
        self._statuses = self.known()

    def known(self) -> dict[str, str]:
        """The statuses the coordinator knows of this job's runs (those it forgot completed:
        starting them again finds their completion marker)."""
        from raygents.runtime.attach import runs

        prefix = f"{self.job_id}."
        return {
            info.run_id: info.status
            for info in runs()
            if info.run_id.startswith(prefix) and info.run_id[len(prefix) :].isdigit()
        }

    def launch(self, run_id: str, raw: Any) -> tuple[RunHandle, bool]:
        """The run of an item: started, resumed, or (completed or running) attached to.
        Returns the handle and whether the run had completed before."""
        from raygents.runtime.attach import attach

        run_input, context = self._split(raw)
        status = self._statuses.pop(run_id, None)
        if status in (None, "failed"):
            try:
                return self._start(run_id, run_input, context), False
            except UserError as refused:
                try:
                    found = attach(run_id)
                except RaygentsError:
                    raise refused from None  # (the input was refused, not the run id)
                return self._go_on(found, run_id, run_input, context)
        return self._go_on(attach(run_id), run_id, run_input, context)

    def _go_on(
        self, found: RunHandle, run_id: str, run_input: Any, context: Any
    ) -> tuple[RunHandle, bool]:
        """Continue a run the store knows: resume it if suspended, start it again if it
        failed, else follow it (its result, its wait for approval, its end elsewhere)."""
        from raygents.runtime.runs import resume

        status = found.status()
        if status == "suspended":
            timeout_s = self._options["timeout_s"]
            handle = resume(run_id, agent=self._agent, context=context, timeout_s=timeout_s)
            return handle, False
        if status == "failed":
            return self._start(run_id, run_input, context), False
        return found, status == "completed"

    def _start(self, run_id: str, run_input: Any, context: Any) -> RunHandle:
        from raygents.runtime.runs import start

        return start(self._agent, run_input, context=context, run_id=run_id, **self._options)

    def _split(self, raw: Any) -> tuple[Any, Any]:
        """An item's run input and context."""
        if isinstance(raw, Mapping) and "input" in raw:
            unknown = set(raw) - {"input", "context"}
            if unknown:
                raise UserError(
                    f"a batch item dict takes 'input' and 'context', not {sorted(unknown)!r}"
                )
            return raw["input"], raw.get("context", self._context)
        return raw, self._context
