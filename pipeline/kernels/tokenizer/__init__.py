"""The fast tokenizers' kernels, one package per family (matching `pipeline.tokenizer.<family>`)."""
