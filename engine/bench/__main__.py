"""python -m engine.bench: the same as `python -m engine bench`."""
import sys

from ..decode.interrupt import catch_ctrl_c
from ..errors import Parser, run_command
from .main import add_bench_args
from .sweep import add_sweep_args

parser = Parser(prog="python -m engine")
add_sweep_args(add_bench_args(parser.add_subparsers(dest="command", required=True)))
args = parser.parse_args(["bench", *sys.argv[1:]])
catch_ctrl_c()
sys.exit(run_command(args))
