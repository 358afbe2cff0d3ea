"""Settings compared, paired by seed: the bootstrap (:mod:`.paired`), against Base and what that could detect
(:mod:`.versus_base`), and against a reference value of a swept key (:mod:`.versus_reference`)."""
