"""Analyses that run a finished run's model, read only (no lock, no optimizer, nothing written into the run):
``istar-analyze``'s representation analyses (:mod:`.analyze`) and ``istar-embed``'s sentence embeddings on STS-B
(:mod:`.sts_embeddings`), both loading the model through :mod:`.loading`."""
