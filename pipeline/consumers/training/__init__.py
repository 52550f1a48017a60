"""Training on an output (`jobs.train`): config, ranks, launcher, run folder, data, models, loop,
checkpoints and helpers. The package imports nothing, so `config` parses options without torch."""
