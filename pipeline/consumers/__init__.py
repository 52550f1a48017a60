"""Code that reads a finished output: the PyTorch loader, training, validation, inspection, the
report and publishing. Imports schemas, kernels, the tokenizer adapter and storage; never Beam."""
