"""The tokenizer adapter: what the job needs from a `tokenizers` tokenizer, and how text is encoded."""
