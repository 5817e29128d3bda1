"""Gymnasium environments: views of the engine's decision points (issue 6)."""
