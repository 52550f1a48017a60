"""Running the preprocess job: its config, the runner and its options, the output folder policy,
--resume, progress and the closing summary."""
