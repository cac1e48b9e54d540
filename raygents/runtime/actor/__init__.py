"""The agent actor: what runs inside it (model calls, tool turns, records, children)."""
