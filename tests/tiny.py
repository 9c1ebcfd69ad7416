"""Tiny random targets, tokenizers and DFlash drafters, built offline from configs, for tests.

A character-level tokenizer with a chat template over a small alphabet keeps vocabularies small,
so random drafters sometimes agree with the target and every attachment branch gets exercised.
"""
from __future__ import annotations

from pathlib import Path

import torch

SPECIALS = ["<unk>", "<|im_start|>", "<|im_end|>", "<mask>"]
CHAT = ("{% for m in messages %}<|im_start|>{{ m['role'] }}:{{ m['content'] }}<|im_end|>{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant:{% endif %}")


def tiny_tokenizer(alphabet: str = "abcdefghij :.,?"):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(SPECIALS + sorted(set(alphabet)))}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tk.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", eos_token="<|im_end|>",
                                  additional_special_tokens=SPECIALS[1:])
    tok.chat_template = CHAT
    return tok


def tiny_target(kind: str = "llama", vocab_size: int = 19, seed: int = 0, layers: int = 4,
                init: float = 0.2):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    cls_cfg, cls = {"llama": (LlamaConfig, LlamaForCausalLM),
                    "qwen3": (Qwen3Config, Qwen3ForCausalLM)}[kind]
    cfg = cls_cfg(vocab_size=vocab_size, hidden_size=64, intermediate_size=128,
                  num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                  head_dim=16, max_position_embeddings=512, initializer_range=init,
                  eos_token_id=2, bos_token_id=1, pad_token_id=0, tie_word_embeddings=kind == "llama")
    torch.manual_seed(seed)
    return cls(cfg).eval()


def tiny_models(kind: str = "llama", seed: int = 0, block_size: int = 8, draft_layers: int = 1,
                alphabet: str = "ab c", init: float = 0.5, sharpen: float = 1.0,
                device: str = "cpu", dtype: torch.dtype = torch.float32):
    """Engine Models over a tiny random target and a random DFlash drafter (fp32, CPU by default)."""
    from engine.models import Models, random_drafter

    tok = tiny_tokenizer(alphabet)
    target = tiny_target(kind, vocab_size=len(tok), seed=seed, init=init)
    target.config._attn_implementation = "sdpa"
    drafter = random_drafter(target, seed=seed + 1, mask_token_id=tok.convert_tokens_to_ids("<mask>"),
                             num_layers=draft_layers, block_size=block_size).eval()
    with torch.no_grad():  # optionally sharper random drafts
        for p in drafter.parameters():
            p.mul_(sharpen) if p.dim() > 1 else None
    dev = torch.device(device)
    return Models(target.to(dev, dtype), tok, drafter.to(dev, dtype), dev, dtype, f"tiny-{kind}",
                  "random")


def save_tiny(path: Path, kind: str = "llama", seed: int = 0, block_size: int = 8) -> tuple[Path, Path]:
    """Write a tiny target folder and a drafter folder, as users would pass with --target/--drafter."""
    m = tiny_models(kind, seed, block_size)
    t, d = Path(path) / f"target-{kind}", Path(path) / f"drafter-{kind}"
    m.target.save_pretrained(t)
    m.tokenizer.save_pretrained(t)
    m.drafter.save_pretrained(d)
    return t, d


def save_tiny_bench(path: Path, prompts: list[dict]) -> tuple[Path, Path, Path]:
    """save_tiny plus a JSONL prompt set: (target, drafter, prompts file) for `python -m engine bench`."""
    import json

    target, drafter = save_tiny(path)
    file = Path(path) / "tiny.jsonl"
    file.write_text("".join(json.dumps(p) + "\n" for p in prompts))
    return target, drafter, file
