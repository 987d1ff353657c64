"""What every push channel needs and none should write again: tasks, per-chat order, dedup, replay, notices, config."""
