"""python -m engine.bench: the same as `python -m engine bench`."""
import sys

from ..__main__ import main

sys.exit(main(["bench", *sys.argv[1:]]))
