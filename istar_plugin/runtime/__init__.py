"""Below the trainer: the one model builder, its device, precision, random streams, batches, ``init_from``."""
