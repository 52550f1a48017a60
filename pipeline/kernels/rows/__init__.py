"""Kernels of row work: chunking token streams into rows, and masking them."""
