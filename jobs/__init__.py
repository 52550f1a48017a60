"""Thin command-line entry points: `python -m jobs.<name>`."""
