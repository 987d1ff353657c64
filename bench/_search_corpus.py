"""What the memory_search benchmarks share: the generated chat corpus of bench_search_postgres.py (mixed Chinese
and English turns, one planted fact), timing a call many times, and percentiles."""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

ZH = ["预算", "排期", "会议", "客户", "合同", "发票", "报销", "需求", "测试", "上线", "版本", "接口"]
ZH += ["数据库", "服务器"]
ZH += ["前端", "后端", "设计", "文档", "周报", "季度", "老板", "同事", "项目", "问题", "方案", "进度", "风险", "计划"]
EN = ["budget", "schedule", "meeting", "customer", "contract", "invoice", "expense", "release", "version", "server"]
EN += ["design", "report", "deadline", "review", "launch", "ticket", "backlog", "sprint", "vendor", "pricing"]
NAMES = ["Alice", "Bob", "Carol", "Dave", "Evan", "Fay", "Gus", "Hana", "小王", "老李", "张三", "李四"]
PLANTED = "我们的暗号是夜莺 password nightingale"


def sentence(rng: random.Random, i: int) -> str:
    words = [rng.choice(ZH) for _ in range(4)] + [rng.choice(EN) for _ in range(4)] + [rng.choice(NAMES)]
    words += [f"{rng.randint(1, 5000)}", f"item{rng.randint(1, 20000)}"]
    rng.shuffle(words)
    return f"第{i}条：" + " ".join(words) + "，这个事情我们下周再讨论一下 we will talk about it next week"


def message(rng: random.Random, i: int) -> dict[str, Any]:
    role = "user" if i % 2 == 0 else "assistant"
    return {"role": role, "content": sentence(rng, i), "timestamp": 1_700_000_000_000 + i}


async def timed(fn: Callable[[], Awaitable[object]], runs: int) -> list[float]:
    """Seconds of each of `runs` calls."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        await fn()
        times.append(time.perf_counter() - start)
    return times


def percentile(times: list[float], q: float) -> float:
    """The q-quantile of `times`, in ms."""
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000
