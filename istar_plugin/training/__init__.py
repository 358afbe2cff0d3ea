"""The fine-tuning loop (:mod:`.trainer`) and what it is built from: batch order, RNG state, the divergence
guard, step statistics, progress lines, early stopping, torch.distributed, ``init_from`` and the export of
the fine-tuned model."""
