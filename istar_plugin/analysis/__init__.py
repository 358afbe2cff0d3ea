"""Analyses that read a finished run's model: ``istar-analyze`` (:mod:`.analyze`) and ``istar-embed``
(:mod:`.sts_embeddings`), both loading it through :mod:`.loading`."""
