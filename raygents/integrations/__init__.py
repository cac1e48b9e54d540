"""Integrations with other systems: MCP servers and Ray Data."""
