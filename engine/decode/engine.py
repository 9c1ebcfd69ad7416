"""The Engine: loaded models behind a few methods (prefill, draft, verify, compact, pick), and runs.

Everything that calls a model is here; a round (round.py) and the loop (run.py) only call these.
"""
from __future__ import annotations

import time

import numpy
import torch

from ..errors import InputError
from ..models import Models, chat_ids, stop_token_ids
from ..models import onednn, rotary
from ..models.features import context_features
from ..models.rotary import tabled
from ..models.onednn import linears
from ..models.variants import draft_value
from ..trie import Trie, build_trie
from .config import DecodeConfig
from .drafting import Drafts, block_offset, propose
from .kv import ContextKV
from .laws import target_law
from .run import Run


def ids_tensor(x: list, device) -> torch.Tensor:
    """A (nested) list of ints as an int64 tensor on `device`. Through numpy: torch.tensor infers the
    type of every element (10 us for 32 ints, about 3x numpy's), and a small model's round makes several."""
    t = torch.from_numpy(numpy.asarray(x, dtype=numpy.int64))
    return t if getattr(device, "type", device) == "cpu" else t.to(device)


class Engine:
    """Loaded models plus the model calls. Stateless between runs (per-run state is in Run and
    round.State), so one engine serves many runs, one after another or from several threads."""

    def __init__(self, models: Models, draft_head_dtype: torch.dtype | str | None = "auto"):
        """`draft_head_dtype`: the dtype of the drafter's vocabulary projection, its costliest matmul.
        "auto": bf16 (3-7x cheaper on the CPU; drafts need not be exact) unless the user asked for a
        drafter dtype (models.draft_dtype, --draft-dtype), which the projection then keeps too, so
        `--draft-dtype float32` drafts what the reference loops draft; None: the drafter's own dtype."""
        self.models = models
        self.cuda = models.device.type == "cuda"   # sync_time waits for the device
        self.stop_ids = stop_token_ids(models.tokenizer, models.target.config)
        d, t = models.drafter, models.target
        self.layer_ids = list(d.target_layer_ids) if d is not None else []
        # a path's length, anchor included: a drafter block of B inputs drafts B - offset tokens
        self.offset = block_offset(d) if d is not None else 1
        self.block_size = d.block_size + 1 - self.offset if d is not None else None
        self.draft_dtype = self.draft_head_dtype = None
        onednn.install(t, d)   # large fp32 CPU linears through oneDNN inside the model calls (engine/models/onednn.py)
        if d is not None:
            self.mask_id = int(d.mask_token_id)
            self.embed_scale = float(draft_value(d.config, "input_embedding_scale", 1.0))
            # The drafter may run in a cheaper dtype than the target (drafts are only proposals;
            # verification stays exact): it then reads bf16 copies of the target's table and head.
            self.draft_dtype = next(d.parameters()).dtype
            head = t.lm_head if hasattr(t, "lm_head") else t.get_output_embeddings()
            emb = t.get_input_embeddings().weight
            self.draft_embed = emb if emb.dtype == self.draft_dtype else emb.detach().to(self.draft_dtype)
            if draft_head_dtype == "auto":
                draft_head_dtype = torch.bfloat16 if getattr(models, "draft_dtype", "auto") in ("auto", None, "") \
                    else None
            hd = self.draft_head_dtype = draft_head_dtype or self.draft_dtype
            if head.weight.dtype == hd and hd == self.draft_dtype:
                # a plain Linear without hooks as its own matmul: nn.Module's call costs a small model's round
                # a few us; anything else (tied, quantised, offloaded heads) is called as the module
                plain = type(head) is torch.nn.Linear and not (head._forward_hooks or head._forward_pre_hooks)
                plain = plain and "_onednn" not in head.__dict__   # a routed head is called as the module
                self.draft_head = (lambda h: torch.nn.functional.linear(h, head.weight, head.bias)) if plain else head
            else:
                w = head.weight.detach().to(hd)
                # 2-D input: a 3-D bf16 input with batch 1 copies the whole weight per call (bmm path)
                self.draft_head = lambda h: torch.nn.functional.linear(
                    h.reshape(-1, h.shape[-1]).to(hd), w).float().view(*h.shape[:-1], -1)
            if hasattr(d, "use_target_embeddings"):  # a head that reads the target's token embeddings
                d.use_target_embeddings(self.draft_embed)
        self.window, self.all_sliding = sliding_window(t.config)
        rotary.install(t, d)   # cos and sin looked up inside the model calls below (engine/models/rotary.py)

    # -- text -----------------------------------------------------------------------------------
    def encode_prompt(self, prompt: str) -> list[int]:
        if not isinstance(prompt, str) or not prompt.strip():
            raise InputError("prompt", "is empty")
        return chat_ids(self.models.tokenizer, prompt)

    def decode(self, ids: list[int]) -> str:
        return self.models.tokenizer.decode(ids, skip_special_tokens=True)

    # -- runs (engine/decode/run.py owns them: checks, the loop, the trace) ------------------------
    def run(self, prompt_ids: list[int], cfg: DecodeConfig | None = None, budget=None) -> Run:
        """A Run over the prompt (Run(self, ...)): iterate it for round records."""
        return Run(self, prompt_ids, cfg, budget)

    def generate(self, prompt: str, cfg: DecodeConfig | None = None, budget=None) -> dict:
        """Run to the end; the trace dict."""
        run = Run(self, self.encode_prompt(prompt), cfg, budget)
        run.finish()
        return run.trace()

    # -- the model calls ------------------------------------------------------------------------
    def sync_time(self) -> float:
        if self.cuda:
            torch.cuda.synchronize(self.models.device)
        return time.perf_counter()

    def new_cache(self):
        from transformers import DynamicCache
        # Sliding-window layers get a full cache too: compact() keeps nodes by absolute position,
        # and verify() cuts their mask to the window instead.
        return DynamicCache() if self.window else DynamicCache(config=self.models.target.config)

    def target_forward(self, ids, positions, mask, cache, upto: int = 0, last_only: bool = False):
        """(fp32 logits, drafter features); every position is below `upto` (rotary.tabled; 0: the rotary modules
        compute cos and sin themselves); `last_only`: the last position's logits alone (a prefill reads no other: a
        2,000-token prompt over a 152 k vocabulary would make 1.2 GB of them)."""
        keep = {"logits_to_keep": 1} if last_only else {}
        with context_features(self.models.target, self.layer_ids) as features, tabled(upto), linears():
            out = self.models.target(input_ids=ids, position_ids=positions, attention_mask=mask,
                                     past_key_values=cache, use_cache=True, **keep)
        return out.logits.float(), features(out.logits)

    def prefill(self, prompt_ids: list[int]):
        """(the last position's logits [1, V], features, cache) of the prompt: the cache then holds
        positions < len(prompt)."""
        dev = self.models.device
        cache = self.new_cache()
        ids = ids_tensor(list(prompt_ids), dev)[None]
        logits, feats = self.target_forward(ids, position_ids(0, len(prompt_ids), dev), None, cache, len(prompt_ids),
                                            last_only=True)
        return logits[0], feats[0], cache

    def verify(self, trie: Trie, s: int, cache, masks: "TreeMask | None" = None):
        """One target forward over all trie nodes: each sees the cached prefix and its ancestors.
        `masks`: the run's mask buffer (a round writes its tree block into it; None: a fresh mask)."""
        dev, dt = self.models.device, self.models.dtype
        n = len(trie)
        ids = ids_tensor([trie.tokens], dev)
        chain = trie.depths[-1] == n - 1   # depths never exceed ids: only a chain reaches n - 1
        positions = position_ids(s, s + n, dev) if chain else (ids_tensor(trie.depths, dev) + s)[None]
        mask = None
        if n > 1 and masks is not None and not self.window:
            mask = masks.chain(s, n, dt, dev) if chain else masks.mask(trie.parents, s, dt, dev, trie.sizes)
        elif n > 1:
            visible = torch.cat([torch.ones(n, s, dtype=torch.bool, device=dev),
                                 tree_mask(trie.parents, max(trie.depths), dev)], 1)
            mask = additive(visible, dt)
            if self.window:   # sliding layers see keys at most window - 1 positions back
                q = positions[0]
                k = torch.cat([torch.arange(s, device=dev), q])
                near = additive(visible & (q[:, None] - k[None, :] < self.window), dt)
                mask = near if self.all_sliding else {"full_attention": mask, "sliding_attention": near}
        logits, feats = self.target_forward(ids, positions, mask, cache, s + n)   # depth < n: position < s + n
        return logits[0], feats[0]

    @staticmethod
    def compact(cache, s: int, chain: list[int]) -> None:
        """Keep positions < s and the accepted nodes (in order): the cache now ends at s+a+1. Only the round's
        own tail moves (the accepted nodes' rows copied down to s, s+1, ..., as DDTree compacts): the prefix is
        never copied, so a round's compaction costs its nodes, not the context."""
        keep = s + len(chain)
        if chain != list(range(len(chain))):   # a chain's accepted nodes are in place already
            idx = ids_tensor(chain, cache.layers[0].keys.device)
            for layer in cache.layers:
                for t in (layer.keys, layer.values):
                    t[..., s:keep, :] = t[..., s:, :].index_select(-2, idx)   # a copy first: no overlap
        for layer in cache.layers:
            layer.keys, layer.values = layer.keys[..., :keep, :], layer.values[..., :keep, :]

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
        # few host ops: on a small model each costs as much as the arithmetic it launches
        hidden = torch.cat([ctx_new, R]) if r else ctx_new
        hidden = (hidden if hidden.dtype == self.draft_dtype else hidden.to(self.draft_dtype))[None]
        hidden = hidden.expand(n, -1, -1).contiguous() if n > 1 else hidden
        block = ids_tensor([[a] + [self.mask_id] * (L - 1) for a in anchors], dev)
        noise = torch.nn.functional.embedding(block if n_in == L else block[:, :n_in], self.draft_embed)
        noise = noise * self.embed_scale if self.embed_scale != 1.0 else noise
        if n == 1 and not r:  # the baseline alone: context and block positions run on
            pos = position_ids(s - c, s + n_in, dev)
        else:
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
        with tabled(s + n + n_in), linears():   # row d's block ends at s + d + n_in - 1
            out = m.drafter(target_hidden=hidden, noise_embedding=noise, position_ids=pos,
                            attention_mask=mask, past_key_values=ctx, use_cache=True)[:, self.offset:]
            out = out.contiguous()  # a strided bf16 input sends the vocab projection down a 60x slower path
            p = propose(m.drafter, out, block[:, 0], self.draft_head, T, gen, argmax)
        # each row as a list, its anchor first: list work, where writing the tokens into `block` was a tensor op
        tokens = [[a, *row] for a, row in zip(anchors, p.tokens.tolist())]
        backbone = None
        if p.backbone is not None:
            backbone = [[a, *row] for a, row in zip(anchors, p.backbone.tolist())]
        return Drafts(tokens, p.logits, p.probs, p.confidence, backbone, p.argmax)

    @staticmethod
    def new_context(cache) -> ContextKV:
        """A run's drafter context K/V (round.State keeps it), beside its target `cache`."""
        return ContextKV()

    @staticmethod
    def new_masks() -> "TreeMask":
        """A run's verify mask buffer (round.State keeps it)."""
        return TreeMask()

    def pick(self, logits: torch.Tensor, T: float, gen) -> int:
        """The target's token: argmax at T=0, else one sample at temperature T."""
        if T == 0:
            return int(logits.argmax())
        return int(torch.multinomial(target_law(logits, T), 1, generator=gen))

    # -- profiling hook (the cost budget's hardware profile) ---------------------------------------
    @torch.inference_mode()
    def time_calls(self, draft_sizes, verify_sizes, context: int = 256, reps: int = 3, progress=None) -> dict:
        """Milliseconds of one draft call per batch size n (the baseline plus n-1 shifted blocks) and
        of one verify call per trie size N, after one `context`-token prefill: the best of `reps` after
        a warm-up call per size (the least disturbed by other load). A tree mask costs what a
        chain's does, so a chain of N nodes stands for any trie of N nodes. `progress(done, total)`,
        when given, is called after each size (total: all the sizes)."""
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

        ctx, gen = self.new_context(cache), torch.Generator(device=dev).manual_seed(0)
        self.draft(ctx, feats[: P - 4], feats[:0], [1], P - 4, B, 0.0, gen, True)  # fill ctx

        def draft(n: int) -> None:
            R = feats[-4:].repeat(-(-n // 4), 1)[: n - 1]  # retained rows for n-1 blocks
            self.draft(ctx, feats[-4:], R, [1] * n, P, B, 0.0, gen, True)
            ctx.crop(P - 4)  # keep the stored context at its starting length

        steps = [(verify, n) for n in verify_sizes] + [(draft, n) for n in draft_sizes]
        ms = []
        for done, (call, n) in enumerate(steps, 1):
            ms.append(timed(lambda: call(n)))
            if progress is not None:
                progress(done, len(steps))
        return {"context": P, "device": str(dev), "verify_ms": ms[:len(verify_sizes)],
                "draft_ms": ms[len(verify_sizes):]}


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


# Positions 0, 1, 2, ... per device, shared by every run as dflash_generate shares one arange: a round's
# position ids are a view of it (torch.arange and its [None] were two ops a model call).
_POSITIONS: dict[torch.device, torch.Tensor] = {}


def position_ids(a: int, b: int, device) -> torch.Tensor:
    """[[a, a+1, ..., b-1]] (int64, shape (1, b - a)): a view of the shared buffer, never to be written."""
    buf = _POSITIONS.get(device)
    if buf is None or buf.shape[1] < b:
        with torch.inference_mode(False):   # a plain tensor: usable outside inference mode too
            buf = torch.arange(max(b, 4096, 2 * (0 if buf is None else buf.shape[1])), device=device)[None]
        _POSITIONS[device] = buf
    return buf.narrow(1, a, b - a)


def tree_visibility(parents: list[int], sizes: list[int] | None = None) -> numpy.ndarray:
    """(n, n) bool on the host: node i sees node j iff j is i or one of its ancestors. `sizes`: the subtree sizes of
    a trie numbered in depth-first preorder (Trie.sizes), where node j's descendants are the next sizes[j] - 1 nodes:
    node i then sees j iff j <= i < j + sizes[j]. numpy: a few array ops (preorder) or a row per node, each ~6x
    cheaper than torch's."""
    n = len(parents)
    if sizes is not None:
        j = numpy.arange(n)
        return (j[None, :] <= j[:, None]) & (j[:, None] < (j + numpy.asarray(sizes))[None, :])
    vis = numpy.zeros((n, n), dtype=bool)
    for i, p in enumerate(parents):   # node i sees what its parent sees, and itself (parents precede children)
        if p >= 0:
            vis[i, : p + 1] = vis[p, : p + 1]
        vis[i, i] = True
    return vis


MASK_ALIGN = 16   # elements: a mask view's start and row stride (CUDA's memory-efficient attention loads the
                  # mask in 16-byte vectors and faults, "misaligned address", on a view starting between them)


def _aligned(n: int) -> int:
    return -(-n // MASK_ALIGN) * MASK_ALIGN


# A chain's mask planes, per (dtype, device): never written once built, so every run shares them (building them
# took 0.1-0.3 ms a run on this CPU, a point of a short run on tiny models). A larger need replaces the entry;
# runs holding the older planes keep them.
_CHAIN_PLANES: dict[tuple, tuple[int, torch.Tensor]] = {}


class TreeMask:
    """A run's additive verify mask, kept between rounds as DDTree keeps one: zero (visible) over the
    committed prefix; a round writes only its tree block (columns s..s+n) from each node's ancestors,
    listed incrementally (a node's are its parent's and itself), and clears the block before it. The
    buffer grows (doubling) when a round needs more rows or columns. Every view it returns starts at
    a multiple of MASK_ALIGN elements and has rows MASK_ALIGN-aligned apart."""

    def __init__(self):
        self.buf: torch.Tensor | None = None
        self.last: tuple[int, int] | None = None     # (s, n) of the block written last

    @staticmethod
    def chain(s: int, n: int, dtype: torch.dtype, device) -> torch.Tensor:
        """A chain's mask: node i sees the prefix and nodes 0..i at any s. Plane r of the shared buffer
        holds K + r zero columns and then the chain's block (upper triangle hidden), so columns K+r-s .. K+r+n-1
        of its first n rows are the mask: a view, no op on its values (a round's mask was a dozen small ops,
        each costing on a small model what its arithmetic does). r = (s - K) mod MASK_ALIGN makes the view's
        first column K+r-s a multiple of MASK_ALIGN, for any s."""
        key = (dtype, torch.device(device))
        K, buf = _CHAIN_PLANES.get(key, (0, None))
        if buf is None or buf.shape[1] < n or K < s:
            rows = max(n, 32 if buf is None else buf.shape[1])
            K = K if K >= s else _aligned(max(s, 512, 2 * K))   # grows only when short
            buf = torch.zeros(MASK_ALIGN, rows, _aligned(K + MASK_ALIGN + rows), dtype=dtype, device=device)
            for r in range(MASK_ALIGN):
                buf[r, :, K + r: K + r + rows].fill_(torch.finfo(dtype).min).triu_(1)
            _CHAIN_PLANES[key] = (K, buf)
        r = (s - K) % MASK_ALIGN
        # buf[r, :n, K + r - s: K + r + n][None, None] as one op (indexing it was four on the host)
        rows, cols = buf.shape[1:]
        return buf.as_strided((1, 1, n, s + n), (n * cols, n * cols, cols, 1),
                              buf.storage_offset() + r * rows * cols + K + r - s)

    def mask(self, parents: list[int], s: int, dtype: torch.dtype, device,
             sizes: list[int] | None = None) -> torch.Tensor:
        """`sizes`: the subtree sizes of a trie numbered in depth-first preorder (Trie.sizes), where node j's
        descendants are the next sizes[j] - 1 nodes: node i then sees j iff j <= i < j + sizes[j]."""
        n = len(parents)
        if parents == list(range(-1, n - 1)):
            return self.chain(s, n, dtype, device)
        buf = self.buf
        if buf is None or buf.dtype != dtype or buf.device != torch.device(device) or \
                buf.shape[2] < n or buf.shape[3] < s + n:
            rows, cols = (32, 512) if buf is None else buf.shape[2:]   # a new dtype or device keeps the size
            rows = rows if rows >= n else max(n, 2 * rows)
            cols = cols if cols >= s + n else _aligned(max(s + n, 2 * cols))
            buf = self.buf = torch.zeros(1, 1, rows, cols, dtype=dtype, device=device)
        elif self.last is not None:
            ls, ln = self.last
            buf[0, 0, :ln, ls: ls + ln] = 0
        block = buf[0, 0, :n, s: s + n]
        block.fill_(torch.finfo(dtype).min)
        block.masked_fill_(torch.from_numpy(tree_visibility(parents, sizes)).to(device), 0)
        self.last = (s, n)
        return buf[:, :, :n, : s + n]
