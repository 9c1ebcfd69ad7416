"""The decoding loop: target-only (ar), DFlash and ReAnchor rounds, one JSON record per round.

A round (ALGORITHM.md): draft the baseline and every shifted block in ONE drafter forward, attach
and merge into a trie (pure code in attach.py / trie.py), verify the trie in ONE target forward
with tree attention, accept, compact the target cache, retain the rejected suffix's features.
The two model calls are `_draft` and `_verify`; everything else is bookkeeping.
"""
from __future__ import annotations

import random
import threading
import time
from dataclasses import asdict, dataclass

import torch

from .attach import MODES, RULES, assemble
from .errors import InputError
from .models import Models
from .trie import accept, build_trie, retained_path, tree_mask

MAX_NEW_TOKENS = 16384


@dataclass
class DecodeConfig:
    mode: str = "reanchor"
    rule: str = "earliest"
    temperature: float = 0.0
    seed: int = 0
    max_new_tokens: int = 128
    max_shifted: int | str | None = None   # cap on shifted blocks per round; "auto": cost model
    max_trie_nodes: int | None = None      # cap on verified nodes per round
    argmax_drafts: bool = False            # at T>0 draft by argmax instead of sampling
    ignore_eos: bool = False               # run to max_new_tokens (fixed-length benchmarks)
    block_size: int | None = None          # default: the drafter's trained block size


def validate(cfg: DecodeConfig, models: Models) -> DecodeConfig:
    """Check every field; raise InputError naming the first bad one."""
    if cfg.mode not in MODES:
        raise InputError("mode", f"unknown mode {cfg.mode!r} (one of {', '.join(MODES)})")
    if cfg.rule not in RULES:
        raise InputError("rule", f"unknown rule {cfg.rule!r} (one of {', '.join(RULES)})")
    try:
        t = float(cfg.temperature)
    except (TypeError, ValueError):
        raise InputError("temperature", f"{cfg.temperature!r} is not a number")
    if not t >= 0 or t == float("inf"):
        raise InputError("temperature", f"must be a finite number >= 0, got {cfg.temperature!r}")
    if isinstance(cfg.seed, bool) or not isinstance(cfg.seed, int):
        try:
            if float(cfg.seed) != int(float(cfg.seed)):
                raise ValueError
            cfg.seed = int(float(cfg.seed))
        except (TypeError, ValueError, OverflowError):
            raise InputError("seed", f"{cfg.seed!r} is not an integer")
    n = cfg.max_new_tokens
    if isinstance(n, bool) or not isinstance(n, int):
        try:
            if float(n) != int(float(n)):
                raise ValueError
            n = int(float(n))
        except (TypeError, ValueError, OverflowError):
            raise InputError("max_new_tokens", f"{cfg.max_new_tokens!r} is not an integer")
    if n < 1:
        raise InputError("max_new_tokens", f"must be at least 1, got {n}")
    if n > MAX_NEW_TOKENS:
        raise InputError("max_new_tokens", f"{n} is absurd (at most {MAX_NEW_TOKENS})")
    if cfg.max_shifted not in (None, "auto") and (not isinstance(cfg.max_shifted, int)
                                                  or cfg.max_shifted < 0):
        raise InputError("max_shifted", f"must be an integer >= 0, 'auto' or unset, "
                         f"got {cfg.max_shifted!r}")
    if cfg.max_trie_nodes is not None and (not isinstance(cfg.max_trie_nodes, int)
                                           or cfg.max_trie_nodes < 1):
        raise InputError("max_trie_nodes", f"must be an integer >= 1, got {cfg.max_trie_nodes!r}")
    if cfg.mode != "ar":
        if models.drafter is None:
            raise InputError("drafter", f"mode {cfg.mode!r} needs a drafter")
        B = cfg.block_size or models.drafter.block_size
        if not isinstance(B, int) or B < 2:
            raise InputError("block_size", f"must be at least 2, got {B!r}")
    return DecodeConfig(**{**asdict(cfg), "temperature": t, "max_new_tokens": n})


def stop_token_ids(tokenizer, config) -> list[int]:
    """End-of-turn ids: the config's eos ids plus the chat template's end markers when present."""
    ids = set()
    for src in (config.eos_token_id, getattr(tokenizer, "eos_token_id", None)):
        ids.update(src if isinstance(src, (list, tuple)) else [src] if src is not None else [])
    vocab = tokenizer.get_vocab()
    ids.update(vocab[t] for t in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>") if t in vocab)
    ids.discard(vocab.get("<|im_start|>"))  # SmolLM2's GGUF names im_start as eos: it never ends a turn
    return sorted(ids)


class _ContextKV:
    """The drafter's context K/V (batch 1, positions < s), shared by every block of a batched call.

    DFlash layers call `update(k, v, layer)` with the new context and block K/V; we prepend the
    stored context (expanded over the batch) and keep the first `keep` new rows of batch row 0:
    the committed context features. Block K/V never persist (they depend on draft tokens).
    """

    def __init__(self):
        self.k: dict[int, torch.Tensor] = {}
        self.v: dict[int, torch.Tensor] = {}
        self.keep = 0

    def update(self, k: torch.Tensor, v: torch.Tensor, layer: int, *args, **kwargs):
        if layer in self.k:
            n = k.shape[0]
            k_all = torch.cat([self.k[layer].expand(n, -1, -1, -1), k], dim=2)
            v_all = torch.cat([self.v[layer].expand(n, -1, -1, -1), v], dim=2)
            self.k[layer] = k_all[:1, :, : self.k[layer].shape[2] + self.keep]
            self.v[layer] = v_all[:1, :, : self.v[layer].shape[2] + self.keep]
        else:
            k_all, v_all = k, v
            self.k[layer], self.v[layer] = k[:1, :, : self.keep], v[:1, :, : self.keep]
        return k_all, v_all


def _draft_value(config, name, default=None):
    return (getattr(config, "dflash_config", None) or {}).get(name, getattr(config, name, default))


class Run:
    """One generation: iterate to get round records as they are verified; `.result` at the end."""

    def __init__(self, engine: "Engine", prompt_ids: list[int], cfg: DecodeConfig):
        self.engine, self.prompt_ids, self.cfg = engine, list(prompt_ids), cfg
        self.rounds: list[dict] = []
        self.output_ids: list[int] = []
        self.result: dict | None = None
        self._stop = threading.Event()
        self._gen = self._loop()

    def __iter__(self):
        return self

    def __next__(self) -> dict:
        return next(self._gen)

    def stop(self) -> None:
        self._stop.set()

    def finish(self) -> dict:
        for _ in self:
            pass
        return self.result

    def trace(self) -> dict:
        from .trace import make_trace
        return make_trace(self)

    # -- the loop -----------------------------------------------------------------------------
    @torch.inference_mode()
    def _loop(self):
        eng, cfg = self.engine, self.cfg
        m = eng.models
        dev = m.device
        drafter = m.drafter if cfg.mode != "ar" else None
        B = (cfg.block_size or drafter.block_size) if drafter is not None else 1
        T = cfg.temperature
        gen = torch.Generator(device=dev).manual_seed(cfg.seed)
        rng = random.Random(cfg.seed)
        stops = set() if cfg.ignore_eos else set(eng.stop_ids)
        P = len(self.prompt_ids)
        max_len = P + cfg.max_new_tokens
        budget = None
        if cfg.max_shifted == "auto" and drafter is not None and cfg.mode != "dflash":
            budget = eng.budget()  # profiled once per engine, adapted per round

        t0 = eng.sync_time()
        cache = eng.new_cache()
        ids = torch.tensor([self.prompt_ids], device=dev)
        logits, feats = eng.target_forward(ids, torch.arange(P, device=dev)[None], None, cache)
        first = eng.pick(logits[0, -1], T, gen)
        x = self.prompt_ids + [first]
        self.output_ids = [first]
        ctx = _ContextKV()
        ctx_new = feats[0]                # features not yet in the drafter's context K/V
        R = feats[0, :0]                  # retained rejected-suffix features
        a_d: list[int] = []               # their anchors
        done = first in stops or cfg.max_new_tokens <= 1
        draft_calls = 0

        while not done and not self._stop.is_set():
            tr0 = eng.sync_time()
            s = len(x) - 1
            L = min(B, max_len - s)
            offsets = list(range(1, len(a_d) + 1)) if cfg.mode != "dflash" and L >= 2 else []
            k_cap, node_cap = budget.pick(len(offsets)) if budget else \
                (cfg.max_shifted, cfg.max_trie_nodes)
            if isinstance(k_cap, int):
                offsets = offsets[:k_cap]

            draft_ms = 0.0
            if L >= 2:
                anchors = [x[s]] + [a_d[d - 1] for d in offsets]
                blocks = eng.draft(ctx, ctx_new, R[: len(offsets)], anchors, s, L, T, gen,
                                   cfg.argmax_drafts)
                draft_calls += 1
                draft_ms = (eng.sync_time() - tr0) * 1e3
                baseline, shifted = blocks[0], {d: blocks[i] for i, d in enumerate(offsets, 1)}
            else:
                baseline, shifted = [x[s]], {}
            paths, info = assemble(baseline, shifted, cfg.mode, cfg.rule, rng)
            # never verify past max_new_tokens: depth k predicts position s+k+1
            depth_cap = max_len - s - 1
            path_tokens = [p.tokens[: depth_cap + 1] for p in paths]
            trie = build_trie(path_tokens, node_cap)

            tv0 = eng.sync_time()
            logits, feats = eng.verify(trie, s, cache)
            verify_ms = (eng.sync_time() - tv0) * 1e3
            top1 = logits.argmax(-1).tolist()
            sampled: dict[int, int] = {}

            def next_token(node: int) -> int:
                if node not in sampled:
                    sampled[node] = top1[node] if T == 0 else eng.pick(logits[node], T, gen)
                return sampled[node]

            chain, bonus = accept(trie, next_token)
            a = len(chain) - 1
            eng.compact(cache, s, chain)

            new = [trie.tokens[n] for n in chain[1:]] + [bonus]
            new = new[: max_len - len(x)]
            for i, tok in enumerate(new):
                if tok in stops:
                    new, done = new[: i + 1], True
                    break
            x += new
            self.output_ids += new
            done = done or len(x) >= max_len

            # retain: the first path through the accepted chain; its nodes past the chain
            pi = retained_path(trie, chain)
            rest = trie.path_nodes[pi][a + 1:]
            ctx_new = feats[chain]
            R = feats[rest]
            a_d = [next_token(n) for n in rest]  # the target's own token after each retained node

            rec = self._record(len(self.rounds), s, L, baseline, shifted, info, paths, trie, chain,
                               bonus, new, top1, len(rest), draft_ms, verify_ms,
                               (eng.sync_time() - tr0) * 1e3)
            self.rounds.append(rec)
            if budget:
                budget.observe(rec)
            yield rec

        wall = eng.sync_time() - t0
        n_new = len(self.output_ids)
        taus = [r["accepted"] + 1 for r in self.rounds]
        self.result = {
            "output_ids": self.output_ids,
            "text": eng.decode(self.output_ids),
            "stopped": self._stop.is_set(),
            "stats": {
                "tau": sum(taus) / len(taus) if taus else 0.0,
                "rounds": len(self.rounds), "new_tokens": n_new, "wall_s": wall,
                "tokens_per_s": n_new / wall if wall > 0 else 0.0,
                "target_calls": len(self.rounds) + 1, "draft_calls": draft_calls,
            },
        }

    def _record(self, i, s, L, baseline, shifted, info, paths, trie, chain, bonus, new, top1, m,
                draft_ms, verify_ms, round_ms) -> dict:
        return {
            "round": i, "anchor_pos": s, "anchor": baseline[0], "block_size": L,
            "baseline": baseline,
            "shifted": [{"d": d, "tokens": shifted[d], "sites": info[d]["sites"],
                         "chosen": info[d]["attached"][0] if info[d]["attached"] else None,
                         "attached": info[d]["attached"]} for d in sorted(shifted)],
            "paths": [{"source": p.source, "site": p.site, "tokens": p.tokens} for p in paths],
            "trie": {"tokens": trie.tokens, "parents": trie.parents, "depths": trie.depths,
                     "provenance": trie.provenance},
            "accepted_nodes": chain, "accepted": len(chain) - 1, "bonus": bonus,
            "new_tokens": new, "target_top1": top1, "retained": m,
            "draft_ms": round(draft_ms, 3), "verify_ms": round(verify_ms, 3),
            "round_ms": round(round_ms, 3),
        }


class Engine:
    """Loaded models plus the two model calls. Stateless between runs (per-run state is in Run),
    so one engine serves many runs, one after another or from several threads."""

    def __init__(self, models: Models, draft_head_dtype: torch.dtype | None = torch.bfloat16):
        """`draft_head_dtype`: the dtype of the drafter's vocabulary projection, its costliest
        matmul (bf16: 3-7x cheaper on the CPU, and drafts need not be exact); None: the drafter's."""
        self.models = models
        self.stop_ids = stop_token_ids(models.tokenizer, models.target.config)
        self._budget = None
        d, t = models.drafter, models.target
        self.layer_ids = list(d.target_layer_ids) if d is not None else []
        if d is not None:
            self.mask_id = int(d.mask_token_id)
            self.embed_scale = float(_draft_value(d.config, "input_embedding_scale", 1.0))
            # The drafter may run in a cheaper dtype than the target (drafts are only proposals;
            # verification stays exact): it then reads bf16 copies of the target's table and head.
            self.draft_dtype = next(d.parameters()).dtype
            head = t.lm_head if hasattr(t, "lm_head") else t.get_output_embeddings()
            emb = t.get_input_embeddings().weight
            self.draft_embed = emb if emb.dtype == self.draft_dtype else emb.detach().to(self.draft_dtype)
            hd = draft_head_dtype or self.draft_dtype
            if head.weight.dtype == hd and hd == self.draft_dtype:
                self.draft_head = head
            else:
                w = head.weight.detach().to(hd)
                # 2-D input: a 3-D bf16 input with batch 1 copies the whole weight per call (bmm path)
                self.draft_head = lambda h: torch.nn.functional.linear(
                    h.reshape(-1, h.shape[-1]).to(hd), w).float().view(*h.shape[:-1], -1)

    # -- text -----------------------------------------------------------------------------------
    def encode_prompt(self, prompt: str) -> list[int]:
        if not isinstance(prompt, str) or not prompt.strip():
            raise InputError("prompt", "is empty")
        tok = self.models.tokenizer
        if getattr(tok, "chat_template", None):
            ids = tok.apply_chat_template([{"role": "user", "content": prompt}],
                                          add_generation_prompt=True, tokenize=True)
            ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        else:
            ids = tok(prompt)["input_ids"]
        return list(ids)

    def decode(self, ids: list[int]) -> str:
        return self.models.tokenizer.decode(ids, skip_special_tokens=True)

    def run(self, prompt_ids: list[int], cfg: DecodeConfig | None = None) -> Run:
        cfg = validate(cfg or DecodeConfig(), self.models)
        if not prompt_ids:
            raise InputError("prompt", "is empty")
        limit = getattr(self.models.target.config, "max_position_embeddings", None)
        if limit:
            if len(prompt_ids) >= limit:
                raise InputError("prompt", f"{len(prompt_ids)} tokens exceed the target's context "
                                 f"of {limit}")
            B = cfg.block_size or (self.models.drafter.block_size if cfg.mode != "ar" else 1)
            room = limit - len(prompt_ids) - 2 * B
            if cfg.max_new_tokens > room:
                raise InputError("max_new_tokens", f"{cfg.max_new_tokens} does not fit: this "
                                 f"prompt leaves room for at most {max(room, 0)} in a context of {limit}")
        return Run(self, prompt_ids, cfg)

    def generate(self, prompt: str, cfg: DecodeConfig | None = None) -> dict:
        run = self.run(self.encode_prompt(prompt), cfg)
        run.finish()
        return run.trace()

    def budget(self):
        if self._budget is None:
            from .cost import Budget
            self._budget = Budget.profile(self)
        return self._budget.fresh()  # shared hardware profile, per-run acceptance estimates

    # -- the two model calls -----------------------------------------------------------------
    def sync_time(self) -> float:
        if self.models.device.type == "cuda":
            torch.cuda.synchronize(self.models.device)
        return time.perf_counter()

    def new_cache(self):
        from transformers import DynamicCache
        return DynamicCache(config=self.models.target.config)

    def target_forward(self, ids, positions, mask, cache):
        out = self.models.target(input_ids=ids, position_ids=positions, attention_mask=mask,
                                 past_key_values=cache, use_cache=True,
                                 output_hidden_states=bool(self.layer_ids))
        feats = torch.cat([out.hidden_states[l + 1] for l in self.layer_ids], -1) \
            if self.layer_ids else out.logits[..., :0]
        return out.logits.float(), feats

    def verify(self, trie, s: int, cache):
        """One target forward over all trie nodes: each sees the cached prefix and its ancestors."""
        dev, dt = self.models.device, self.models.dtype
        n = len(trie)
        ids = torch.tensor([trie.tokens], device=dev)
        pos = (s + torch.tensor(trie.depths, device=dev))[None]
        if n == 1:
            mask = None
        else:
            visible = torch.cat([torch.ones(n, s, dtype=torch.bool), tree_mask(trie.parents)], 1)
            mask = torch.zeros(1, 1, n, s + n, dtype=dt)
            mask.masked_fill_(~visible[None, None], torch.finfo(dt).min)
            mask = mask.to(dev)
        logits, feats = self.target_forward(ids, pos, mask, cache)
        return logits[0], feats[0]

    @staticmethod
    def compact(cache, s: int, chain: list[int]) -> None:
        """Keep positions < s and the accepted nodes (in order): the cache now ends at s+a+1."""
        if chain == list(range(len(chain))):
            keep = s + len(chain)
            for layer in cache.layers:
                layer.keys, layer.values = layer.keys[..., :keep, :], layer.values[..., :keep, :]
            return
        idx = torch.tensor(list(range(s)) + [s + n for n in chain], device=cache.layers[0].keys.device)
        for layer in cache.layers:
            layer.keys = layer.keys.index_select(-2, idx)
            layer.values = layer.values.index_select(-2, idx)

    def draft(self, ctx: _ContextKV, ctx_new, R, anchors: list[int], s: int, L: int, T: float,
              gen, argmax: bool) -> list[list[int]]:
        """One drafter forward for the baseline (row 0) and shifted blocks g(d) (row d).

        Row d's context is the cached F[<s-c], the new committed features F[s-c..s-1] and R[0..d-1];
        its block [a_d, MASK...] sits at positions s+d .. s+d+L-1.
        """
        m = self.models
        dev = m.device
        n, c, r = len(anchors), ctx_new.shape[0], R.shape[0]
        hidden = torch.cat([ctx_new[None].expand(n, -1, -1), R[None].expand(n, -1, -1)], 1)
        hidden = hidden.to(self.draft_dtype)
        block = torch.full((n, L), self.mask_id, device=dev)
        block[:, 0] = torch.tensor(anchors, device=dev)
        noise = torch.nn.functional.embedding(block, self.draft_embed)
        noise = noise * self.embed_scale if self.embed_scale != 1.0 else noise
        d = torch.arange(n, device=dev)[:, None]
        pos = torch.cat([torch.arange(s - c, s + r, device=dev)[None].expand(n, -1),
                         s + d + torch.arange(L, device=dev)[None]], 1)
        mask = None
        if r:  # row d sees only R[0..d-1]
            cached = ctx.k[0].shape[2] if 0 in ctx.k else 0
            vis = torch.ones(n, 1, L, cached + c + r + L, dtype=torch.bool, device=dev)
            vis[:, 0, :, cached + c: cached + c + r] = (torch.arange(r, device=dev)[None] < d)[:, None]
            mask = vis
        ctx.keep = c
        out = m.drafter(target_hidden=hidden, noise_embedding=noise, position_ids=pos,
                        attention_mask=mask, past_key_values=ctx, use_cache=True)[:, 1:]
        out = out.contiguous()  # a strided bf16 input sends the vocab projection down a 60x slower path
        if hasattr(m.drafter, "propose"):  # DFlash 2: candidate selector over the top-k
            toks = m.drafter.propose(out, block[:, 0], self.draft_head, 0.0 if argmax else T)[0]
        else:
            logits = m.drafter.compute_logits(out, self.draft_head).float()
            if T > 0 and not argmax:
                probs = torch.softmax(logits / T, -1)
                toks = torch.multinomial(probs.view(-1, probs.shape[-1]), 1, generator=gen).view(n, -1)
            else:
                toks = logits.argmax(-1)
        block[:, 1:] = toks
        return block.tolist()

    def pick(self, logits: torch.Tensor, T: float, gen) -> int:
        """The target's token: argmax at T=0, else one sample at temperature T."""
        if T == 0:
            return int(logits.argmax())
        probs = torch.softmax(logits.float() / T, -1)
        return int(torch.multinomial(probs, 1, generator=gen))
