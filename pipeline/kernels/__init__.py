"""Pure kernels: numpy/numba and plain Python only (no Beam, torch, tokenizers, filesystem or network)."""
