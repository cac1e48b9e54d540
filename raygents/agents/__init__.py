"""What a user declares: agents, tools, handoffs, hooks, guardrails (see README.md here)."""
