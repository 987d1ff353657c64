"""Helpers for tests that need a separate process."""
