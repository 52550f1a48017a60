"""MaskBeam library code, in layers that import only downwards (kept by import-linter, setup.cfg):

    beam/       the Apache Beam layer: reading/ (listing, work units, the reader, formats), units,
                dedup/, writing/ (parts, shard plan, shards, manifest), run/ (the job, options, resume)
    consumers/  loading/, training/, validation, inspection, report, publish: never import Beam
    tokenizer/  the `tokenizers` adapter: spec, resolution, encoding, one folder per fast family
    storage/    the consumers' filesystem layer: fsspec paths, Arrow files, the shard cache
    kernels/    pure numpy/numba: common/ primitives, text/, rows/, tokenizer/<family>/
    console/    what the jobs print: logging set-up, progress, clean interrupts (standard library only)
    sample/     the embedded sample: three short public-domain books and the bert-base-uncased tokenizer
    (schemas/, beside this package, holds every name, dtype, key and enum value)

Importing this package has no side effects. Importing `pipeline.beam` has two, both for the Beam
layer's own sake: it holds back one Beam import-time warning (`pipeline.console.logs`), and it makes
Beam's S3 wrapper share one boto3 client per S3 configuration and process (`pipeline.beam.run.s3_clients`:
only a reviewed constructor is wrapped, a client is reused only for the configuration it was built
from). Consumers never import `pipeline.beam`.
"""

__version__ = "0.1.0"
