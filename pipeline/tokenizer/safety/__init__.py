"""Checks of a tokenizer from others before it runs: its regexes' backtracking, its normalizer's growth."""
