"""Backends behind an instance: the simulator (default) and, later, a live vLLM engine."""
