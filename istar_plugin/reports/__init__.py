"""Results read back and shown: the papers' tables and figures from a grid of runs, ``istar-analyze``'s
representation analyses, and the numbers the papers report (:mod:`.paper`)."""
