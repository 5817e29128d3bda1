"""Metrics: record columns, request/step frames, summaries, comparison tables, plots."""
