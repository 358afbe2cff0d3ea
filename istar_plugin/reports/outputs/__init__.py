"""Each table and figure ``istar-report``, ``istar-analyze`` and ``istar-embed`` write, a module per paper or job."""
