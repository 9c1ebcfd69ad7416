"""python -m engine.train: the same as `python -m engine train`."""
import sys

from ..decode.interrupt import catch_ctrl_c
from ..errors import Parser, run_command
from .cli import add_train_args

parser = Parser(prog="python -m engine")
add_train_args(parser.add_subparsers(dest="command", required=True))
args = parser.parse_args(["train", *sys.argv[1:]])
catch_ctrl_c()
sys.exit(run_command(args))
