"""python -m engine.train: the same as `python -m engine train`."""
import sys

from ..__main__ import main

sys.exit(main(["train", *sys.argv[1:]]))
