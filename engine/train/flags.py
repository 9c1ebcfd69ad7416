"""`python -m engine train`'s flags (add_args) and their checks: check_args before anything loads, naming the
flag; check_model_args once the target is (its layers and vocabulary). The run itself: cli.py; the trainers: main.py
(DFlash) and variants.py (Domino, DSpark, Draft-OPD)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..errors import InputError
from ..models.embedded import SMOLLM2_MASK_ID as MASK_ID
from ..options import EMBEDDED_NAME
from ..paths import REPO as ROOT

VARIANTS = ("dflash", "domino", "dspark", "opd")


def add_args(p: argparse.ArgumentParser) -> None:
    """All `train` flags, in three help groups: data, drafter, training."""
    _add_data_args(p.add_argument_group("data"))
    _add_drafter_args(p.add_argument_group("drafter"))
    _add_training_args(p.add_argument_group("training"))
    _add_variant_args(p.add_argument_group("variants (engine/train/variants.py)"))


def _add_data_args(g: argparse._ArgumentGroup) -> None:
    g.add_argument("--target", default=EMBEDDED_NAME, help=f"{EMBEDDED_NAME} (default) or a local HF folder")
    g.add_argument("--data", default=str(ROOT / "out" / "train-data"), help="response shards and train state")
    g.add_argument("--more-data", type=lambda v: [f for f in v.split(",") if f], default=[],
                   help="comma list of further --data folders whose responses are trained on too (read only: "
                        "generation, eval shards, caches and state stay in --data)")
    g.add_argument("--prompts", type=int, default=6000, help="training prompts (engine/train/prompts.py)")
    g.add_argument("--prompt-seed", type=int, default=0)
    g.add_argument("--families", default="", help="comma list of prompt families (engine/train/prompts.py CATEGORIES; "
                   "default all), e.g. code,complete for a code drafter")
    g.add_argument("--eval-prompts", type=int, default=30, help="held-out prompts for tau_sim (per set with --eval-sets)")
    g.add_argument("--eval-sets", default="", help="comma list of the benchmark's sets (humaneval,mtbench,math,chat): "
                   "tau_sim on the prompts `bench --n N` runs instead of our held-out ones")
    g.add_argument("--eval-only", action="store_true",
                   help="print tau_sim per eval set for the drafter (--init-from) and stop: no training, no export")
    g.add_argument("--max-new-tokens", type=int, default=256)
    g.add_argument("--gen-batch", type=int, default=64)
    g.add_argument("--shard-size", type=int, default=0, help="prompts per shard (default: --gen-batch)")
    g.add_argument("--sample-frac", type=float, default=0.5, help="share of responses sampled (rest greedy)")
    g.add_argument("--temperature", type=float, default=0.7)
    g.add_argument("--gen-minutes", type=float, default=0, help="stop generating after this long (0: no cap)")
    g.add_argument("--max-len", type=int, default=640, help="truncate training sequences to this many tokens")


def _add_drafter_args(g: argparse._ArgumentGroup) -> None:
    g.add_argument("--out", default="", help="export folder (default assets/drafters/smollm2-135m-dflash-b<B>)")
    g.add_argument("--layers", type=int, default=2)
    g.add_argument("--block-size", type=int, default=None,
                   help="default: the --init-from drafter's for --variant opd/domino/dspark, else 16")
    g.add_argument("--target-layers", default="", help="comma list of target layer ids (default: dflash's)")
    g.add_argument("--mask-id", type=int, default=MASK_ID)
    g.add_argument("--init", choices=["target", "norm", "random"], default="target",
                   help="norm: final norm from the target; target: also its top layers, and fc passes the "
                        "deepest feature layer through; random: neither")
    g.add_argument("--init-from", default="", help="start from this drafter folder (overrides --init), e.g. to train "
                   "the committed drafter on; its target layers are kept; a larger --layers adds identity layers on top")
    g.add_argument("--max-shard-mb", type=float, default=15.0,
                   help="largest weights file in MiB (save_pretrained shards above it; the device returns <= 16 MiB files)")


def _add_training_args(g: argparse._ArgumentGroup) -> None:
    g.add_argument("--anchors", type=int, default=64, help="random anchors per sequence per step (max 512)")
    g.add_argument("--batch", type=int, default=16, help="sequences per step")
    g.add_argument("--lr", type=float, default=6e-4)
    g.add_argument("--warmup", type=float, default=0.04)
    g.add_argument("--gamma", type=float, default=0, help="loss decay over depth (default 7 for B=16, 4 for B=8)")
    g.add_argument("--loss-depth", type=int, default=0,
                   help="train on block positions k <= this only (0: all); the head's cost shrinks with it")
    g.add_argument("--head-topk", type=int, default=0,
                   help="k > 0: the cheap loss: KL to the target's top-k only, softmax over those k + --negatives "
                        "tokens instead of the 49152-wide head (1.6x the steps per minute on a CPU)")
    g.add_argument("--negatives", type=int, default=1024, help="shared negative tokens per step for --head-topk")
    g.add_argument("--kl", type=float, default=1.0, help="1: KL to the target distribution, 0: CE on data tokens")
    g.add_argument("--steps", type=int, default=0, help="optimizer steps (0: schedule by --max-minutes)")
    g.add_argument("--max-minutes", type=float, default=60, help="wall-clock budget for the whole command")
    g.add_argument("--save-every", type=float, default=60, help="seconds between exports and state saves")
    g.add_argument("--eval-every", type=float, default=600, help="seconds between tau_sim evaluations")
    g.add_argument("--log-every", type=int, default=20, help="steps between stats syncs")
    g.add_argument("--chunk", type=int, default=0, help="rows per head chunk (default 4096 on CUDA, 512 on CPU)")
    g.add_argument("--cache-gb", type=float, default=0, help="feature cache size (default 40 CUDA / 4 CPU)")
    g.add_argument("--device", default="auto")
    g.add_argument("--target-dtype", choices=["auto", "bf16", "fp32"], default="auto",
                   help="auto: bf16 on CUDA, fp32 on CPU")
    g.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--fresh", action="store_true", help="ignore a saved train state")
    g.add_argument("--gen-only", action="store_true")
    g.add_argument("--no-gen", action="store_true", help="train on the shards already in --data")


def _add_variant_args(g: argparse._ArgumentGroup) -> None:
    g.add_argument("--variant", choices=VARIANTS, default="dflash",
                   help="dflash: the drafter itself; domino / dspark: only a new sequential head on the frozen "
                        "--init-from backbone (its features cached once); opd: Draft-OPD, on-policy post-training of "
                        "the --init-from DFlash drafter")
    g.add_argument("--head-rank", type=int, default=64, help="the head's rank (Domino emb_dim, DSpark markov_rank)")
    g.add_argument("--gru-hidden", type=int, default=256, help="Domino's GRU state size")
    g.add_argument("--pure-prefix", type=int, default=1, help="Domino: the first N drafts stay the backbone's own")
    g.add_argument("--head-depth", type=int, default=8, help="block positions k <= this are cached and trained (heads)")
    g.add_argument("--head-anchors", type=int, default=0, help="anchors per sequence in the head's feature cache "
                   "(0: every response position)")
    g.add_argument("--backbone-from", default="", help="domino / dspark: the frozen backbone is this DFlash "
                   "drafter's (e.g. a Draft-OPD one), the head --init-from's: a trained head moves to a new backbone "
                   "and is trained on there")
    g.add_argument("--conf-weight", type=float, default=1.0, help="DSpark: weight of the confidence head's loss")
    g.add_argument("--head-policy-floor", type=float, default=1.0, help="heads: the loss weight of block positions "
                   "past the head's first miss (teacher-forced), which a greedy round never reaches (1: all alike)")
    g.add_argument("--opd-gamma", type=float, default=0.8, help="Draft-OPD: weight gamma^(o-1) of a rejected draft "
                   "at in-block offset o")
    g.add_argument("--opd-reject-weight", type=float, default=1.0, help="Draft-OPD: weight of the rejected stream")
    g.add_argument("--opd-anchors", choices=("random", "rollout"), default="random", help="Draft-OPD: the blocks "
                   "trained on: random anchors (a step costs about a DFlash step) or the rollout's own blocks (a "
                   "draft at every anchor first)")
    g.add_argument("--opd-suffix", type=int, default=0, help="Draft-OPD: also score the N rejected drafts after the "
                   "first one (its post-rejection suffix), each under the target's distribution after the drafter's "
                   "own prefix: one more target pass per sequence and step (0: the first rejected draft only, the "
                   "reference's default)")
    g.add_argument("--opd-reanchor", type=float, default=0.0, help="Draft-OPD: weight of the ReAnchor replay stream "
                   "(0: off): the shifted blocks ReAnchor would draft from the target's states on a rejected suffix, "
                   "trained to continue where they attach; one more target pass per sequence and step")
    g.add_argument("--opd-reanchor-offsets", type=int, default=4, help="Draft-OPD: shifted offsets d = 1..N of each "
                   "rejected suffix the replay stream re-anchors at")
    g.add_argument("--opd-reanchor-depth", type=int, default=4, help="Draft-OPD: block positions j = 1..N of each "
                   "shifted block the replay stream trains")


def data_settings(args: argparse.Namespace) -> dict:
    """What the response shards depend on, recorded in --data's meta.json (the target's identity: model_id)."""
    return dict(prompt_seed=args.prompt_seed, families=args.families, max_new_tokens=args.max_new_tokens,
                target=model_id(args.target))


def model_id(name: str) -> str:
    """A model's identity across runs: "embedded", a local folder's resolved path, else the name (a hub id)."""
    if not name or name == EMBEDDED_NAME:
        return name
    p = Path(name).expanduser()
    return str(p.resolve()) if p.exists() else name


def target_layer_ids(args: argparse.Namespace) -> list[int] | None:
    """--target-layers as a list of ints (None: not given)."""
    if not args.target_layers:
        return None
    try:
        return [int(x) for x in args.target_layers.split(",")]
    except ValueError:
        raise InputError("target_layers", f"{args.target_layers!r} is not a comma list of layer ids") from None


def check_model_args(args: argparse.Namespace, config) -> None:
    """The flags that depend on the target (its `config`), once it is loaded: layer ids and the mask token."""
    n, vocab = config.num_hidden_layers, config.vocab_size
    bad = [i for i in target_layer_ids(args) or [] if not 0 <= i < n]
    if bad:   # a negative id would wrap around, and the engine refuses the exported drafter
        raise InputError("target_layers", f"{bad[0]} is not a layer of the target (0 to {n - 1})")
    if not 0 <= args.mask_id < vocab:
        raise InputError("mask_id", f"{args.mask_id} is not a token id of the target (0 to {vocab - 1})")
    if args.head_topk > vocab:
        raise InputError("head_topk", f"{args.head_topk} is more than the vocabulary ({vocab})")


FIXED_B = ("opd", "domino", "dspark")   # variants that train the --init-from drafter at its own block size


def init_block_size(args: argparse.Namespace) -> int | None:
    """The --init-from drafter's block size (None: no drafter folder, or no block_size in its config)."""
    cfg = Path(args.init_from) / "config.json" if args.init_from else None
    return json.loads(cfg.read_text()).get("block_size") if cfg and cfg.is_file() else None


def check_args(args: argparse.Namespace) -> None:
    """Bad settings fail before the target loads, naming the option. Fills in --block-size when not given."""
    drafter_b = init_block_size(args) if args.variant in FIXED_B else None
    if args.block_size is None:
        args.block_size = drafter_b or 16
    for name, low in (("layers", 1), ("block_size", 2), ("anchors", 1), ("batch", 1), ("prompts", 1),
                      ("max_new_tokens", 1), ("gen_batch", 1), ("max_len", 2), ("head_topk", 0), ("negatives", 0),
                      ("loss_depth", 0), ("eval_prompts", 0), ("steps", 0), ("opd_suffix", 0), ("opd_reanchor", 0),
                      ("opd_reanchor_offsets", 1), ("opd_reanchor_depth", 1)):
        if getattr(args, name) < low:
            raise InputError(name, f"{getattr(args, name)} is below {low}")
    if drafter_b and args.block_size != drafter_b:   # dflash may retrain at another B; these keep the drafter's
        raise InputError("block_size", f"{args.block_size} is not the block size {drafter_b} of the --init-from "
                         f"drafter, which --variant {args.variant} trains as it is: drop --block-size")
    if args.threads < 0:
        raise InputError("threads", f"{args.threads} is below 0 (0: torch's default)")
    if args.mask_id < 0:
        raise InputError("mask_id", f"{args.mask_id} is below 0")
    target_layer_ids(args)   # a malformed list fails here; its range once the target is loaded
    if args.opd_reanchor and args.opd_reanchor_depth >= args.block_size:
        raise InputError("opd_reanchor_depth", f"{args.opd_reanchor_depth} leaves no room in a block of {args.block_size}")
    if args.opd_reanchor and args.variant != "opd":
        raise InputError("opd_reanchor", f"the replay stream is Draft-OPD's (--variant opd), not --variant {args.variant}")
    if not 0 <= args.kl <= 1:
        raise InputError("kl", f"{args.kl} is not in [0, 1]")
    if not 0 <= args.head_policy_floor <= 1:
        raise InputError("head_policy_floor", f"{args.head_policy_floor} is not in [0, 1]")
    if not 0 <= args.sample_frac <= 1:
        raise InputError("sample_frac", f"{args.sample_frac} is not in [0, 1]")
    if args.loss_depth >= args.block_size:
        raise InputError("loss_depth", f"{args.loss_depth} leaves no room in a block of {args.block_size}")
    if args.head_topk and args.kl != 1:
        raise InputError("head_topk", "distils the target's distribution: it needs --kl 1")
    if args.head_topk and args.variant == "opd":  # its rejected stream needs p_T of the drafter's own token
        raise InputError("head_topk", "--variant opd scores the drafter's rejected token under the target's whole "
                         "distribution: drop --head-topk")
    if args.eval_sets:
        from ..sets import SETS

        bad = [x for x in args.eval_sets.split(",") if x not in SETS]
        if bad:
            raise InputError("eval_sets", f"unknown set {bad[0]!r} (one of {', '.join(SETS)})")
    target = model_id(args.target)
    for folder in args.more_data:
        if not any(Path(folder).glob("train-*.jsonl")) or not (Path(folder) / "meta.json").is_file():
            raise InputError("more_data", f"{folder} holds no train-*.jsonl shards with their meta.json")
        had_target = json.loads((Path(folder) / "meta.json").read_text()).get("target", target)
        if had_target != target:
            raise InputError("more_data", f"{folder} holds another target's responses ({had_target})")
        if Path(folder).resolve() == Path(args.data).resolve():
            raise InputError("more_data", f"{folder} is --data itself (its responses would count twice)")
    if args.families:
        from .prompts import CATEGORIES

        bad = [x for x in args.families.split(",") if x not in CATEGORIES]
        if bad:
            raise InputError("families", f"unknown family {bad[0]!r} (one of {', '.join(CATEGORIES)})")
    meta = Path(args.data) / "meta.json"
    had = json.loads(meta.read_text()) if meta.is_file() else {}
    had_target = had.get("target", target)
    if had_target != target:   # even with --no-gen: a drafter for one target on another's responses, and its
        # tau_sim replayed on them, measure nothing
        raise InputError("data", f"{args.data} holds the responses of target {had_target}, not {target}: "
                         "use another --data folder")
    if not args.no_gen and not args.eval_only and meta.is_file() and any(Path(args.data).glob("train-*.jsonl")):
        # resuming generation with other prompts or lengths would mix two data sets silently
        want = data_settings(args)
        for k in want:
            if k in had and had[k] != want[k]:
                raise InputError("data", f"{args.data} holds responses made with {k.replace('_', '-')} {had[k]!r}, "
                                 f"not {want[k]!r}: use another --data folder, or --no-gen to train on them")
    if args.variant != "dflash" and not args.init_from:
        raise InputError("init_from", f"--variant {args.variant} starts from a trained DFlash drafter: give its folder")
    for name, low in (("head_rank", 1), ("gru_hidden", 1), ("pure_prefix", 0), ("head_depth", 1), ("head_anchors", 0)):
        if getattr(args, name) < low:
            raise InputError(name, f"{getattr(args, name)} is below {low}")
    if args.variant in ("domino", "dspark") and args.head_depth >= args.block_size:
        raise InputError("head_depth", f"{args.head_depth} leaves no room in a block of {args.block_size}")
    if args.init_from and not (Path(args.init_from) / "config.json").is_file():
        raise InputError("init_from", f"{args.init_from} is not a drafter folder (no config.json)")
    if args.backbone_from:
        if args.variant not in ("domino", "dspark"):
            raise InputError("backbone_from", f"only a head variant (domino, dspark) has a frozen backbone, not "
                             f"--variant {args.variant}")
        if not (Path(args.backbone_from) / "config.json").is_file():
            raise InputError("backbone_from", f"{args.backbone_from} is not a drafter folder (no config.json)")
