"""What reading or training a model needs below the trainer: the one model builder, its device, precision,
random streams, batches and ``init_from`` weights."""
