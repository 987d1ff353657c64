"""Fakes that stand in for the systems at AgentHub's boundaries (vendors, the gateway for channel tests)."""
