"""What runs recorded, read back: a grid's cells (:mod:`.cells`) grouped into settings (:mod:`.settings`), what else
a run directory holds (:mod:`.run_extras`), archives of a grid (:mod:`.archive`) and of a search
(:mod:`.search_archive`, :mod:`.study_file`), a search (:mod:`.searches`), and what ``istar-analyze`` and
``istar-embed`` wrote (:mod:`.analyses`)."""
