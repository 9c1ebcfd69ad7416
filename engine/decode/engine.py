"""The Engine: loaded models behind a few methods (prefill, draft, verify, compact, pick), and runs.

Everything that calls a model is here; a round (round.py) and the loop (run.py) only call these.
"""
from __future__ import annotations

import time

import torch

from ..errors import InputError
from ..models import Models, chat_ids, stop_token_ids
from ..models.features import context_features
from ..trie import Trie, build_trie
from .config import DecodeConfig, auto_fields, validate
from .drafting import Drafts, block_offset, propose
from .kv import ContextKV
from .laws import target_law
from .run import Run


def _draft_value(config, name, default=None):
    return (getattr(config, "dflash_config", None) or {}).get(name, getattr(config, name, default))


class Engine:
    """Loaded models plus the model calls. Stateless between runs (per-run state is in Run and
    round.State), so one engine serves many runs, one after another or from several threads."""

    def __init__(self, models: Models, draft_head_dtype: torch.dtype | None = torch.bfloat16):
        """`draft_head_dtype`: the dtype of the drafter's vocabulary projection, its costliest
        matmul (bf16: 3-7x cheaper on the CPU, and drafts need not be exact); None: the drafter's."""
        self.models = models
        self.stop_ids = stop_token_ids(models.tokenizer, models.target.config)
        d, t = models.drafter, models.target
        self.layer_ids = list(d.target_layer_ids) if d is not None else []
        # a path's length, anchor included: a drafter block of B inputs drafts B - offset tokens
        self.offset = block_offset(d) if d is not None else 1
        self.block_size = d.block_size + 1 - self.offset if d is not None else None
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
            if hasattr(d, "use_target_embeddings"):  # a head that reads the target's token embeddings
                d.use_target_embeddings(self.draft_embed)
        self.window, self.all_sliding = sliding_window(t.config)

    # -- text -----------------------------------------------------------------------------------
    def encode_prompt(self, prompt: str) -> list[int]:
        if not isinstance(prompt, str) or not prompt.strip():
            raise InputError("prompt", "is empty")
        return chat_ids(self.models.tokenizer, prompt)

    def decode(self, ids: list[int]) -> str:
        return self.models.tokenizer.decode(ids, skip_special_tokens=True)

    # -- runs -----------------------------------------------------------------------------------
    def run(self, prompt_ids: list[int], cfg: DecodeConfig | None = None, budget=None):
        """A Run over the prompt: iterate it for round records. `budget` (engine.decode.cost.Budget,
        fresh per run: budget_for(engine, cfg)) is needed when cfg asks for "auto" shifted blocks or nodes."""
        asked_block = (cfg or DecodeConfig()).block_size  # None: the drafter's own
        cfg = validate(cfg or DecodeConfig(), self.block_size)
        if not prompt_ids:
            raise InputError("prompt", "is empty")
        if budget is None and any(auto_fields(cfg)):
            raise InputError("max_shifted" if auto_fields(cfg)[0] else "max_trie_nodes",
                             "'auto' needs a budget: engine.decode.cost.budget_for(engine, cfg)")
        limit = getattr(self.models.target.config, "max_position_embeddings", None)
        if limit:
            if len(prompt_ids) >= limit:
                raise InputError("prompt", f"{len(prompt_ids)} tokens exceed the target's context "
                                 f"of {limit}")
            room = limit - len(prompt_ids) - 2 * (cfg.block_size if cfg.mode != "ar" else 1)
            if room < 1 and cfg.mode != "ar":  # no max_new_tokens would fit: the blocks are what is too big
                fit = (limit - len(prompt_ids) - cfg.max_new_tokens) // 2
                whose = "the drafter's block size" if asked_block is None else "block size"
                raise InputError("drafter" if asked_block is None else "block_size",
                                 f"{whose} {cfg.block_size} does not fit: a round needs 2 x {cfg.block_size} "
                                 f"positions after the prompt's {len(prompt_ids)} tokens, in a context of "
                                 f"{limit}" + (f" (at most {fit} leaves room for {cfg.max_new_tokens} new tokens)"
                                               if fit >= 2 else ""))
            if cfg.max_new_tokens > room:
                raise InputError("max_new_tokens", f"{cfg.max_new_tokens} does not fit: this "
                                 f"prompt leaves room for at most {max(room, 0)} in a context of {limit}")
        return Run(self, prompt_ids, cfg, budget)

    def generate(self, prompt: str, cfg: DecodeConfig | None = None, budget=None) -> dict:
        """Run to the end; the trace dict."""
        run = self.run(self.encode_prompt(prompt), cfg, budget)
        run.finish()
        return run.trace()

    # -- the model calls ------------------------------------------------------------------------
    def sync_time(self) -> float:
        if self.models.device.type == "cuda":
            torch.cuda.synchronize(self.models.device)
        return time.perf_counter()

    def new_cache(self):
        from transformers import DynamicCache
        # Sliding-window layers get a full cache too: compact() keeps nodes by absolute position,
        # and verify() cuts their mask to the window instead.
        return DynamicCache() if self.window else DynamicCache(config=self.models.target.config)

    def target_forward(self, ids, positions, mask, cache):
        with context_features(self.models.target, self.layer_ids) as features:
            out = self.models.target(input_ids=ids, position_ids=positions, attention_mask=mask,
                                     past_key_values=cache, use_cache=True)
        return out.logits.float(), features(out.logits)

    def prefill(self, prompt_ids: list[int]):
        """(logits, features, cache) of the prompt: the cache then holds positions < len(prompt)."""
        dev = self.models.device
        cache = self.new_cache()
        ids = torch.tensor([list(prompt_ids)], device=dev)
        logits, feats = self.target_forward(ids, torch.arange(len(prompt_ids), device=dev)[None], None, cache)
        return logits[0], feats[0], cache

    def verify(self, trie: Trie, s: int, cache):
        """One target forward over all trie nodes: each sees the cached prefix and its ancestors."""
        dev, dt = self.models.device, self.models.dtype
        n = len(trie)
        ids = torch.tensor([trie.tokens], device=dev)
        depths = torch.tensor(trie.depths, device=dev)
        mask = None
        if n > 1:
            visible = torch.cat([torch.ones(n, s, dtype=torch.bool, device=dev),
                                 tree_mask(trie.parents, max(trie.depths), dev)], 1)
            mask = additive(visible, dt)
            if self.window:   # sliding layers see keys at most window - 1 positions back
                q = s + depths
                k = torch.cat([torch.arange(s, device=dev), q])
                near = additive(visible & (q[:, None] - k[None, :] < self.window), dt)
                mask = near if self.all_sliding else {"full_attention": mask, "sliding_attention": near}
        logits, feats = self.target_forward(ids, (s + depths)[None], mask, cache)
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

    def draft(self, ctx: ContextKV, ctx_new, R, anchors: list[int], s: int, L: int, T: float,
              gen, argmax: bool) -> Drafts:
        """One drafter forward for the baseline (row 0) and shifted blocks g(d) (row d).

        Row d's context is the cached F[<s-c], the new committed features F[s-c..s-1] and R[0..d-1];
        its input block [a_d, MASK...] (L - 1 + offset slots) sits at positions s+d, s+d+1, ...; the
        states predicting positions 1..L-1 go to the drafter's own token rule (drafting.propose).
        """
        m = self.models
        dev = m.device
        n, c, r = len(anchors), ctx_new.shape[0], R.shape[0]
        n_in = L - 1 + self.offset
        hidden = torch.cat([ctx_new[None].expand(n, -1, -1), R[None].expand(n, -1, -1)], 1)
        hidden = hidden.to(self.draft_dtype)
        block = torch.full((n, L), self.mask_id, device=dev)
        block[:, 0] = torch.tensor(anchors, device=dev)
        noise = torch.nn.functional.embedding(block[:, :n_in], self.draft_embed)
        noise = noise * self.embed_scale if self.embed_scale != 1.0 else noise
        d = torch.arange(n, device=dev)[:, None]
        pos = torch.cat([torch.arange(s - c, s + r, device=dev)[None].expand(n, -1),
                         s + d + torch.arange(n_in, device=dev)[None]], 1)
        mask = None
        if r:  # row d sees only R[0..d-1]
            cached = len(ctx)
            vis = torch.ones(n, 1, n_in, cached + c + r + n_in, dtype=torch.bool, device=dev)
            vis[:, 0, :, cached + c: cached + c + r] = (torch.arange(r, device=dev)[None] < d)[:, None]
            mask = vis
        ctx.keep = c
        out = m.drafter(target_hidden=hidden, noise_embedding=noise, position_ids=pos,
                        attention_mask=mask, past_key_values=ctx, use_cache=True)[:, self.offset:]
        out = out.contiguous()  # a strided bf16 input sends the vocab projection down a 60x slower path
        p = propose(m.drafter, out, block[:, 0], self.draft_head, T, gen, argmax)
        block[:, 1:] = p.tokens
        backbone = None
        if p.backbone is not None:
            backbone = torch.cat([block[:, :1], p.backbone], 1).tolist()
        return Drafts(block.tolist(), p.logits, p.probs, p.confidence, backbone)

    def pick(self, logits: torch.Tensor, T: float, gen) -> int:
        """The target's token: argmax at T=0, else one sample at temperature T."""
        if T == 0:
            return int(logits.argmax())
        return int(torch.multinomial(target_law(logits, T), 1, generator=gen))

    # -- profiling hook (the cost budget's hardware profile) ---------------------------------------
    @torch.inference_mode()
    def time_calls(self, draft_sizes, verify_sizes, context: int = 256, reps: int = 3) -> dict:
        """Milliseconds of one draft call per batch size n (the baseline plus n-1 shifted blocks) and
        of one verify call per trie size N, after a `context`-token prefill: the best of `reps` after
        a warm-up call per size (the least disturbed by other load). A tree mask costs what a
        chain's does, so a chain of N nodes stands for any trie of N nodes."""
        m = self.models
        dev, B = m.device, self.block_size
        vocab = m.target.get_input_embeddings().weight.shape[0]
        limit = getattr(m.target.config, "max_position_embeddings", 4096) or 4096
        P = max(8, min(context, limit - max(max(verify_sizes), max(draft_sizes) + B) - 8))
        prompt = ((torch.arange(P) * 7919 + 13) % vocab).tolist()

        def timed(fn) -> float:
            fn()
            ts = []
            for _ in range(reps):
                t0 = self.sync_time()
                fn()
                ts.append((self.sync_time() - t0) * 1e3)
            return min(ts)

        _, feats, cache = self.prefill(prompt)

        def verify(n: int) -> None:
            self.verify(build_trie([[t % vocab for t in range(n)]]), P, cache)
            self.compact(cache, P, [])  # drop the verified nodes again

        ctx, gen = ContextKV(), torch.Generator(device=dev).manual_seed(0)
        self.draft(ctx, feats[: P - 4], feats[:0], [1], P - 4, B, 0.0, gen, True)  # fill ctx

        def draft(n: int) -> None:
            R = feats[-4:].repeat(-(-n // 4), 1)[: n - 1]  # retained rows for n-1 blocks
            self.draft(ctx, feats[-4:], R, [1] * n, P, B, 0.0, gen, True)
            ctx.crop(P - 4)  # keep the stored context at its starting length

        return {"context": P, "device": str(dev),
                "verify_ms": [timed(lambda: verify(n)) for n in verify_sizes],
                "draft_ms": [timed(lambda: draft(n)) for n in draft_sizes]}


def additive(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(1, 1, n, k) additive attention mask from an (n, k) bool: 0 where visible, dtype's min elsewhere."""
    mask = torch.zeros(1, 1, *visible.shape, dtype=dtype, device=visible.device)
    return mask.masked_fill_(~visible[None, None], torch.finfo(dtype).min)


def sliding_window(config) -> tuple[int | None, bool]:
    """(window, every layer slides) of a target with sliding-window attention layers, else (None, False).
    Other layer kinds (chunked, linear, recurrent) cannot take a tree mask over a compacted cache: refused."""
    text = config.get_text_config(decoder=True)
    types = getattr(text, "layer_types", None) or [
        "sliding_attention" if getattr(text, "sliding_window", None) else
        "chunked_attention" if getattr(text, "attention_chunk_size", None) else "full_attention"]
    other = sorted(set(types) - {"full_attention", "sliding_attention"})
    if other:
        raise InputError("target", f"attention layers of kind {', '.join(other)} are not supported "
                         "(full and sliding-window attention are)")
    if "sliding_attention" not in types:
        return None, False
    return int(text.sliding_window), all(x == "sliding_attention" for x in types)


def tree_mask(parents: list[int], depth: int, device=None) -> torch.Tensor:
    """(N, N) bool on `device`: node i sees node j iff j is i or one of its ancestors. One step up
    the tree per pass (`depth` = the deepest node's depth), so the host does O(depth) small ops."""
    n = len(parents)
    up = torch.tensor([max(p, 0) for p in parents], device=device)  # the root is its own parent
    rows = torch.arange(n, device=device)
    mask = torch.zeros(n, n, dtype=torch.bool, device=device)
    hop = rows
    for _ in range(depth + 1):
        mask[rows, hop] = True
        hop = up[hop]
    return mask
