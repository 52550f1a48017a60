"""One reader per input format: plain text, JSON Lines, Parquet and `datasets` row ranges.
`registry` is the table of formats every stage asks; `source` the protocols a record reader reads
through."""
