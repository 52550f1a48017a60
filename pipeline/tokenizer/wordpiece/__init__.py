"""The WordPiece family (BERT): its `Family` for the registry (family.py) and its fast path (fast.py)."""
