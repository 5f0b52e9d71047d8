"""How many drafts each step: vLLM's schedule passes through; "auto" is the goodput policy."""
