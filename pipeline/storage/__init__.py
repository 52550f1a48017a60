"""The filesystem layer of the consumers: fsspec paths (local, `s3://`, `gs://`, `hf://`), Arrow
files with pyarrow, the local shard cache, and row reads from shard files (pread or mmap). Never
imports Apache Beam, so a training machine does not need it."""
