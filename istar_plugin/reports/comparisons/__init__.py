"""Settings compared, paired by seed: against Base and against a reference value of a swept key."""
