"""Benchmarks: us and the peers in one run on the same data (`python -m benchmarks.run`)."""
