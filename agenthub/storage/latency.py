"""A latency histogram of store calls, in the cumulative-bucket form Prometheus exposes."""

from __future__ import annotations

BOUNDS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, float("inf"))


class Latency:
    """Counts of calls per upper bound (each call counted in every bucket it fits: cumulative), their sum."""

    def __init__(self) -> None:
        self.buckets: dict[float, int] = dict.fromkeys(BOUNDS_S, 0)
        self.count = 0
        self.sum_s = 0.0

    def observe(self, seconds: float) -> None:
        self.count += 1
        self.sum_s += seconds
        for bound in self.buckets:
            if seconds <= bound:
                self.buckets[bound] += 1

    def exposition(self, metric: str, help_text: str) -> list[str]:
        """The histogram's lines of Prometheus text exposition."""
        lines = [f"# HELP {metric} {help_text}", f"# TYPE {metric} histogram"]
        for bound, count in self.buckets.items():
            label = "+Inf" if bound == float("inf") else repr(bound)
            lines.append(f'{metric}_bucket{{le="{label}"}} {count}')
        return [*lines, f"{metric}_sum {self.sum_s:.6f}", f"{metric}_count {self.count}"]
