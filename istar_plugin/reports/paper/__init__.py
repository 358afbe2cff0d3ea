"""Numbers the papers report, carried as data (each file names its source) for reports to show beside ours: the
I-STAR paper's Table 1 (:mod:`.istar`), Ding et al.'s calibration results (:mod:`.ding`) and the Isotropy Layer
paper's Table 3 (:mod:`.isolayer`)."""
