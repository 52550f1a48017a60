"""The Apache Beam layer of the preprocess job: reading inputs, units of work, shards, transforms,
finalizing, resuming and runner options. Consumers never import it."""
