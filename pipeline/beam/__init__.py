"""The Apache Beam layer of the preprocess job: reading inputs, units of work, shards, transforms,
finalizing, resuming and runner options. Consumers never import it."""

from pipeline.console import hold_back_import_noise

# Before the first `import apache_beam`: Beam logs an `apitools not found` warning on import that
# concerns only BigQuery; the jobs show it with --log_level INFO or DEBUG.
hold_back_import_noise()
