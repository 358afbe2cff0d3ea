"""Analyses that read a finished run's model: ``istar-analyze`` (:mod:`.analyze`), ``istar-embed``."""
