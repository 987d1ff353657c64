"""GatewayCore: routing, per-session ordering, commands and the turn lifecycle."""
