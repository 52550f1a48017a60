"""Byte-level BPE kernels (GPT-2, RoBERTa, Llama-3 style): the fused split, byte map and merges, and
its word cache."""
