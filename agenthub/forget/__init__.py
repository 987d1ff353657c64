""" "Forget me" (design §14): one person's messages redacted from histories and archives, summaries that may quote
them dropped, their profile deleted, memory lines quoting them removed, the search index told, one audit line."""
