"""Training on an output (`jobs.train`): config, ranks, launcher, run folder, data, batches, models,
loss, precision, optimizer, schedule, seeding, loop, evaluation, metrics, MFU, checkpoints, probe and the
saved model. The package imports nothing, so `config` parses options without torch."""
