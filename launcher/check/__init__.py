"""Checking: what a vLLM log states, held against the plan, bucket by bucket."""
