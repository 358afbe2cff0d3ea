"""Numbers the papers report, as data naming its source (the CSV files in :data:`DATA`): I-STAR's Table 1
(:mod:`.istar`), Ding et al.'s calibration results and the Isotropy Layer paper's Table 3."""
from pathlib import Path

DATA = Path(__file__).parent
