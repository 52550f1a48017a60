"""The filesystem layer of the consumers: fsspec paths (local, `s3://`, `gs://`, `hf://`) and Arrow
file access with pyarrow. Never imports Apache Beam, so a training machine does not need it."""
