"""A run: its checks, the prefill, then rounds (round.decode_round) until a stop token, max_new_tokens or
stop(), and its trace. The Engine (engine.py) only makes the model calls a round asks for."""
from __future__ import annotations

import threading
from dataclasses import asdict

import torch

from ..errors import InputError
from ..options import TREE_MODES
from ..trace import make_trace, run_stats, trace_config
from .config import DecodeConfig, auto_fields, validate
from .interrupt import Interrupted, make_interruptible, watching
from .round import ModelCalls, RoundConfig, decode_round, start


def check_run(engine: ModelCalls, prompt_ids: list[int], cfg: DecodeConfig | None, budget) -> DecodeConfig:
    """The config checked against the models and the prompt (the target's context): its normalised copy,
    or InputError naming what is wrong. `budget` (engine.decode.cost.Budget, fresh per run:
    budget_for(engine, cfg)) is needed when cfg asks for "auto" shifted blocks or nodes."""
    asked_block = (cfg or DecodeConfig()).block_size  # None: the drafter's own
    cfg = validate(cfg or DecodeConfig(), engine.block_size)
    if not prompt_ids:
        raise InputError("prompt", "is empty")
    if budget is None and any(auto_fields(cfg)):
        raise InputError("max_shifted" if auto_fields(cfg)[0] else "max_trie_nodes",
                         "'auto' needs a budget: engine.decode.cost.budget_for(engine, cfg)")
    static = getattr(engine, "context", None)   # a StaticEngine's preallocated context (engine/decode/static.py)
    if static and len(prompt_ids) + cfg.max_new_tokens > static:
        raise InputError("max_new_tokens", f"{cfg.max_new_tokens} does not fit: this prompt leaves room for at most "
                         f"{max(static - len(prompt_ids), 0)} in the static engine's context of {static}")
    limit = getattr(engine.models.target.config, "max_position_embeddings", None)
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
    return cfg


class Run:
    """One generation: iterate to get round records as they are verified; `.result` at the end.
    Construction checks the config (check_run) and raises InputError before any model call."""

    def __init__(self, engine: ModelCalls, prompt_ids: list[int], cfg: DecodeConfig | None = None, budget=None):
        cfg = check_run(engine, prompt_ids, cfg, budget)
        self.engine, self.prompt_ids, self.cfg = engine, list(prompt_ids), cfg
        self.rounds: list[dict] = []
        self.output_ids: list[int] = []
        self.result: dict | None = None
        speculative = cfg.mode != "ar"
        auto_k, auto_n = auto_fields(cfg)
        self.round_config = RoundConfig(
            mode=cfg.mode, rule=cfg.rule, temperature=cfg.temperature, acceptance=cfg.acceptance,
            argmax_drafts=cfg.argmax_drafts or cfg.mode in TREE_MODES,  # trees are built from the ranking
            block_size=cfg.block_size if speculative else 1, max_len=len(prompt_ids) + cfg.max_new_tokens,
            stops=frozenset() if cfg.ignore_eos else frozenset(engine.stop_ids),
            max_shifted=None if cfg.max_shifted == "auto" else cfg.max_shifted,
            max_trie_nodes=None if cfg.max_trie_nodes == "auto" else cfg.max_trie_nodes,
            budget=budget if auto_k or auto_n or getattr(budget, "ranker", None) else None,  # a tree's ranker
            auto_shifted=auto_k, auto_nodes=auto_n)
        self._stop = threading.Event()
        make_interruptible(engine.models.target, engine.models.drafter)
        self._t0: float | None = None   # set when the loop starts
        self._gen = self._loop()

    def __iter__(self):
        return self

    def __next__(self) -> dict:
        with torch.inference_mode():
            return next(self._gen)

    def stop(self) -> None:
        """End the run (thread-safe): between rounds, or inside the round under way at its next model layer
        (that round is dropped): within a layer's time whatever the settings."""
        self._stop.set()

    def finish(self) -> dict:
        with torch.inference_mode():  # once, not once per round as __next__ must
            for _ in self._gen:
                pass
        return self.result

    def trace_config(self) -> dict:
        """The trace's config block: these settings on these models (trace.trace_config)."""
        m, cfg = self.engine.models, self.cfg
        block = self.rounds[0]["block_size"] if self.rounds and cfg.mode != "ar" \
            else (cfg.block_size or (m.drafter.block_size if m.drafter else 1))
        name = lambda dt: str(dt).replace("torch.", "") if dt is not None else None  # noqa: E731
        eng = self.engine
        return trace_config(asdict(cfg), target=m.target_name, drafter=m.drafter_name, device=str(m.device),
                            dtype=name(m.dtype), block_size=block, draft_dtype=name(getattr(eng, "draft_dtype", None)),
                            draft_head_dtype=name(getattr(eng, "draft_head_dtype", None)))

    def trace(self) -> dict:
        """The run's trace; InputError("run") for a run stopped in its prefill (no token to trace)."""
        if not self.output_ids:
            raise InputError("run", "stopped during the prefill: no token to trace")
        if self.result is None:   # the caller left the loop early: the run so far, as a stopped one
            self.result = self._summary(stopped=True)
        return make_trace(self.trace_config(), self.prompt_ids, self.result, self.rounds,
                          self.engine.models.tokenizer)

    def _summary(self, stopped: bool) -> dict:
        return {"output_ids": self.output_ids, "text": self.engine.decode(self.output_ids), "stopped": stopped,
                "stats": run_stats(self.rounds, len(self.output_ids),
                                   self.engine.sync_time() - self._t0 if self._t0 is not None else 0.0)}

    def _loop(self):  # a generator: run under inference mode by __next__ and finish
        eng, rc = self.engine, self.round_config
        self._t0 = eng.sync_time()
        try:
            with watching(self._stop):
                first, state = start(eng, self.prompt_ids, rc, self.cfg.seed)
        except Interrupted:
            self.result = self._summary(True)
            return
        self.output_ids = [first]
        while not state.done and not self._stop.is_set():
            try:
                with watching(self._stop):
                    rec, state = decode_round(eng, state, rc, len(self.rounds))
            except Interrupted:
                break
            self.output_ids += rec["new_tokens"]
            self.rounds.append(rec)
            if rc.budget:
                rc.budget.observe(rec)
            yield rec
        self.result = self._summary(self._stop.is_set())
