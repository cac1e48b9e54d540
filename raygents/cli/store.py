"""The ``raygents`` command with no cluster: runs and their details read from the checkpoint
store alone (each run's newest record, or its completion marker and the result it keeps),
and ``gc``, which deletes ended runs' records and kept results past an age. Reads only, but
for ``gc``."""

from __future__ import annotations

import os
from typing import Any

from raygents.cli.output import detail, run_row
from raygents.cli.runs import CommandFailed, UsageError
from raygents.errors import CheckpointError, RunNotFound, UserError
from raygents.ids import validate_id
from raygents.records import checkpoint, keptresult, rebuild, retention
from raygents.records.runinfo import RunSummary, parent_of
from raygents.runtime.driver.startup import checkpoint_key
from raygents.stores.base import Store
from raygents.stores.file import FileStore
from raygents.stores.open import open_store

__all__ = ["StoreReader"]


class StoreReader:
    """The runs a store holds, as the coordinator would read them back on a start."""

    def __init__(self, url: str) -> None:
        """Open the store ``url`` names.

        Raises:
            UsageError: ``url`` names no store.
            CommandFailed: it names a directory that is not there, where a typo would
                otherwise read as a store with no runs.
        """
        try:
            self.store: Store = open_store(url)
        except UserError as exc:
            raise UsageError(f"--store: {exc}") from None
        if isinstance(self.store, FileStore) and not self.store.root.is_dir():
            root = str(self.store.root)
            why = f"{root!r} is not a directory" if os.path.exists(root) else f"no {root!r}"
            raise CommandFailed(f"no store at {self.store.url}: {why}")
        self.key = checkpoint_key(self.store.url)

    def runs(self) -> list[dict[str, Any]]:
        """A run table row for each run in the store, newest first, with its agent-as-tool
        ``parent`` (None for a top-level run): as its marker or newest record names it, else
        as its id says when the parent's records are in the store too."""
        rows = []
        runs = rebuild.group(self.store.list("runs/"))
        for run_id, listed in runs.items():
            found = rebuild.read(self.store, listed, self.key)
            if found is None:  # (fence marks only: nothing was recorded)
                continue
            row = run_row(
                run_id, found.status, found.agent_name, found.turns, found.at, found.error
            )
            row["parent"] = found.parent or parent_of(run_id, runs)
            rows.append(row)
        rows.sort(key=lambda row: row["updated"] or "", reverse=True)
        return rows

    def show(self, run_id: str) -> dict[str, Any]:
        """A run's details: its completion marker's, or its newest state's.

        Raises:
            RunNotFound: the store holds nothing of ``run_id``.
            CheckpointError: its records cannot be read.
        """
        validate_id(run_id, "run id")
        listed = rebuild.listing(run_id, self.store.list(checkpoint.run_prefix(run_id)))
        found = rebuild.read(self.store, listed, self.key)
        if found is None:
            raise RunNotFound(f"the store holds no records of run {run_id!r}", run_id=run_id)
        base: dict[str, Any] = {
            "status": found.status,
            "agent": found.agent_name,
            "turns": found.turns,
        }
        kept = self._kept(listed) if found.status == "completed" else None
        if kept is not None:
            return detail(
                run_id,
                **base,
                usage=kept["usage"],
                output=kept["final_output"],
                messages=kept["messages"] or None,
                source="store",
            )
        if found.status == "completed" or found.unreadable or not listed.chain:
            return detail(
                run_id,
                **base,
                usage=found.usage,
                last_error=found.error,
                output=found.output,
                source="store",
            )
        blobs = []
        for key in listed.chain:
            data = self.store.get(key)
            if data is None:
                raise RunNotFound(f"a record of run {run_id!r} went while read", run_id=run_id)
            blobs.append(data)
        state, _ = checkpoint.restore(blobs, run_id=run_id, key=self.key)
        return detail(
            run_id,
            **base,
            usage=state.usage,
            last_error=found.error,
            pending=state.pending,
            in_doubt=state.in_doubt,
            messages=state.messages,
            source="store",
        )

    def _kept(self, listed: rebuild.Listing) -> RunSummary | None:
        """A completed run's result as its marker keeps it, or None."""
        if listed.done is None:
            return None
        data = self.store.get(listed.done)
        if data is None:
            return None
        try:
            marker = keptresult.read_marker(
                data, key=self.key, run_id=listed.run_id, source=listed.done
            )
        except (CheckpointError, ValueError):
            return None
        return keptresult.summary(marker)

    def gc(self, older_than_s: float, dry_run: bool) -> list[dict[str, Any]]:
        """Delete the records and kept results of ended runs that ended more than
        ``older_than_s`` ago (unless ``dry_run``); a row for each (``retention.Expired``, with
        an ``error`` where the delete failed), and one for each run kept because it cannot
        be read (``retention.Unreadable``). Runs whose newest record says they run, are
        suspended or await approval are never touched, nor are those that cannot be read (a
        marker signed with a key this command was not given says nothing of its age)."""
        cutoff = retention.cutoff_of(older_than_s)
        found, unreadable = retention.scan(self.store, self.key, cutoff)
        rows = [u.row() for u in unreadable]
        for expired in found:
            row = expired.row()
            if not dry_run:
                try:
                    retention.remove(self.store, expired.run_id, expired.keys)
                except CheckpointError as exc:
                    row["error"] = str(exc)
            rows.append(row)
        for ledger in retention.scan_ledgers(self.store, cutoff):
            row = ledger.row()
            if not dry_run:
                try:
                    retention.remove_ledger(self.store, ledger)
                except CheckpointError as exc:
                    row["error"] = str(exc)
            rows.append(row)
        return rows
