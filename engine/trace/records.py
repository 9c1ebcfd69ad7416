"""A trace's records: what a run writes (docs/trace-format.md) and how the engine builds it: the round record,
the run's stats, the token texts and pieces, the config block, the whole trace; and token_sources, which reads
a (valid) round back."""
from __future__ import annotations

SCHEMA = "reanchor-trace/1"
STATS_KEYS = ("tau", "rounds", "new_tokens", "wall_s", "tokens_per_s")
# Optional config entries the app reads, and what each must be when present.
CONFIG_TYPES = {"mode": str, "rule": str, "temperature": (int, float), "seed": int, "max_new_tokens": int,
                "block_size": (int, type(None)), "max_shifted": (int, str, type(None)),
                "max_trie_nodes": (int, str, type(None)), "acceptance": str, "target": str, "drafter": str, "device": str, "dtype": str,
                "tree_rank": str, "calibration": str, "draft_dtype": str, "draft_head_dtype": str}
STAGES = ("draft", "build", "verify", "accept", "record")   # a round's stages_ms, in order
MAX_CHAR_TOKENS = 4       # a UTF-8 character has at most 4 bytes: byte-level tokens split it over at most 4


def rounded(values, places: int) -> list[float]:
    """`values` as a record keeps them, to `places` decimals: round(x * 10^p) / 10^p, the double nearest k / 10^p as
    round(x, p) gives (they differ only for a value within an ulp of a half; none in 2 M random log-probabilities)
    at a quarter of its cost: Python's round(x, p) took about 1.3% of a small model's dflash round. Infinities and
    NaN stay as they are."""
    scale = 10.0 ** places
    return [round(x * scale) / scale if -1e15 < x < 1e15 else x for x in values]


def round_record(i: int, s: int, L: int, baseline: list[int], shifted: dict[int, list[int]], info: dict,
                 paths: list, trie, chain: list[int], bonus: int, new: list[int], top1: list[int], m: int,
                 draft_ms: float, verify_ms: float, round_ms: float, facts: dict | None = None,
                 budget: dict | None = None, q: list[list[float]] | None = None, notes: dict | None = None) -> dict:
    """One round as docs/trace-format.md records it; the times (ms) are kept as given (rounded,
    to 3 decimals, by the caller, which sets them again with the record's own). `facts`: per trie node lists
    (block, rank, prob, score) kept in the record's "trie"; `budget`: what the cost budget chose; `q`:
    per drafted row (the baseline, then the shifted blocks by d), each draft's probability under the law
    it was drawn from; None for argmax drafts. `notes` (drafters with a head, round.head_notes):
    "confidence" {row: [L-1 floats]} and "backbone" [{d, j, token}], both optional."""
    qs = [[min(1.0, float(f"{x:.6g}")) for x in row] for row in q] if q is not None else [None] * (1 + len(shifted))
    notes = notes or {}
    conf = notes.get("confidence")
    rec = {
        "round": i, "anchor_pos": s, "anchor": baseline[0], "block_size": L,
        "baseline": baseline, "baseline_q": qs[0],
        "shifted": [{"d": d, "tokens": shifted[d], "q": qs[r], "sites": info[d]["sites"],
                     "chosen": info[d]["attached"][0] if info[d]["attached"] else None,
                     "attached": info[d]["attached"]} | _conf(conf, d) for r, d in enumerate(sorted(shifted), 1)],
        "paths": [{"source": p.source, "site": p.site, "tokens": p.tokens} for p in paths],
        "trie": {"tokens": trie.tokens, "parents": trie.parents, "depths": trie.depths,
                 "provenance": trie.provenance, **(facts or {})},
        "accepted_nodes": chain, "accepted": len(chain) - 1, "bonus": bonus,
        "new_tokens": new, "target_top1": top1, "retained": m,
    }
    if conf:
        rec |= _conf(conf, 0)
    rec["draft_ms"], rec["verify_ms"], rec["round_ms"] = draft_ms, verify_ms, round_ms   # rounded by the caller
    if budget is not None:
        rec["budget"] = budget
    if "backbone" in notes:
        rec["backbone"] = notes["backbone"]
    return rec


def _conf(conf: dict | None, row: int) -> dict:
    return {"confidence": rounded(conf[row], 4)} if conf else {}


def run_stats(rounds: list[dict], new_tokens: int | None = None, wall_s: float | None = None) -> dict:
    """tau, rounds, tokens, time and model calls of a run (or of its rounds so far): `new_tokens`
    defaults to the prefill's token plus every round's, `wall_s` to the rounds' own times."""
    n = len(rounds)
    if new_tokens is None:
        new_tokens = 1 + sum(len(r.get("new_tokens", [])) for r in rounds)
    if wall_s is None:
        wall_s = sum(float(r.get("round_ms", 0.0)) for r in rounds) / 1000.0
    # tau: tokens committed per round, accepted drafts + the bonus, except where the run's end cut the
    # round (max_new_tokens leaves no room for the bonus; drafts past a stop token are dropped)
    return {"tau": sum(len(r.get("new_tokens", [])) for r in rounds) / n if n else 0.0,
            "rounds": n, "new_tokens": new_tokens, "wall_s": wall_s,
            "tokens_per_s": new_tokens / wall_s if wall_s and wall_s > 0 else 0.0,
            "target_calls": n + 1, "draft_calls": sum(1 for r in rounds if r.get("block_size", 0) >= 2)}


def round_ids(rec: dict) -> set[int]:
    """Every token id a round record mentions."""
    ids = {int(rec["anchor"]), int(rec.get("bonus", rec["anchor"]))}
    ids.update(rec.get("baseline", []))
    for b in rec.get("shifted", []):
        ids.update(b.get("tokens", []))
    ids.update(rec["trie"]["tokens"])
    ids.update(rec.get("target_top1", []))
    ids.update(rec.get("new_tokens", []))
    ids.update(b["token"] for b in rec.get("backbone", []))
    return {int(i) for i in ids}


def add_token_texts(token_texts: dict, tokenizer, ids) -> dict:
    """The decoded piece of every id not yet in the map (keys are strings, as in JSON)."""
    for i in sorted({int(i) for i in ids}):
        if str(i) not in token_texts:
            token_texts[str(i)] = tokenizer.decode([i])
    return token_texts


class TextPieces:
    """Per token, the characters it completes when its sequence is decoded as a whole.

    Byte-level BPE splits characters over tokens (a Chinese character is 3 UTF-8 bytes, an emoji 4),
    and each part decoded alone is U+FFFD. Here a token ending inside a character gives the characters
    it completes ("" if none) and the token completing it the rest, so the pieces join to the decoded
    text: the text view shows any script as written, each token in its own colour. Feed a sequence's
    tokens in order, in one call or several (a run streams them round by round).
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.open: list[int] = []   # tokens since the last character boundary
        self.given = 0              # characters of decode(open) already given out

    def add(self, ids) -> list[str]:
        out = []
        for i in ids:
            self.open.append(int(i))
            text = self.tokenizer.decode(self.open)
            if text.endswith("\ufffd") and len(self.open) < MAX_CHAR_TOKENS:  # inside a character
                done = text.rstrip("\ufffd")
                out.append(done[self.given:])
                self.given = max(self.given, len(done))
            else:  # at a boundary, or bytes that never make a character: give them as they decode
                out.append(text[self.given:])
                self.open, self.given = [], 0
        return out


    def finish(self) -> str:
        """What the tokens still open decode to (U+FFFD for a character cut short), for the last piece."""
        rest = self.tokenizer.decode(self.open)[self.given:] if self.open else ""
        self.open, self.given = [], 0
        return rest


def text_pieces(tokenizer, ids) -> list[str]:
    """The pieces of a whole sequence: they join to tokenizer.decode(ids)."""
    tp = TextPieces(tokenizer)
    out = tp.add(ids)
    if out:
        out[-1] += tp.finish()
    return out


def new_trace(config: dict, prompt_ids: list[int], tokenizer) -> dict:
    """A trace of a run in progress: `add_round` appends to it; `complete` is False until the
    run's own trace (make_trace) replaces it."""
    return {"schema": SCHEMA, "config": config, "prompt_ids": list(prompt_ids),
            "token_texts": add_token_texts({}, tokenizer, prompt_ids), "rounds": [], "first_token": None,
            "prompt_pieces": text_pieces(tokenizer, prompt_ids), "output_pieces": [],
            "stats": {}, "complete": False}


def add_round(live: dict, rec: dict, tokenizer, pieces: TextPieces) -> None:
    """Append a verified round; `pieces` decodes the run's generated tokens (one per run)."""
    new = list(rec["new_tokens"])
    if live["first_token"] is None:
        live["first_token"] = int(rec["anchor"])
        new.insert(0, live["first_token"])
    add_token_texts(live["token_texts"], tokenizer, round_ids(rec))
    live["output_pieces"] += pieces.add(new)
    live["rounds"].append(rec)


NO_DRAFTER = "none"   # the drafter a trace's config names for an `ar` run, which drafts nothing


def trace_drafter(mode: str, drafter: str | None) -> str | None:
    """The drafter a trace of this mode names (config.drafter)."""
    return NO_DRAFTER if mode == "ar" else drafter


def trace_config(settings: dict, *, target: str, drafter: str | None, device: str, dtype: str,
                 block_size: int, draft_dtype: str | None = None, draft_head_dtype: str | None = None) -> dict:
    """A trace's `config` block (docs/trace-format.md): a run's settings (DecodeConfig's fields) and the models
    it ran on, by name. The one builder: finished runs (make_trace), live ones (the app) and the sweep's
    --resume check read their names from it."""
    drafts = {} if settings["mode"] == "ar" or draft_dtype is None else \
        {"draft_dtype": draft_dtype, "draft_head_dtype": draft_head_dtype}   # the drafts depend on both
    return {**settings, "target": target, "drafter": trace_drafter(settings["mode"], drafter),
            "device": device, "dtype": dtype, **drafts, "block_size": block_size}


def make_trace(config: dict, prompt_ids: list[int], result: dict, rounds: list[dict], tokenizer) -> dict:
    """The whole trace of a finished (or stopped) run, from its records: `config` (trace_config), `result`
    ({output_ids, text, stats}: generated ids, the first token first) and the round records."""
    out = result["output_ids"]
    ids = set(prompt_ids) | set(out)
    for r in rounds:
        ids |= round_ids(r)
    return {"schema": SCHEMA, "config": config, "prompt_ids": list(prompt_ids),
            "prompt_text": tokenizer.decode(prompt_ids), "first_token": out[0],
            "output_ids": out, "text": result["text"],
            "stats": result["stats"], "token_texts": add_token_texts({}, tokenizer, ids),
            "prompt_pieces": text_pieces(tokenizer, prompt_ids), "output_pieces": text_pieces(tokenizer, out),
            "rounds": rounds}


def token_sources(rnd: dict) -> list[str]:
    """Per committed token of a round: 'baseline' if the baseline path holds it, else 'd<k>' for
    the first shifted block whose path holds it; the round's last token is the target's 'bonus'."""
    paths, prov = rnd["paths"], rnd["trie"]["provenance"]
    out = []
    for node in rnd["accepted_nodes"][1:len(rnd["new_tokens"]) + 1]:
        srcs = [paths[p]["source"] for p in prov[node]]
        out.append("baseline" if 0 in srcs else f"d{min(srcs)}")
    if len(out) < len(rnd["new_tokens"]):
        out.append("bonus")
    return out

