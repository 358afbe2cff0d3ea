"""What a grid's runs recorded, read back: one record per finished cell (:mod:`.cells`), the records grouped into
settings over their seeds (:mod:`.settings`), what else a run's ``results.json`` and logs hold (:mod:`.run_extras`,
:mod:`.run_logs`), and the runs as the calibration and Isotropy Layer papers' tables see them
(:mod:`.calibration_runs`, :mod:`.isolayer_runs`); an ``istar-tune`` search's study and trials (:mod:`.searches`).
Archives, small enough for git, of a grid's records (:mod:`.archive`) and of a search's (:mod:`.search_archive`, its
study as text: :mod:`.study_file`); what ``istar-analyze`` and ``istar-embed`` wrote (:mod:`.analyses`,
:mod:`.embeddings`)."""
