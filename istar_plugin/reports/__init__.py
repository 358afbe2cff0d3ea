"""Results read back and shown, from the records runs leave: what the runs recorded (:mod:`.records`), settings
compared (:mod:`.comparisons`), each paper's tables and figures (:mod:`.outputs`), all of them written for a grid
by :mod:`.grid_report` (and for an ``istar-tune`` search by :mod:`.search_report`); the numbers the papers report
(:mod:`.paper`), the shared CSV and figure helpers (:mod:`.tables`, :mod:`.figures`) and the tool that renders the
docs' tables from their CSVs (:mod:`.docs_tables`)."""
