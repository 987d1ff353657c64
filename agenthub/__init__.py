"""AgentHub: a multi-channel chatbot daemon that puts LLM agents where people already talk."""

__version__ = "0.1.0"
