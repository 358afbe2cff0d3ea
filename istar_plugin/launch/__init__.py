"""Where and how runs are launched: grid files and sweeps (:mod:`.grid`), one grid cell as a checkpointable
callable (:mod:`.cell`), the executors that submit cells inline, locally or to SLURM (:mod:`.submit`), launch
options and cluster profiles (:mod:`.options`), and the hub check before a run (:mod:`.hub_check`)."""
