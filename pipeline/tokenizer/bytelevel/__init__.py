"""The byte-level BPE family (GPT-2, RoBERTa, ModernBERT, Llama-3, OLMo): its fast path."""
