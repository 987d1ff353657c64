"""Agents: definitions loaded from `agents/<name>/`, tools, and the agent loop."""
