"""Paged KV blocks, prefix caching and the scheduler/KV boundary (vLLM V1's rules)."""
