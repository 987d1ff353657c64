"""Channel adapters: each platform's messages in, the gateway's replies out."""
