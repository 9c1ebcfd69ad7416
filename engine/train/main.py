"""Train a DFlash drafter for the target, reproducibly: `python -m engine train` (or `python -m engine.train`).

One command, three resumable stages, run by the Trainer here (data: data.py; the recipe: recipe.py; loss: loss.py;
prompts: prompts.py; export: checkpoint.py; tau_sim: evaluation.py):
  1. gen    the target answers our own prompts (engine/train/prompts.py): batched, left padded, greedy and T=0.7
            sampled responses, saved as token-id JSONL shards under --data (finished shards are skipped).
  2. fit    the public DFlash recipe (docs/training.md): random anchors p inside each response; block
            [x_p, MASK...] at positions p..p+B-1 sees the target's context features at positions < p and its own
            block only. All blocks of a batch go through ONE drafter forward with a boolean attention mask over
            [context features, all blocks]. Loss through the frozen target head, weighted exp(-(k-1)/gamma):
            KL to the target's next-token distribution (--kl 1) and/or cross-entropy on the data tokens (--kl 0).
  3. export a bf16 `save_pretrained` folder (config.json, model.safetensors) + README.md model card +
            train_log.json, refreshed every --save-every seconds so a killed run still leaves a usable drafter.

The trainer reports tau_sim, greedy DFlash acceptance replayed teacher-forced on the target's own greedy
responses to held-out prompts (evaluation.py).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import InputError
from ..options import EMBEDDED_NAME
from ..paths import DRAFTERS
from .checkpoint import export, lineage_of, load_weights, model_card
from .data import generate_shards, load_shards, log
from .evaluation import eval_tau
from .flags import check_model_args, data_settings, model_id, target_layer_ids
from .loss import head_loss, negatives, sparse_head_loss
from .recipe import Features, default_gamma, draft_forward, init_from_target, lr_at, make_batch, make_drafter


@dataclass
class Running:
    """Training stats summed on the device between two --log-every syncs (no host sync per step)."""
    loss: torch.Tensor
    hits: torch.Tensor    # (B-1,) drafts equal to the target's argmax, by depth k
    count: torch.Tensor   # (B-1,) rows, by depth k
    n: int = 0            # steps summed
    last_print: float = 0.0


class Trainer:
    """One `python -m engine train` run, in the order `main` calls its steps: read_state, load_target, generate,
    load_data, build_drafter, setup, load_state, then eval_only or fit (which calls train_step, record, evaluate, save).

    The model (build_drafter), the optimizer (setup), the batch (next_batch), the loss (loss) and the step
    (train_step) are separate methods so that a variant can replace one of them alone."""

    def __init__(self, args: argparse.Namespace):
        from ..models import resolve_device

        self.args = args
        self.t_start = time.time()
        self.deadline = self.t_start + args.max_minutes * 60 if args.max_minutes > 0 else float("inf")
        self.timings: dict[str, float] = {}
        if args.threads:
            torch.set_num_threads(args.threads)
        self.dev = resolve_device(args.device)
        self.cuda = self.dev.type == "cuda"
        # bf16 everywhere it is fast: CUDA, and CPUs with AMX/avx512-bf16 (--target-dtype bf16; about 2x for generation)
        self.tdtype = {"auto": torch.bfloat16 if self.cuda else torch.float32, "bf16": torch.bfloat16,
                       "fp32": torch.float32}[args.target_dtype]
        torch.manual_seed(args.seed)
        self.B = args.block_size
        self.out = Path(args.out or DRAFTERS / f"smollm2-135m-dflash-b{self.B}")
        self.data = Path(args.data)
        self.data.mkdir(parents=True, exist_ok=True)

    # --- setup ---------------------------------------------------------------------------------------
    def load_target(self) -> None:
        from ..models import load_target

        a = self.args
        self.target, self.tok = load_target(a.target, self.dev, self.tdtype)
        self.target.requires_grad_(False)
        check_model_args(a, self.target.config)
        self.timings["load_target_s"] = round(time.time() - self.t_start, 1)
        log(f"target {a.target} on {self.dev} ({self.tdtype}) loaded in {self.timings['load_target_s']}s")

    def generate(self) -> None:
        """Stage 1: the target's responses to the eval prompts, then (unless --no-gen/--eval-only) to the
        training prompts, as resumable shards under --data."""
        from .prompts import build_prompts

        a, t0 = self.args, time.time()
        meta_path = self.data / "meta.json"
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
        shard = meta.get("shard_size") or a.shard_size or a.gen_batch  # shards must not move on resume
        making = not a.no_gen and not a.eval_only
        if making:
            meta.update(shard_size=shard, **data_settings(a))
            meta_path.write_text(json.dumps(meta))
        # the prompts the folder's responses answer (its meta.json), whatever --prompt-seed says under --no-gen:
        # the card names them, and the eval prompts are held out from them
        self.made = made = {**data_settings(a), **{k: meta[k] for k in data_settings(a) if k in meta}}
        families = made["families"].split(",") if made["families"] else None
        train_prompts = build_prompts(a.prompts, made["prompt_seed"], families=families)
        picked, self.eval_tag = self._eval_prompts(train_prompts, families)
        self.eval_set_of, eval_prompts = [name for name, _ in picked], [p for _, p in picked]
        self.target.eval()
        generate_shards(self.target, self.tok, eval_prompts, self.data, self.eval_tag,
                        shard_size=max(1, len(eval_prompts)), batch_size=a.gen_batch,
                        max_new_tokens=a.max_new_tokens, sample_frac=0.0, temperature=0.0, seed=a.seed,
                        deadline=float("inf"))
        if making:
            gen_deadline = min(self.deadline, t0 + a.gen_minutes * 60 if a.gen_minutes > 0 else float("inf"))
            generate_shards(self.target, self.tok, train_prompts, self.data, "train", shard_size=shard,
                            batch_size=a.gen_batch, max_new_tokens=a.max_new_tokens, sample_frac=a.sample_frac,
                            temperature=a.temperature, seed=a.seed, deadline=gen_deadline)
        self.timings["gen_s"] = round(time.time() - t0, 1)

    def _eval_prompts(self, train_prompts: list[str], families: list[str] | None) -> tuple[list[tuple[str, str]], str]:
        """(eval set name, prompt) pairs and the eval shards' tag."""
        a = self.args
        if a.eval_sets:  # the benchmark's own prompts (its sampling), so that tau_sim compares with `bench`
            from ..sets import load_set, sample_prompts

            sets = a.eval_sets.split(",")
            picked = [(name, p["prompt"]) for name in sets for p in sample_prompts(load_set(name), a.eval_prompts)]
            return picked, f"evalsets-{'_'.join(sets)}-n{a.eval_prompts}"
        from .prompts import heldout_prompts

        seed = self.made["prompt_seed"] + 10_000
        return [("heldout", p) for p in heldout_prompts(a.eval_prompts, train_prompts, seed=seed,
                                                        families=families)], "eval"

    def load_data(self) -> bool:
        """The shards as training sequences (prompt + response, truncated to --max-len, with at least two response
        tokens) and eval sequences; False when there is nothing to train on (and not --eval-only)."""
        a = self.args
        # --data first, then --more-data in order (the head-rows cache files follow that order)
        folders = [self.data] + [Path(f) for f in a.more_data]
        # --data's shards answer build_prompts(--prompts) in order ("i"): an earlier run's further prompts are left out
        recs = [r for d in folders for r in load_shards(d, "train") if len(r["response_ids"]) >= 2
                and (d != self.data or r["i"] < a.prompts)]
        eval_recs = load_shards(self.data, self.eval_tag)[:len(self.eval_set_of)]
        if not recs and not a.eval_only:
            return False
        seqs = [(r["prompt_ids"] + r["response_ids"])[:a.max_len] for r in recs]
        plens = [len(r["prompt_ids"]) for r in recs]
        keep = [i for i in range(len(seqs)) if len(seqs[i]) - plens[i] >= 2]
        self.seqs, self.plens = [seqs[i] for i in keep], [plens[i] for i in keep]
        self.greedy = [recs[i]["temperature"] == 0 for i in keep]
        self.eval_seqs = [((r["prompt_ids"] + r["response_ids"])[:a.max_len], len(r["prompt_ids"])) for r in eval_recs]
        n_tok = sum(len(s) - p for s, p in zip(self.seqs, self.plens))
        n_sampled, made = sum(1 for r in recs if r["temperature"] > 0), self.made
        others = [json.loads((f / "meta.json").read_text()) for f in folders[1:]]

        def prompt_set(m: dict) -> str:   # the prompts a folder's responses answer, as its meta.json records them
            return (f"build_prompts({a.prompts}, seed={m.get('prompt_seed')}"
                    + (f", families={m['families']}" if m.get("families") else "") + ")")
        self.data_info = {"sequences": len(self.seqs), "response_tokens": n_tok, "sampled": n_sampled,
                          "greedy": len(recs) - n_sampled, "eval_prompts": len(self.eval_seqs),
                          "prompt_set": "engine/train/prompts.py " + " + ".join(map(prompt_set, [made] + others)),
                          "max_new_tokens": made["max_new_tokens"], "temperature": a.temperature}
        log(f"data: {len(self.seqs)} sequences, {n_tok} response tokens ({n_sampled} sampled), "
            f"{len(self.eval_seqs)} eval")
        return True

    def build_drafter(self) -> None:
        """Stage 2: the drafter (from --init-from's weights, or --init from the target's), on the device, and the
        frozen target embeddings and head it uses."""
        a = self.args
        layer_ids = target_layer_ids(a)
        if a.init_from and layer_ids is None:  # the folder's, not the default for this many layers
            cfg = json.loads((Path(a.init_from) / "config.json").read_text())
            layer_ids = (cfg.get("dflash_config") or {}).get("target_layer_ids")
        self.drafter = make_drafter(self.target, num_layers=a.layers, block_size=self.B, mask_id=a.mask_id,
                                    target_layer_ids=layer_ids)
        self.lineage: list[dict] = []  # the earlier runs this one continues (read before --out may overwrite them)
        if a.init_from:
            grown = load_weights(self.drafter, Path(a.init_from))
            if grown:
                log(f"--init-from: layers {grown} added on top, starting as the identity")
            self.lineage = lineage_of(Path(a.init_from))
        elif a.init != "random":
            init_from_target(self.drafter, self.target, layers=a.init == "target")
        self.drafter.to(self.dev).train()
        self.W = self.target.get_output_embeddings().weight.detach()    # tied to embed_tokens for SmolLM2
        self.embed_w = self.target.get_input_embeddings().weight.detach()

    def setup(self) -> None:
        """The optimizer, the feature cache and the loss settings."""
        a = self.args
        # The drafter keeps fp32 master weights; with a bf16 target its matmuls run under bf16 autocast.
        self.amp = self.tdtype == torch.bfloat16
        self.opt = torch.optim.AdamW(self.drafter.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.0,
                                     **({"fused": True} if self.cuda else {}))
        self.feats = Features(self.target, self.drafter.target_layer_ids, a.cache_gb or (40 if self.cuda else 4),
                              topk=a.head_topk)
        self.gamma = a.gamma or default_gamma(self.B)
        self.chunk = a.chunk or (4096 if self.cuda else 512)
        self.n_anchors = min(512, a.anchors)
        n_params = sum(p.numel() for p in self.drafter.parameters())
        log(f"drafter: {a.layers} layers, {n_params / 1e6:.2f}M params, B={self.B}, target layers "
            f"{self.drafter.target_layer_ids}, init={a.init_from or a.init}, kl={a.kl}, gamma={self.gamma}")

    def read_state(self) -> None:
        """The train state saved under --data for this run (unless --fresh or --eval-only), read before anything
        costly: one that another run's origin saved fails here (resumable), not after the target and caches load."""
        a = self.args
        self.state_path = self.data / self.state_name()
        self.saved = None
        if self.state_path.exists() and not a.fresh and not a.eval_only:
            st = torch.load(self.state_path, map_location="cpu", weights_only=False)
            self.saved = st if self.resumable(st) else None

    def load_state(self) -> None:
        """A fresh run's counters and sampling RNG, or those of the train state read_state found."""
        a = self.args
        if not hasattr(self, "saved"):
            self.read_state()
        self.step, self.train_s, self.history, self.evals = 0, 0.0, [], []
        self.rng = random.Random(a.seed)
        self.order: list[int] = []
        st, self.saved = self.saved, None
        if st is not None:
            self.lineage = st.get("lineage", self.lineage)   # not --init-from's log, when that is --out's own
            self.drafter.load_state_dict(st["model"])
            self.opt.load_state_dict(st["opt"])
            self.step, self.train_s, self.history, self.evals = st["step"], st["train_s"], st["history"], st["evals"]
            self.rng.setstate(st["rng"])
            # the torch draws too (--head-topk's negatives, a head's rows): a resumed run draws what an
            # uninterrupted one would (states saved before they were: those runs go on from a fresh draw)
            if "torch_rng" in st:
                torch.set_rng_state(st["torch_rng"].cpu())
            for name, gen in self.generators().items():
                if name in st.get("generators", {}):
                    gen.set_state(st["generators"][name].cpu())
            self.order = [i for i in st["order"] if i < len(self.seqs)]
            log(f"resumed from {self.state_path} at step {self.step} ({self.train_s:.0f}s trained)")

    def origin(self) -> dict[str, str]:
        """What the run starts from: a saved state is resumed only by a run that starts from the same."""
        a = self.args
        return {"init_from": model_id(a.init_from), "backbone_from": model_id(a.backbone_from),
                "target": model_id(a.target)}

    def resumable(self, st: dict) -> bool:
        """Whether the saved state `st` is this run's to resume: True, or False to start afresh (--init-from is --out
        and its run finished: training on from that export), or an InputError (a run that started elsewhere)."""
        origin = self.origin()
        if st.get("final") and origin["init_from"] and origin["init_from"] == str(self.out.resolve()):
            log(f"{self.state_path.name}: the run that exported {self.out} finished; training on from that export")
            return False
        had = st.get("origin") or origin   # states saved before origins were: as before
        for k, v in origin.items():
            if had.get(k, v) != v:
                raise InputError(k, f"the train state {self.state_path} belongs to a run with --{k.replace('_', '-')} "
                                 f"{had[k] or '(none)'}, not {v or '(none)'}: add --fresh to start afresh (that state "
                                 "is then replaced), or use another --out")
        return True

    def generators(self) -> dict[str, torch.Generator]:
        """The run's own torch generators (beyond torch's global one), saved and restored with the train state."""
        return {}

    def state_name(self) -> str:
        """Per variant, block size and --out: two runs on one --data folder (two learning rates side by side)
        must neither overwrite nor resume each other's state."""
        out = hashlib.sha1(str(self.out.resolve()).encode()).hexdigest()[:8]
        return f"train_state-{self.args.variant}-b{self.B}-{out}.pt"

    def run_dtype(self) -> torch.dtype:
        return torch.bfloat16 if self.amp else torch.float32

    def autocast(self) -> torch.autocast:
        return torch.autocast(self.dev.type, dtype=torch.bfloat16, enabled=self.amp)

    def _to_dev(self, t: torch.Tensor) -> torch.Tensor:
        return t.pin_memory().to(self.dev, non_blocking=True) if self.cuda else t  # no host syncs

    # --- eval and export -----------------------------------------------------------------------------
    def evaluate(self) -> dict:
        t = time.time()
        r = eval_tau(self.drafter, self.feats, self.eval_seqs, W=self.W, embed_w=self.embed_w,
                     dtype=self.run_dtype(), autocast=self.autocast, chunk=self.chunk)
        r.update(step=self.step, seconds=round(time.time() - t, 1))
        self.evals.append(r)
        log(f"eval step {self.step}: tau_sim {r['tau_sim']} (mean accept over all anchors "
            f"{r['mean_accept_all_anchors']}, {r['rounds']} rounds, {r['seconds']}s)")
        return r

    def eval_only(self) -> None:
        """tau_sim per eval set, then stop: nothing is trained or exported."""
        for name in dict.fromkeys(self.eval_set_of):
            idx = [i for i, n in enumerate(self.eval_set_of[:len(self.eval_seqs)]) if n == name]
            r = eval_tau(self.drafter, self.feats, [self.eval_seqs[i] for i in idx], W=self.W, embed_w=self.embed_w,
                         dtype=self.run_dtype(), autocast=self.autocast, chunk=self.chunk, keys=[-1 - i for i in idx])
            log(f"eval {name}: tau_sim {r['tau_sim']} ({r['prompts']} prompts, {r['rounds']} rounds)")

    def card(self, hw: str, final: bool) -> str:
        """The model card (README.md) of the export as it stands."""
        a, di = self.args, self.data_info
        table = {"target": "SmolLM2-135M-Instruct (embedded GGUF, dequantised)", "hardware": hw,
                 "steps": self.step, "train wall time": f"{self.train_s / 60:.1f} min",
                 "total wall time": f"{(time.time() - self.t_start) / 60:.1f} min",
                 "data": f"{di['sequences']} target responses ({di['greedy']} greedy, "
                         f"{di['sampled']} sampled T={a.temperature}), {di['response_tokens']} tokens",
                 "loss": f"{'KL to target' if a.kl == 1 else 'CE on data' if a.kl == 0 else f'{a.kl} KL + CE'}"
                         + (f" (sparse: target top-{a.head_topk} + {a.negatives} negatives)" if a.head_topk else "")
                         + f", w_k = exp(-(k-1)/{self.gamma})" + (f", k <= {a.loss_depth}" if a.loss_depth else ""),
                 "optimizer": f"AdamW lr {a.lr}, {a.warmup:.0%} warmup, cosine, clip 1.0",
                 "batch": f"{a.batch} sequences x {self.n_anchors} anchors",
                 "init": f"weights of {a.init_from}" if a.init_from else a.init,
                 "final": str(final)}
        for j, run in enumerate(self.lineage):
            table[f"earlier run {j + 1}"] = (f"{run['steps']} steps, {(run['train_s'] or 0) / 60:.1f} min on "
                                            f"{run['hardware']}, {run['response_tokens']} tokens, tau_sim {run['tau_sim']}")
        return model_card({"name": f"smollm2-135m-dflash-b{self.B}" if a.target == EMBEDDED_NAME else self.out.name,
                           "layers": a.layers, "block_size": self.B, "mask_id": a.mask_id, "table": table,
                           "target_layer_ids": self.drafter.target_layer_ids,
                           "eval": self.evals[-1] if self.evals else None})

    def save(self, final: bool = False) -> float:
        """Export (weights, model card, train_log.json) and the resumable train state; returns the seconds taken."""
        a, t = self.args, time.time()
        n = torch.get_num_threads()
        hw = torch.cuda.get_device_name(self.dev) if self.cuda else f"CPU ({n} thread{'s' * (n != 1)})"
        card = self.card(hw, final)
        log_obj = {"args": vars(a) | {"func": None}, "lineage": self.lineage, "data": self.data_info,
                   "timings": self.timings, "steps": self.step, "train_s": round(self.train_s, 1),
                   "history": self.history, "evals": self.evals, "hardware": hw, "final": final}
        export(self.drafter, self.out, card, log_obj, int(a.max_shard_mb * 2**20))
        tmp = self.state_path.with_suffix(".tmp")
        torch.save({"model": self.drafter.state_dict(), "opt": self.opt.state_dict(), "step": self.step,
                    "train_s": self.train_s, "history": self.history, "evals": self.evals,
                    "rng": self.rng.getstate(), "order": self.order, "torch_rng": torch.get_rng_state(),
                    "generators": {k: g.get_state() for k, g in self.generators().items()},
                    "origin": self.origin(), "lineage": self.lineage, "final": final}, tmp)
        os.replace(tmp, self.state_path)
        return time.time() - t

    # --- 3. fit --------------------------------------------------------------------------------------
    def next_indices(self) -> list[int]:
        """The next --batch sequences of a shuffled pass (a new pass when too few are left)."""
        if len(self.order) < self.args.batch:
            perm = list(range(len(self.seqs)))
            self.rng.shuffle(perm)
            self.order += perm
        idx, self.order = self.order[:self.args.batch], self.order[self.args.batch:]
        return idx

    def next_batch(self) -> tuple[list[int], list[list[int]], dict]:
        """The next --batch sequences of a shuffled pass (a new pass when too few are left) and random anchors in
        their responses: (sequence indices, sequences, make_batch's tensors on the device)."""
        a = self.args
        idx = self.next_indices()
        bseqs = [self.seqs[i] for i in idx]
        anchors = [sorted(self.rng.sample(range(self.plens[i], len(self.seqs[i]) - 1),
                                          min(self.n_anchors, len(self.seqs[i]) - 1 - self.plens[i]))) for i in idx]
        batch = make_batch(bseqs, anchors, block_size=self.B, mask_id=a.mask_id, gamma=self.gamma, depth=a.loss_depth)
        for key in ("anchors", "block_ids", "position_ids", "drow", "trow", "labels", "weights", "k"):
            batch[key] = self._to_dev(batch[key])
        return idx, bseqs, batch

    def loss(self, f: torch.Tensor, tgt: list[torch.Tensor], batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """The drafter's forward over all blocks of the batch, then the loss through the frozen target head:
        (weighted loss, per-row hit = the draft's argmax is the target's)."""
        a = self.args
        with self.autocast():
            h = draft_forward(self.drafter, self.embed_w, f, batch, self.run_dtype())
        H = h.shape[-1]
        hd = h.reshape(-1, H)[batch["drow"]]
        if a.head_topk:
            ids, lg = (t.reshape(-1, a.head_topk)[batch["trow"]] for t in tgt)
            return sparse_head_loss(hd, ids, lg, batch["weights"], self.W,
                                    negatives(ids, self.W.shape[0], a.negatives), self.chunk)
        return head_loss(hd, tgt[0].reshape(-1, H)[batch["trow"]], batch["labels"], batch["weights"],
                         self.W, a.kl, self.chunk)

    def train_step(self) -> tuple[dict, torch.Tensor, torch.Tensor] | None:
        """One optimizer step on the next batch: (batch, loss, hits); None when bf16 autocast failed on this run's
        first step and the run goes on in fp32 (that batch is skipped)."""
        idx, bseqs, batch = self.next_batch()
        f, *tgt = self.feats.get(idx, bseqs, batch["T"])
        try:
            loss, hit = self.loss(f, tgt, batch)
            loss.backward()
        except RuntimeError as e:  # one shot on a lent GPU: rather fp32 than nothing if bf16 autocast breaks
            if not self.amp or self.step > self.step0 or "out of memory" in str(e):
                raise
            log(f"bf16 autocast failed ({str(e).splitlines()[0][:200]}); continuing in fp32")
            self.amp = False
            self.opt.zero_grad(set_to_none=True)
            return None
        torch.nn.utils.clip_grad_norm_(self.drafter.parameters(), 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.step += 1
        return batch, loss, hit

    def record(self, run: Running, batch: dict, loss: torch.Tensor, hit: torch.Tensor, progress: float, bar) -> None:
        """Sum the step's stats on the device; every --log-every steps, sync them into the history and the bar (and
        without a terminal, the log at most every 20 s)."""
        k = batch["k"] - 1
        run.loss += loss.detach()
        run.hits.index_add_(0, k, hit.float())  # not bincount: that syncs with the host to size its output
        run.count.index_add_(0, k, torch.ones_like(hit, dtype=torch.float))
        run.n += 1
        if self.step % self.args.log_every != 0:
            return
        acc = (run.hits / run.count.clamp_min(1)).tolist()  # the only host syncs of the loop
        rec = {"step": self.step, "t": round(self.train_s, 1), "lr": round(self.opt.param_groups[0]["lr"], 7),
               "loss": round(run.loss.item() / run.n, 4), "acc_by_k": [round(a, 4) for a in acc]}
        self.history.append(rec)
        bar.set_postfix(loss=rec["loss"], acc1=f"{acc[0]:.3f}", acc4=f"{acc[min(3, self.B - 2)]:.3f}",
                        acc_mean=f"{sum(acc) / len(acc):.3f}")
        run.loss.zero_(), run.hits.zero_(), run.count.zero_()
        run.n = 0
        if bar.disable and time.time() - run.last_print > 20:
            run.last_print = time.time()
            log(f"step {self.step} {progress:.0%} loss {rec['loss']} acc@k " + " ".join(f"{a:.2f}" for a in acc)
                + f" lr {rec['lr']:.2e}")

    def fit(self) -> None:
        """Stage 3: train until --steps or the deadline (keeping time for the final eval and export), with an eval
        every --eval-every and an export every --save-every seconds; then the final eval and export."""
        from tqdm import tqdm

        a = self.args
        ev0 = self.evaluate() if self.eval_seqs else None
        save_s = self.save()
        self.timings["first_eval_s"] = ev0["seconds"] if ev0 else 0.0
        # what the end needs: one more eval and export, with margin
        reserve = 5 + 1.5 * (self.timings["first_eval_s"] + save_s)
        train_start, train_s0, self.step0 = time.time(), self.train_s, self.step
        budget = max(1.0, self.deadline - reserve - train_start)
        log(f"training for {'%d steps' % a.steps if a.steps else '%.1f min' % (budget / 60)} "
            f"(reserve {reserve:.0f}s for the final eval and export)")
        last_save = last_eval = last_print = time.time()
        run = Running(torch.zeros((), device=self.dev), torch.zeros(self.B - 1, device=self.dev),
                      torch.zeros(self.B - 1, device=self.dev), last_print=last_print)
        bar = tqdm(total=a.steps or None, initial=self.step, disable=not sys.stderr.isatty(), dynamic_ncols=True)
        while True:
            now = time.time()
            self.train_s = train_s0 + now - train_start
            progress = self.step / a.steps if a.steps else self.train_s / (train_s0 + budget)
            if progress >= 1 or now >= self.deadline - reserve:
                break
            for g in self.opt.param_groups:
                g["lr"] = lr_at(progress, a.lr, a.warmup)
            done = self.train_step()
            if done is None:
                continue
            bar.update(1)
            self.record(run, *done, progress, bar)
            if self.eval_seqs and time.time() - last_eval > a.eval_every:
                self.evaluate()
                last_eval = time.time()
            if time.time() - last_save > a.save_every:
                self.save()
                last_save = time.time()
        bar.close()
        self.train_s = train_s0 + time.time() - train_start
        self.timings["train_s"] = round(time.time() - train_start, 1)
        if self.eval_seqs:
            self.evaluate()
        self.timings["total_s"] = round(time.time() - self.t_start, 1)
        self.save(final=True)
        log(f"done: {self.step} steps, {self.train_s / 60:.1f} min of training, total {self.timings['total_s']}s; "
            f"exported to {self.out}" + (f"; tau_sim {self.evals[-1]['tau_sim']}" if self.evals else ""))
