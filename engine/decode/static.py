"""The static-shape round: the Engine's model calls over preallocated buffers, so that a GPU can capture them.

On a GPU a small model's round is bound by launching kernels from Python, one layer at a time (docs/performance.md,
"On a GPU"): a CUDA graph replays a call's kernels without Python, but only for fixed shapes at fixed addresses.
StaticEngine is the Engine with every per-round model call made over such buffers:

    target K/V   one preallocated [1, kv_heads, cap, head_dim] pair per layer (cap = the run's context plus the
                 largest verify); a call writes its nodes at slots s..s+nb-1 (index_copy_ by a slot tensor) and
                 reads keys 0..span-1; compaction copies the accepted nodes' rows down, as the eager path does
    verify       nb = the node count rounded up to a power of two (1, 2, 4, ...): the trie's tokens, positions
                 and write slots in one int64 buffer, padded rows at position s that see the prefix and
                 themselves; the additive mask a static [1, 1, rows, cap] buffer: zero over the committed
                 prefix, the tree block written per round, hidden elsewhere
    draft        the drafter's context K/V preallocated likewise; a call pads its new context rows to the block
                 size (Cb), its batch of blocks to a power of two (nb, nb - 1 retained rows) and masks the padding
    capture      with capture=True (CUDA only) each (call, bucket) is captured once as a CUDA graph and replayed
                 (torch.cuda.CUDAGraph, one memory pool per engine); keys then span the whole buffer (cap), so the
                 shapes never change with s. Without capture (the CPU) the same calls run eagerly over the buffers,
                 keys spanning only what is used (s + nb), so that the CPU pays nothing for the padding of keys;
                 fixed_shapes=True runs them in the captured shapes, uncaptured (the tests' rehearsal of capture)

What stays on the host: the tries, masks' tree blocks, the drafter's token choice (engine/decode/drafting.py:
sampling with the run's generator, sequential heads), acceptance and the record. The prefill runs the eager
Engine's (exact, any length) and copies its K/V into the buffers; a draft whose new context is longer than a
block (the first, after the prefill) runs over the buffers uncaptured.

One engine serves several runs: each run holds a slot (its buffers and graphs) from its prefill until its cache
is collected; a second concurrent run takes another slot (made on demand, kept for reuse). Capture is opt-in: it
becomes the default on CUDA only once the device script (engine/gpu/static_check.py) has measured it.
"""
from __future__ import annotations

import threading
import weakref

import numpy
import torch

from ..errors import InputError
from ..models.features import context_features
from ..models.onednn import linears
from ..models.rotary import tabled
from ..options import MAX_TRIE_NODES
from .drafting import Drafts, propose
from .engine import Engine, _aligned, tree_visibility

MIN_ROWS = 32   # verify rows a slot's buffers start with (DEFAULT_TREE_NODES); they double when a round needs more


def bucket(n: int) -> int:
    """n rounded up to a power of two: the node and block counts a captured call is shaped for."""
    return 1 << max(n - 1, 0).bit_length()


class _TargetKV:
    """The target's K/V for Hugging Face's attention layers: `update` writes the call's rows at `write` (a slot
    tensor, part of a static buffer) and returns keys and values 0..span-1."""

    def __init__(self):
        self.k: list[torch.Tensor] = []
        self.v: list[torch.Tensor] = []
        self.write: torch.Tensor | None = None
        self.span = 0

    def update(self, k: torch.Tensor, v: torch.Tensor, layer: int, *args, **kwargs):
        K, V = self.k[layer], self.v[layer]
        K.index_copy_(2, self.write, k)
        V.index_copy_(2, self.write, v)
        return K[:, :, : self.span], V[:, :, : self.span]


class StaticContext:
    """The drafter's context K/V of one run, preallocated (ContextKV's contract: the first `cb` rows a call brings
    are the new committed context; retained rows and blocks never persist). `len`: the rows held."""

    def __init__(self, cap: int):
        self.cap = cap
        self.k: dict[int, torch.Tensor] = {}
        self.v: dict[int, torch.Tensor] = {}
        self.len = 0
        self.cb = 0                      # new context rows in the call under way (padding included)
        self.span = 0                    # context keys the call reads (stored rows, the new ones included)
        self.write: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.len

    def update(self, k: torch.Tensor, v: torch.Tensor, layer: int, *args, **kwargs):
        if layer not in self.k:
            shape = (1, k.shape[1], self.cap, k.shape[3])
            self.k[layer] = torch.zeros(shape, dtype=k.dtype, device=k.device)
            self.v[layer] = torch.zeros(shape, dtype=v.dtype, device=v.device)
        K, V, n, cb = self.k[layer], self.v[layer], k.shape[0], self.cb
        K.index_copy_(2, self.write, k[:1, :, :cb])
        V.index_copy_(2, self.write, v[:1, :, :cb])
        k_all = torch.cat([K[:, :, : self.span].expand(n, -1, -1, -1), k[:, :, cb:]], 2)
        v_all = torch.cat([V[:, :, : self.span].expand(n, -1, -1, -1), v[:, :, cb:]], 2)
        return k_all, v_all

    def crop(self, n: int) -> None:
        """Keep the first n context rows."""
        self.len = min(self.len, n)


class _Slot:
    """One run's buffers and captured graphs (reused by the next run once that run's cache is collected)."""

    def __init__(self, cap: int, ctx_cap: int):
        self.cap = cap
        self.kv = _TargetKV()
        self.ctx = StaticContext(ctx_cap)
        self.io: torch.Tensor | None = None      # [3, rows] int64: a verify's tokens, positions, write slots
        self.mask: torch.Tensor | None = None    # [1, 1, rows, cap] additive verify mask
        self.last: tuple[int, int] | None = None  # (s, nb) of the tree block written last
        self.seen = 0                            # mask columns < seen are the visible prefix
        self.draft_io: dict = {}                 # per (nb, n_in): the draft call's static inputs
        self.graphs: dict = {}
        self.tables: list = []                   # rotary tables a graph reads: kept alive


class Cache:
    """What a run's State holds as its target cache on a StaticEngine: its slot; `length` positions hold K/V."""

    def __init__(self, slot: _Slot, length: int):
        self.slot = slot
        self.length = length


class StaticEngine(Engine):
    """The Engine with static-shape model calls (this module's docstring); every mode, rule and drafter goes
    through them. `capture`: CUDA graphs per bucket (CUDA only; default off until measured on the device).
    `context`: the positions a run may reach (prompt plus new tokens; default the target's context, at most
    4,096); runs that need more are refused with the field to change. `fixed_shapes`: every call in the shapes
    a capture takes (keys over the whole buffer, drafts through their static buffers) without capturing: what the
    CPU can rehearse of capture."""

    def __init__(self, models, draft_head_dtype="auto", capture: bool = False, context: int | None = None,
                 fixed_shapes: bool = False):
        super().__init__(models, draft_head_dtype)
        if self.window:
            raise InputError("target", "the static path does not take sliding-window attention (use Engine)")
        if capture and models.device.type != "cuda":
            raise InputError("capture", f"CUDA graphs need a CUDA device, not {models.device.type}")
        limit = getattr(models.target.config, "max_position_embeddings", None) or 4096
        self.context = int(context or min(limit, 4096))
        self.capture = bool(capture)
        self.fixed = self.capture or bool(fixed_shapes)   # every call shaped as a capture takes it
        B = self.block_size or 1
        # a verify writes up to MAX_TRIE_NODES rows after s, a draft its padded new context after the stored rows
        self.cap = _aligned(self.context + MAX_TRIE_NODES + 1)
        self.ctx_cap = _aligned(self.context + 2 * B)
        self._slots: list[_Slot] = []
        self._lock = threading.Lock()
        self._pool = None
        self._cols: dict = {}

    # -- slots ------------------------------------------------------------------------------------
    def _take(self) -> _Slot:
        with self._lock:
            return self._slots.pop() if self._slots else _Slot(self.cap, self.ctx_cap)

    def _give(self, slot: _Slot) -> None:
        with self._lock:
            self._slots.append(slot)

    # -- the model calls ---------------------------------------------------------------------------
    def prefill(self, prompt_ids: list[int]):
        """The eager prefill (any length, exact), its K/V copied into a slot's buffers."""
        if len(prompt_ids) >= self.context:
            raise InputError("prompt", f"{len(prompt_ids)} tokens fill the static engine's context of {self.context}")
        logits, feats, dyn = super().prefill(prompt_ids)
        slot = self._take()
        P = len(prompt_ids)
        kv = slot.kv
        if not kv.k:
            for layer in dyn.layers:
                k = layer.keys
                shape = (1, k.shape[1], self.cap, k.shape[3])
                kv.k.append(torch.zeros(shape, dtype=k.dtype, device=k.device))
                kv.v.append(torch.zeros(shape, dtype=layer.values.dtype, device=k.device))
        for K, V, layer in zip(kv.k, kv.v, dyn.layers):
            K[:, :, :P] = layer.keys
            V[:, :, :P] = layer.values
        if slot.mask is not None:   # the previous run's visible prefix hidden again
            slot.mask.fill_(torch.finfo(slot.mask.dtype).min)
        slot.seen, slot.last, slot.ctx.len = 0, None, 0
        cache = Cache(slot, P)
        weakref.finalize(cache, self._give, slot)
        return logits, feats, cache

    def new_context(self, cache) -> StaticContext:
        return cache.slot.ctx

    def compact(self, cache: Cache, s: int, chain: list[int]) -> None:
        """Keep positions < s and the accepted nodes, in order (Engine.compact over the buffers)."""
        keep = s + len(chain)
        if chain != list(range(len(chain))):
            kv = cache.slot.kv
            idx = torch.tensor(chain, device=kv.k[0].device) + s
            for t in (*kv.k, *kv.v):
                t[:, :, s:keep] = t.index_select(2, idx)
        cache.length = keep

    def _verify_buffers(self, slot: _Slot, nb: int, dtype, dev) -> None:
        rows = 0 if slot.io is None else slot.io.shape[1]
        if rows >= nb and slot.mask.dtype == dtype:
            return
        rows = max(nb, MIN_ROWS, 2 * rows)
        slot.io = torch.zeros(3, rows, dtype=torch.int64, device=dev)
        slot.mask = torch.full((1, 1, rows, slot.cap), torch.finfo(dtype).min, dtype=dtype, device=dev)
        slot.seen, slot.last = 0, None
        slot.graphs = {k: g for k, g in slot.graphs.items() if k[0] != "verify"}   # their buffers are gone

    def _tree_block(self, slot: _Slot, trie, s: int, n: int, nb: int) -> None:
        """The mask's rows for this call: the prefix < s visible, the block s..s+nb-1 from the trie (padded rows
        see only themselves), everything after hidden."""
        mask, lo = slot.mask[0, 0], torch.finfo(slot.mask.dtype).min
        if slot.last is not None:
            ls, lnb = slot.last
            mask[:, ls: ls + lnb] = lo
        if s > slot.seen:
            mask[:, slot.seen: s] = 0
            slot.seen = s
        vis = numpy.eye(nb, dtype=bool)   # padded rows see only themselves
        vis[:n, :n] = tree_visibility(trie.parents, trie.sizes)
        block = numpy.where(vis, 0.0, lo).astype(numpy.float32)
        mask[:nb, s: s + nb] = torch.from_numpy(block).to(mask.device, mask.dtype)
        slot.last = (s, nb)

    def verify(self, trie, s: int, cache: Cache, masks=None):
        """One target forward over all trie nodes (Engine.verify), padded to a bucket of nb nodes."""
        m, slot = self.models, cache.slot
        n = len(trie)
        nb = bucket(n)
        if s + nb > self.cap:
            raise InputError("max_new_tokens", f"the run outgrew the static engine's context of {self.context}")
        self._verify_buffers(slot, nb, m.dtype, m.device)
        io = numpy.empty((3, nb), dtype=numpy.int64)
        io[0, :n], io[0, n:] = trie.tokens, 0
        io[1, :n], io[1, n:] = trie.depths, 0
        io[1] += s
        io[2] = numpy.arange(s, s + nb)
        slot.io[:, :nb].copy_(torch.from_numpy(io))
        self._tree_block(slot, trie, s, n, nb)
        span = slot.cap if self.fixed else s + nb
        ids, pos, write = slot.io[0:1, :nb], slot.io[1:2, :nb], slot.io[2, :nb]
        mask = slot.mask[:, :, :nb, :span]
        target, kv, layer_ids = m.target, slot.kv, self.layer_ids

        def call():
            kv.write, kv.span = write, span
            with context_features(target, layer_ids) as features, tabled(span), linears():
                out = target(input_ids=ids, position_ids=pos, attention_mask=mask, past_key_values=kv,
                             use_cache=True)
            return out.logits.float(), features(out.logits)

        logits, feats = self._run(slot, ("verify", nb), call) if self.capture else call()
        return logits[0, :n], feats[0, :n]

    def draft(self, ctx, ctx_new, R, anchors: list[int], s: int, L: int, T: float, gen, argmax: bool) -> Drafts:
        """Engine.draft over the slot's drafter buffers: the new context padded to the block size, the blocks to
        a power of two (nb rows, nb - 1 retained rows), the padding masked."""
        if not isinstance(ctx, StaticContext):   # a ContextKV of a caller's own (tests, the bench)
            return super().draft(ctx, ctx_new, R, anchors, s, L, T, gen, argmax)
        m, dev = self.models, self.models.device
        n, c, r = len(anchors), ctx_new.shape[0], R.shape[0]
        n_in = L - 1 + self.offset
        nb = bucket(n)
        rb = nb - 1
        if r > rb:
            raise ValueError(f"{r} retained rows for {n} blocks")
        B = self.block_size
        cb = B if c <= B else c                   # the first draft after the prefill brings the prompt
        captured = self.fixed and cb == B and n_in == B - 1 + self.offset
        span = ctx.cap if captured else ctx.len + cb
        if ctx.len + cb > ctx.cap:
            raise InputError("max_new_tokens", f"the run outgrew the static engine's context of {self.context}")
        key = (nb, cb, n_in) if captured else None
        bufs = self._draft_buffers(ctx, key, nb, cb, rb, n_in, span, dev)
        hid, ids, pos, write, mask = bufs
        # inputs: context rows then retained rows (zero padding), blocks [anchor, MASK...] (padded rows: MASK)
        hid[0, :c] = ctx_new
        hid[0, c:cb] = 0
        if r:
            hid[0, cb: cb + r] = R
        hid[0, cb + r:] = 0
        p = numpy.empty((nb, cb + rb + n_in), dtype=numpy.int64)
        p[:, :c] = numpy.arange(s - c, s)
        p[:, c:cb] = s - 1
        p[:, cb: cb + r] = numpy.arange(s, s + r)
        p[:, cb + r: cb + rb] = s
        d = numpy.arange(nb)
        d[n:] = 0
        p[:, cb + rb:] = s + d[:, None] + numpy.arange(n_in)[None]
        tok = numpy.full((nb, n_in), self.mask_id, dtype=numpy.int64)
        tok[:n, 0] = anchors
        io = numpy.concatenate([p, tok], 1)
        io_t = torch.from_numpy(io).to(dev)
        pos.copy_(io_t[:, : cb + rb + n_in])
        ids.copy_(io_t[:, cb + rb + n_in:])
        write.copy_(torch.arange(ctx.len, ctx.len + cb, device=dev))
        # the mask: stored context and the c new rows visible; row d sees retained rows j < min(d, r); blocks
        mask[:, 0, :, :span] = self._col(span, dev) < ctx.len + c
        rvis = (numpy.arange(rb)[None, :] < numpy.minimum(numpy.arange(nb), r)[:, None])
        mask[:, 0, :, span: span + rb] = torch.from_numpy(rvis).to(dev)[:, None, :]
        mask[:, 0, :, span + rb:] = True
        drafter, embed, scale, off = m.drafter, self.draft_embed, self.embed_scale, self.offset
        upto = self.cap + ctx.cap if captured else s + nb + n_in   # captured: one bound past any row's block

        def call():
            ctx.cb, ctx.span, ctx.write = cb, span, write
            noise = torch.nn.functional.embedding(ids, embed)
            noise = noise * scale if scale != 1.0 else noise
            with tabled(upto), linears():
                return drafter(target_hidden=hid.expand(nb, -1, -1).contiguous(), noise_embedding=noise,
                               position_ids=pos, attention_mask=mask, past_key_values=ctx, use_cache=True)

        out = self._run(ctx, ("draft", nb, n_in), call) if captured and self.capture else call()
        ctx.len += c
        out = out[:n, off:].contiguous()
        with linears():
            prop = propose(drafter, out, torch.tensor(anchors, device=dev), self.draft_head, T, gen, argmax)
        tokens = [[a, *row] for a, row in zip(anchors, prop.tokens.tolist())]
        backbone = None
        if prop.backbone is not None:
            backbone = [[a, *row] for a, row in zip(anchors, prop.backbone.tolist())]
        return Drafts(tokens, prop.logits, prop.probs, prop.confidence, backbone, prop.argmax)

    def _col(self, n: int, dev) -> torch.Tensor:
        t = self._cols.get(dev)
        if t is None or t.shape[0] < n:
            t = self._cols[dev] = torch.arange(max(n, self.cap), device=dev)
        return t[:n]

    def _draft_buffers(self, ctx: StaticContext, key, nb: int, cb: int, rb: int, n_in: int, span: int, dev):
        """(hidden, block ids, positions, write slots, mask) for a draft call: static per key when captured
        (kept on the context, which its slot owns), fresh otherwise."""
        if key is not None and key in ctx.__dict__.setdefault("bufs", {}):
            return ctx.bufs[key]
        feat = len(self.layer_ids) * self.models.target.config.get_text_config(decoder=True).hidden_size
        bufs = (torch.zeros(1, cb + rb, feat, dtype=self.draft_dtype, device=dev),
                torch.zeros(nb, n_in, dtype=torch.int64, device=dev),
                torch.zeros(nb, cb + rb + n_in, dtype=torch.int64, device=dev),
                torch.zeros(cb, dtype=torch.int64, device=dev),
                torch.zeros(nb, 1, n_in, span + rb + n_in, dtype=torch.bool, device=dev))
        if key is not None:
            ctx.bufs[key] = bufs
        return bufs

    # -- capture --------------------------------------------------------------------------------------
    def _run(self, owner, key, call):
        """`call`'s outputs, from its CUDA graph: captured at the first use of `key` on `owner` (a slot or its
        drafter context), after two warm-up calls on a side stream (lazy initialisation, rotary tables)."""
        graphs = owner.__dict__.setdefault("graphs", {})
        g = graphs.get(key)
        if g is None:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    call()
            torch.cuda.current_stream().wait_stream(side)
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            graph = torch.cuda.CUDAGraph()
            # thread-local: runs on other threads keep launching their kernels while this one captures
            with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
                out = call()
            # the rotary tables the graph reads stay alive even if a longer run elsewhere rebuilds them
            owner.__dict__.setdefault("tables", []).extend(
                mod.__dict__["_rotary_table"] for model in (self.models.target, self.models.drafter)
                if model is not None for mod in model.modules() if mod.__dict__.get("_rotary_table"))
            g = graphs[key] = (graph, out)
        g[0].replay()
        return g[1]
