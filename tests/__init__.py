"""AgentHub's test suite."""
