"""The WordPiece family (BERT): its fast path."""
