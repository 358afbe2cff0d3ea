"""What a run leaves on disk (atomic writes, logs, checksummed checkpoints, records) and the run directory's lock."""
