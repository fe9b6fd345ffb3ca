"""The plan: a profile and a machine, resolved against a vLLM version, priced into buckets and a verdict."""
