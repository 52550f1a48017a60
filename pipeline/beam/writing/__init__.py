"""Writing the output: per-unit part files, the shard plan, Arrow shards, the manifest and the
`datasets` side files."""
