"""The SentencePiece family (XLM-R, DeBERTa-v3, ALBERT, T5; Llama / Gemma BPE): its `Family` for the
registry (family.py), the fast path (fast.py), the plain-chunk form (plain.py) and the stream form
(stream.py)."""
