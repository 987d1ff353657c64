"""WeCom channel tests, sharing the fixtures in `tests/wecom/harness.py`."""
