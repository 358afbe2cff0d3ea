"""The console scripts, one module each: ``istar-run`` (:mod:`.run`), ``istar-grid`` (:mod:`.grid`),
``istar-report`` (:mod:`.report`), ``istar-export`` (:mod:`.export`) and ``istar-analyze`` (:mod:`.analyze`).

``python -m istar_plugin.cli ARGS`` is ``istar-run ARGS``; ``python -m istar_plugin.cli.grid ARGS`` is
``istar-grid ARGS``, and so on.
"""
