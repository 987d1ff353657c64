"""Scheduled jobs: reminders and recurring prompts that go out through the chat's channel (design §13)."""
