"""Tool tasks: what runs in a Ray worker for one tool call."""
