"""The toolkit inside other training loops: ``transformers.Trainer`` (:mod:`.hf`)."""
