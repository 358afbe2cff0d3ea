"""Settings compared, paired by seed: the bootstrap intervals (:mod:`.paired`), every setting against Base
(:mod:`.versus_base`), against a reference value of a swept key (:mod:`.versus_reference`) and against the I-STAR
paper's numbers (:mod:`.versus_paper`)."""
