"""The WordPiece kernel (BERT): basic pre-tokenization and greedy longest-match-first pieces."""
