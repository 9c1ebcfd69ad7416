"""Tiny models for tests: the random targets and drafters of engine/models/tiny.py (re-exported here), saved as
folders, with variant heads, and a scripted byte-level target.
"""
from __future__ import annotations

from pathlib import Path

import torch

from engine.models.tiny import CHAT, SPECIALS, tiny_models, tiny_target, tiny_tokenizer  # noqa: F401  (the tests' too)


def save_tiny(path: Path, kind: str = "llama", seed: int = 0, block_size: int = 8) -> tuple[Path, Path]:
    """Write a tiny target folder and a drafter folder, as users would pass with --target/--drafter."""
    m = tiny_models(kind, seed, block_size)
    t, d = Path(path) / f"target-{kind}", Path(path) / f"drafter-{kind}"
    m.target.save_pretrained(t)
    m.tokenizer.save_pretrained(t)
    m.drafter.save_pretrained(d)
    return t, d


def tiny_variant_models(variant: str, seed: int = 0, block_size: int = 6, shift_label: bool = False,
                        strength: float = 20.0, kind: str = "qwen3", rank: int = 8, out_scale: float = 8.0,
                        init: float = 0.5):
    """Engine Models with a tiny random Domino or DSpark drafter (engine/models/variants.py) in its released
    format. `strength` scales the head's weights, and its output projection W2 `out_scale` times more, so that its
    corrections often change the backbone's tokens."""
    from engine.models import drafter_class
    from engine.models.variants import variant_config

    m = tiny_models(kind, seed, block_size=block_size, init=init)
    cfg = variant_config(m.drafter.config, variant, rank=rank, gru_hidden=16, pure_prefix=1, shift_label=shift_label)
    torch.manual_seed(seed + 7)
    drafter = drafter_class(cfg)(cfg).eval()
    drafter.load_state_dict(m.drafter.state_dict(), strict=False)  # the same backbone as the DFlash one
    with torch.no_grad():
        for p in drafter.head_parameters():
            p.mul_(strength)
        drafter.correction_weight().mul_(out_scale)
    m.drafter = drafter
    m.drafter_name = f"tiny-{variant}"
    return m


def dflash2_models(seed: int, init: float = 0.5):
    """Engine Models with a tiny random DFlash 2 drafter (the dflash package's DFlash2DraftModel: convolutions and
    a top-k selector) over a tiny Qwen3 target."""
    import dflash.model

    from engine.models import drafter_class, drafter_config

    m = tiny_models("qwen3", seed, block_size=6, init=init)
    cfg = drafter_config(m.target.config, num_layers=1, block_size=6, mask_token_id=3)
    cfg.dflash_config.update(conv_kernel_size=3, conv_group_size=16, selector_rank=8, selector_top_k=4)
    cls = drafter_class(cfg)
    assert cls is dflash.model.DFlash2DraftModel
    torch.manual_seed(seed)
    drafter = cls(cfg).eval()
    with torch.no_grad():  # its base kernels start uninitialised: give them values
        for layer in drafter.layers:
            for conv in (layer.attention_conv, layer.mlp_conv):
                conv.base_kernel.normal_(0, 0.1)
    m.drafter = drafter
    return m


def save_tiny_bench(path: Path, prompts: list[dict]) -> tuple[Path, Path, Path]:
    """save_tiny plus a JSONL prompt set: (target, drafter, prompts file) for `python -m engine bench`."""
    import json

    target, drafter = save_tiny(path)
    file = Path(path) / "tiny.jsonl"
    file.write_text("".join(json.dumps(p) + "\n" for p in prompts))
    return target, drafter, file


# -- a scripted byte-level model: it writes a fixed multilingual text, split inside characters ---------

SCRIPT = "你好 世界 🎉 שלום é\u0301 ok"   # Chinese, emoji, Hebrew, e + a combining acute, Latin


def script_chunks(text: str = SCRIPT) -> list[bytes]:
    """The text's UTF-8 bytes cut into tokens of 2, 3, 1, 2, 3, 1... bytes: most cuts fall inside a character."""
    data, out, k = text.encode(), [], 0
    while k < len(data):
        size = (2, 3, 1)[len(out) % 3]
        out.append(data[k:k + size])
        k += size
    return out


def byte_tokenizer(chunks: list[bytes], alphabet: bytes):
    """Byte-level BPE (as SmolLM2's): one token per byte of `alphabet`, plus the multi-byte `chunks`
    (never produced by encoding, only by the model), decoded through bytes like the real thing."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    pieces = sorted({bytes([b]) for b in alphabet}) + [c for c in chunks if len(c) > 1]
    vocab = {t: i for i, t in enumerate(SPECIALS)}
    for p in pieces:
        vocab.setdefault(_byte_level(p), len(vocab))
    tk = Tokenizer(models.BPE(vocab, [], unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tk.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", eos_token="<|im_end|>",
                                  additional_special_tokens=SPECIALS[1:])
    tok.chat_template = CHAT
    return tok


def scripted_models(text: str = SCRIPT, seed: int = 0, block_size: int = 8):
    """(Models, script ids): a target that writes `text` over and over after any prompt (greedy), through
    tokens that split its characters; a random drafter."""
    import string

    from engine.models import Models, random_drafter

    chunks = script_chunks(text)
    tok = byte_tokenizer(chunks, (string.printable + text).encode())
    vocab = tok.get_vocab()
    ids = [vocab[_byte_level(c)] for c in chunks]
    assert len(set(ids)) == len(ids), "script tokens must be distinct (each has one successor)"
    succ = {x: y for x, y in zip(ids, ids[1:] + ids[:1])}
    succ[vocab[":"]] = ids[0]  # the chat template's last prompt token
    target = scripted_target(len(tok), succ, seed)
    drafter = random_drafter(target, seed=seed + 1, mask_token_id=vocab["<mask>"], num_layers=1,
                             block_size=block_size).eval()
    return Models(target, tok, drafter, torch.device("cpu"), torch.float32, "tiny-scripted", "random"), ids


def scripted_target(vocab_size: int, succ: dict[int, int], seed: int = 0):
    """A Qwen3 whose greedy next token is succ[current token]: embeddings are one-hot, every layer adds
    nothing (zero output projections), and lm_head row y picks the tokens whose successor is y."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    hidden = 64 * -(-vocab_size // 64)
    cfg = Qwen3Config(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
                      eos_token_id=2, bos_token_id=1, pad_token_id=0, tie_word_embeddings=False)
    torch.manual_seed(seed)
    m = Qwen3ForCausalLM(cfg).eval()
    m.config._attn_implementation = "sdpa"
    with torch.no_grad():
        m.model.embed_tokens.weight.zero_()
        m.model.embed_tokens.weight[:, :vocab_size] = torch.eye(vocab_size)
        for layer in m.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        m.lm_head.weight.zero_()
        for x, y in succ.items():
            m.lm_head.weight[y, x] = 1.0
    return m


def save_scripted(path: Path, text: str = SCRIPT) -> tuple[Path, Path]:
    """The scripted target and its random drafter as folders (--target / --drafter)."""
    m, _ = scripted_models(text)
    t, d = Path(path) / "target-scripted", Path(path) / "drafter-scripted"
    m.target.save_pretrained(t)
    m.tokenizer.save_pretrained(t)
    m.drafter.save_pretrained(d)
    return t, d


def _byte_level(chunk: bytes) -> str:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    uni = bytes_to_unicode()
    return "".join(uni[b] for b in chunk)
