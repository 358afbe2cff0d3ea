"""The fine-tuning loop (:mod:`.trainer`) and what it is built from, and the export of the fine-tuned model."""
