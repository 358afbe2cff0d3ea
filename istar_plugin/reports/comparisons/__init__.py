"""Settings compared, paired by seed: the bootstrap (:mod:`.paired`), against Base (:mod:`.versus_base`, what it
could detect: :mod:`.power`) and against a reference value of a swept key (:mod:`.versus_reference`)."""
