"""Benchmark engine: requests, statistics, prompts, results (UI-free)."""
