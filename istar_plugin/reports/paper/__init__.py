"""Numbers the papers report, as data naming its source: I-STAR's Table 1 (:mod:`.istar`), Ding et al.'s calibration
results (:mod:`.ding`) and the Isotropy Layer paper's Table 3 (:mod:`.isolayer`)."""
