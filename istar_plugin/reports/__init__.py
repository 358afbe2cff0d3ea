"""Results read back from the records runs leave and shown: the records (:mod:`.records`), settings compared
(:mod:`.comparisons`), each table and figure (:mod:`.outputs`), written for a grid by :mod:`.grid_report` (for a
search by :mod:`.search_report`), the papers' numbers (:mod:`.paper`) and the docs' tables (:mod:`.docs_tables`)."""
