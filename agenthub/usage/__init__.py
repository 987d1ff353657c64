"""Model usage and budgets (design §15): every call recorded, turns admitted against token budgets, usage shown."""
