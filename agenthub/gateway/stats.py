"""Counters the gateway keeps for /metrics and /status."""

from __future__ import annotations

from dataclasses import dataclass, field

from agenthub.messages import Usage


@dataclass
class GatewayStats:
    """Monotonic counters since start; read by the HTTP channel's /metrics."""

    turns: int = 0
    turn_errors: int = 0
    aborted: int = 0
    llm_calls: int = 0
    llm_seconds: float = 0.0
    llm_latency_buckets: dict[float, int] = field(
        default_factory=lambda: dict.fromkeys((0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, float("inf")), 0)
    )
    tokens: Usage = field(default_factory=Usage)

    def record_call(self, seconds: float, usage: Usage) -> None:
        self.llm_calls += 1
        self.llm_seconds += seconds
        self.tokens = self.tokens + usage
        for bound in self.llm_latency_buckets:
            if seconds <= bound:
                self.llm_latency_buckets[bound] += 1
