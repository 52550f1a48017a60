"""The SentencePiece family (XLM-R, DeBERTa-v3, ALBERT, T5; Llama / Gemma BPE): the fast path, the
plain-chunk form and the stream form."""
