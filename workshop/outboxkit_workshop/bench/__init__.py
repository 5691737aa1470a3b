"""Benchmarks: figures measured side by side in one run, written as JSON and a markdown table."""
