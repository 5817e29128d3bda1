"""The engine loop and the shared request vocabulary."""
