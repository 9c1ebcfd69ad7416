"""`python -m engine train`: the flags (flags.py) and the run, with the trainer of --variant
(main.Trainer for DFlash itself, variants.py for Domino, DSpark and Draft-OPD)."""
from __future__ import annotations

import argparse

from . import flags
from . import main as M
from .data import log


def add_train_args(subparsers, help: str | None = None) -> argparse.ArgumentParser:
    """The `train` subcommand with its flags (`help`: what the parent's --help lists it as)."""
    p = subparsers.add_parser("train", help=help,
                              description=M.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    flags.add_args(p)
    p.set_defaults(func=main)
    return p


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m engine train", description=M.__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    flags.add_args(p)
    return p


def trainer_class(variant: str):
    from .variants import HeadTrainer, OPDTrainer

    return {"dflash": M.Trainer, "domino": HeadTrainer, "dspark": HeadTrainer, "opd": OPDTrainer}[variant]


def main(args: argparse.Namespace) -> int:
    """`python -m engine train`: 0 when done (or after --gen-only / --eval-only), 1 with no training data."""
    flags.check_args(args)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Writing model shards" on every export would flood the log
    t = trainer_class(args.variant)(args)
    t.read_state()
    t.load_target()
    t.generate()
    if args.gen_only:
        log(f"gen done in {t.timings['gen_s']}s")
        return 0
    if not t.load_data():
        log("no training data in " + str(t.data))
        return 1
    t.build_drafter()
    t.setup()
    t.load_state()
    if args.eval_only:
        t.eval_only()
        return 0
    t.fit()
    return 0

