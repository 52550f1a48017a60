"""The Apache Beam layer of the preprocess job: reading inputs, units of work, shards, transforms,
finalizing, resuming and runner options. Consumers never import it."""

from pipeline.console import hold_back_import_noise

# Before the first `import apache_beam`: Beam logs an `apitools not found` warning on import that
# concerns only BigQuery; the jobs show it with --log_level INFO or DEBUG.
hold_back_import_noise()

from pipeline.beam.run.beam_import import import_beam  # noqa: E402 - after the import noise is held back

import_beam()  # before anything below imports Beam: without its pandas converters (see beam_import)

from pipeline.beam.run.s3_clients import reuse_s3_clients  # noqa: E402

# Here, so that every process that runs our Beam code (launcher and workers, which import this
# package to unpickle the DoFns) shares boto3 clients. A side effect on Beam's S3 wrapper, made
# safe there: only a reviewed constructor is wrapped, and a client is reused only for exactly the
# configuration it was built from; a no-op without Beam's AWS support.
reuse_s3_clients()
