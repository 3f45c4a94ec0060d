"""`python -m kime.cli`: the same as the `kime` console script."""
import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
