"""The byte-level BPE family (GPT-2, RoBERTa, ModernBERT, Llama-3, OLMo): its `Family` for the
registry (family.py) and its fast path (fast.py)."""
