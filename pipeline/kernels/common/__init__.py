"""Primitives every kernel shares: numba options and the kernel cache, hashing, the byte-keyed
hash table, memory loads and prefetches."""
