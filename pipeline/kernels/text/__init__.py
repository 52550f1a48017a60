"""Kernels of text work: cleaning, the streamed text of an input, sentences and quality signals."""
