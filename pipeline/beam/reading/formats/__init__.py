"""One reader per input format: plain text, JSON Lines, Parquet and `datasets` row ranges."""
