"""What a run leaves on disk, written so that a crash never leaves a half-written file: atomic writes
(:mod:`.atomic`), the metrics log and TensorBoard events (:mod:`.logs`), checkpoints with their SHA-256
(:mod:`.checkpoints`) and the run directory's lock (:mod:`.lock`)."""
