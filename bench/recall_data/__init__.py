"""The recall benchmark's data, written by the team: a seeded generator of Chinese and English conversations."""
