"""``python -m istar_plugin.cli ARGS``: the same as ``istar-run ARGS``."""
import sys

from .run import main

if __name__ == "__main__":
    sys.exit(main())
