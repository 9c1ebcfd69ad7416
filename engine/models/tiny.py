"""Tiny random targets, tokenizers and DFlash drafters, built offline from configs: the models of the test suite
(tests/tiny.py adds its scripted and variant ones) and of the GPU check (engine/gpu/gpu_check.py).

A character-level tokenizer with a chat template over a small alphabet keeps vocabularies small,
so random drafters sometimes agree with the target and every attachment branch gets exercised.
"""
from __future__ import annotations

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
                init: float = 0.2, window: int | None = None):
    """`window`: sliding-window attention, on the upper half of the layers for qwen3 (Qwen3's
    use_sliding_window), on every layer for mistral."""
    from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen3Config,
                              Qwen3ForCausalLM)

    cls_cfg, cls = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen3": (Qwen3Config, Qwen3ForCausalLM),
                    "mistral": (MistralConfig, MistralForCausalLM)}[kind]
    extra = ({"use_sliding_window": True, "max_window_layers": layers // 2} if kind == "qwen3" else {}) \
        if window else {}
    cfg = cls_cfg(vocab_size=vocab_size, hidden_size=64, intermediate_size=128,
                  num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                  head_dim=16, max_position_embeddings=512, initializer_range=init,
                  eos_token_id=2, bos_token_id=1, pad_token_id=0, tie_word_embeddings=kind == "llama",
                  sliding_window=window, **extra)
    torch.manual_seed(seed)
    return cls(cfg).eval()


def tiny_models(kind: str = "llama", seed: int = 0, block_size: int = 8, draft_layers: int = 1,
                alphabet: str = "ab c", init: float = 0.5, sharpen: float = 1.0,
                device: str = "cpu", dtype: torch.dtype = torch.float32, window: int | None = None):
    """Engine Models over a tiny random target and a random DFlash drafter (fp32, CPU by default)."""
    from .load import Models, random_drafter

    tok = tiny_tokenizer(alphabet)
    target = tiny_target(kind, vocab_size=len(tok), seed=seed, init=init, window=window)
    target.config._attn_implementation = "sdpa"
    drafter = random_drafter(target, seed=seed + 1, mask_token_id=tok.convert_tokens_to_ids("<mask>"),
                             num_layers=draft_layers, block_size=block_size).eval()
    with torch.no_grad():  # optionally sharper random drafts
        for p in drafter.parameters():
            p.mul_(sharpen) if p.dim() > 1 else None
    dev = torch.device(device)
    return Models(target.to(dev, dtype), tok, drafter.to(dev, dtype), dev, dtype, f"tiny-{kind}",
                  "random")
