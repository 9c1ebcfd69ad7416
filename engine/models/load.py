"""Loading the target and the DFlash drafter: local folders, the HF cache, hub ids, the embedded default.

All model loading lives here; the decoding loop only sees loaded modules.
"""
from __future__ import annotations

import json
import os
import socket
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, TypeVar
from urllib.parse import urlparse
from urllib.request import getproxies, proxy_bypass

import torch

from ..errors import InputError
from ..options import DTYPE_NAMES, EMBEDDED_NAME, auto_dtype
from ..paths import default_drafter
from .embedded import SMOLLM2_MASK_ID, SMOLLM2_VOCAB

DTYPES = {flag: getattr(torch, name) for flag, name in DTYPE_NAMES.items()}
_ABSENT = object()  # a config field that is not there (None is a value: JSON null)
HUB_PROBE_S = 2.0  # how long the hub's host may take to accept a connection before it counts as unreachable
T = TypeVar("T")


@dataclass
class Models:
    target: torch.nn.Module
    tokenizer: object
    drafter: torch.nn.Module | None
    device: torch.device
    dtype: torch.dtype
    target_name: str
    drafter_name: str
    draft_dtype: str = "auto"     # as asked (--draft-dtype): "auto" lets the Engine pick the vocabulary projection's


def chat_ids(tokenizer, prompt: str) -> list[int]:
    """Token ids of one user message under the chat template, ready for the assistant's answer."""
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                            add_generation_prompt=True, tokenize=True)
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    else:
        ids = tokenizer(prompt)["input_ids"]
    return list(ids)


def stop_token_ids(tokenizer, config) -> list[int]:
    """End-of-turn ids: the config's eos ids plus the chat template's end markers when present."""
    ids = set()
    for src in (config.eos_token_id, getattr(tokenizer, "eos_token_id", None)):
        ids.update(src if isinstance(src, (list, tuple)) else [src] if src is not None else [])
    vocab = tokenizer.get_vocab()
    ids.update(vocab[t] for t in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>") if t in vocab)
    ids.discard(vocab.get("<|im_start|>"))  # SmolLM2's GGUF names im_start as eos: it never ends a turn
    return sorted(ids)


def resolve_device(device: str = "auto") -> torch.device:
    """auto (CUDA when there is one, else the CPU), cpu, cuda or cuda:N (N below the device count)."""
    if device in (None, "", "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    usage = "use auto, cpu, cuda or cuda:N"
    try:
        dev = device if isinstance(device, torch.device) else torch.device(str(device).strip())
    except (RuntimeError, TypeError, ValueError):
        raise InputError("device", f"unknown device {device!r} ({usage})") from None
    if dev.type == "cpu" and dev.index in (None, 0):
        return torch.device("cpu")
    if dev.type != "cuda":
        raise InputError("device", f"{device!r} is not supported ({usage})")
    if not torch.cuda.is_available():
        raise InputError("device", "cuda was asked for but no CUDA device is available")
    count = torch.cuda.device_count()
    if dev.index is not None and dev.index >= count:
        raise InputError("device", f"{device!r}: there is no CUDA device {dev.index} "
                         f"({count} found: cuda:0{f' to cuda:{count - 1}' if count > 1 else ''})")
    return dev


def resolve_dtype(dtype: str | None, device: torch.device, field: str = "dtype") -> torch.dtype:
    """auto: bf16 on CUDA, fp32 on the CPU (fp32 is what makes T=0 token-exact). `field` names the
    option in errors (dtype, draft_dtype)."""
    if dtype in (None, "", "auto"):
        return DTYPES[auto_dtype(device.type)]
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise InputError(field, f"unknown dtype {dtype!r} (use auto, float32, bfloat16 or float16)")
    return DTYPES[dtype]


def _check_folder(field: str, path: Path) -> None:
    if not path.is_dir():
        raise InputError(field, f"{path} is not a folder")
    cfg = path / "config.json"
    if not cfg.is_file():
        raise InputError(field, f"{path} has no config.json")
    try:
        json.loads(cfg.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(field, f"{cfg} is not valid JSON ({e})")
    if not any(path.glob("*.safetensors")) and not any(path.glob("*.bin")):
        raise InputError(field, f"{path} holds no weights (*.safetensors)")


def _looks_local(name: str) -> bool:
    return name.startswith((".", "/", "~")) or Path(name).expanduser().exists()


def hub_unreachable(timeout: float = HUB_PROBE_S) -> str | None:
    """Why the hub (HF_ENDPOINT, through the proxy the environment names) cannot be reached, or None when its
    host accepts a connection within `timeout` s. Offline, transformers retries for ~30 s before failing."""
    from huggingface_hub import constants

    flag = next((v for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")  # also when set after the hub's import
                 if os.environ.get(v, "").upper() in ("1", "ON", "YES", "TRUE")), None)
    if flag or constants.HF_HUB_OFFLINE:
        return f"{flag or 'HF_HUB_OFFLINE'} is set"
    url = urlparse(constants.ENDPOINT)
    host = url.hostname or ""
    proxy = getproxies().get(url.scheme) if host and not proxy_bypass(host) else None
    if proxy:  # downloads go through it: a direct connection may well be refused
        via = urlparse(proxy if "://" in proxy else f"http://{proxy}")
        addr = (via.hostname, via.port or 80)
    else:
        addr = (host, url.port or (443 if url.scheme == "https" else 80))
    errors: list[OSError | None] = []

    def probe():
        try:
            socket.create_connection(addr, timeout).close()
            errors.append(None)
        except OSError as e:
            errors.append(e)

    t = threading.Thread(target=probe, daemon=True)  # a thread: name resolution has no timeout of its own
    t.start()
    t.join(timeout)
    where = f"{host} (via the proxy {addr[0]})" if proxy else host
    if not errors:
        return f"{where} did not answer within {timeout:g} s"
    e = errors[0]
    return None if e is None else f"{where} is unreachable ({e.strerror or e})"


def load_pretrained(field: str, name: str, load: Callable[[str, bool], T]) -> T:
    """`load(source, local_files_only)` for a folder or a hub id. A hub id is read from the HF cache first and
    downloaded only when that misses and the hub answers, so that offline it fails at once, naming both
    readings of the name (a folder, a hub id)."""
    from huggingface_hub.errors import GatedRepoError, HFValidationError, RepositoryNotFoundError
    from huggingface_hub.utils import validate_repo_id

    if _looks_local(name):
        path = Path(name).expanduser()
        _check_folder(field, path)
        return load(str(path), True)
    try:
        validate_repo_id(name)
    except HFValidationError:  # e.g. two slashes: only a folder could be meant
        raise InputError(field, f"there is no folder {name!r}") from None
    try:
        return load(name, True)
    except InputError:
        raise
    except Exception as e:  # not in the cache, or only part of it (a tokenizer missing fails as a ValueError)
        cached_error = e
    why = hub_unreachable()
    if why and not isinstance(cached_error, OSError):
        raise cached_error  # in the cache but unloadable: its own reason
    if why:
        raise InputError(field, f"there is no folder {name!r} here, and as a hub id it is not in the Hugging "
                                f"Face cache and {why}")
    try:
        return load(name, False)
    except OSError as e:
        cause = e.__cause__
        if isinstance(cause, RepositoryNotFoundError) and not isinstance(cause, GatedRepoError):
            raise InputError(field, f"there is no folder {name!r} here, and no hub model {name!r} (a private one "
                                    f"needs `hf auth login`)") from e
        raise


def load_target(name: str | None, device: torch.device, dtype: torch.dtype,
                trust_remote_code: bool = False):
    """Target model and tokenizer: 'embedded' (default), a local folder, or a hub id / HF-cache name."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .embedded import embedded_dir

    name = name or EMBEDDED_NAME

    def load(src: str, local: bool):
        tok = AutoTokenizer.from_pretrained(src, trust_remote_code=trust_remote_code, local_files_only=local)
        return tok, *AutoModelForCausalLM.from_pretrained(
            src, dtype=dtype, attn_implementation="sdpa", trust_remote_code=trust_remote_code,
            output_loading_info=True, local_files_only=local)

    try:
        tok, model, info = load(str(embedded_dir()), True) if name == EMBEDDED_NAME else \
            load_pretrained("target", name, load)
    except InputError:
        raise
    except Exception as e:  # hub errors, malformed configs, missing files
        raise InputError("target", f"could not load {name!r}: {str(e).splitlines()[0]}") from e
    missing = sorted(info.get("missing_keys") or [])
    if missing:  # from_pretrained would start these at random: a folder of another kind (a drafter?)
        shown = ", ".join(repr(k) for k in missing[:3])
        cfg = model.config
        is_drafter = any(getattr(cfg, k, None) is not None for k in ("dflash_config", "markov_rank"))
        raise InputError("target", f"{name} lacks the weights {shown}"
                         + (f" (and {len(missing) - 3} more)" if len(missing) > 3 else "")
                         + f" that a {type(model).__name__} needs"
                         + (": it is a drafter's folder (pass it as --drafter)" if is_drafter else ""))
    rows = model.get_input_embeddings().weight.shape[0]
    if len(tok) > rows:  # fewer is normal: padded vocabularies
        raise InputError("target", f"{name}'s tokenizer has {len(tok)} ids but the model's embedding "
                         f"table only {rows} rows")
    return model.to(device).eval(), tok


def drafter_class(config):
    """The class a drafter config describes (variants.variant_name): DFlash, DFlash 2, Domino or DSpark."""
    from dflash import DFlash2DraftModel, DFlashDraftModel

    from .variants import DominoDraftModel, DSparkDraftModel, required, variant_name

    if variant_name(config) == "dflash2":  # the package would fail on int(None), naming nothing
        for name in ("conv_group_size", "selector_rank", "selector_top_k"):
            required(config, name, "DFlash 2")
    return {"dflash": DFlashDraftModel, "dflash2": DFlash2DraftModel, "domino": DominoDraftModel,
            "dspark": DSparkDraftModel}[variant_name(config)]


def drafter_config(target_config, *, num_layers: int = 2, block_size: int = 16,
                   mask_token_id: int, target_layer_ids: list[int] | None = None):
    """A Qwen3 config for a DFlash drafter matched to `target_config` (hidden size, heads, rope)."""
    from dflash.model import build_target_layer_ids
    from transformers import Qwen3Config

    n_target = target_config.num_hidden_layers
    layer_ids = target_layer_ids or build_target_layer_ids(n_target, min(num_layers, 5))
    head_dim = getattr(target_config, "head_dim", None) or \
        target_config.hidden_size // target_config.num_attention_heads
    return Qwen3Config(
        vocab_size=target_config.vocab_size,
        hidden_size=target_config.hidden_size,
        intermediate_size=target_config.intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=target_config.num_attention_heads,
        num_key_value_heads=target_config.num_key_value_heads,
        head_dim=head_dim,
        rms_norm_eps=target_config.rms_norm_eps,
        max_position_embeddings=target_config.max_position_embeddings,
        rope_parameters=dict(getattr(target_config, "rope_parameters", None) or
                             {"rope_type": "default", "rope_theta": 10000.0}),
        num_target_layers=n_target,
        block_size=block_size,
        dflash_config={"mask_token_id": mask_token_id, "target_layer_ids": list(layer_ids)},
        tie_word_embeddings=False,
    )


def random_drafter(target, *, seed: int = 0, mask_token_id: int | None = None, **kw):
    """A randomly initialised drafter of the right shape: exact decoding, little acceptance."""
    if mask_token_id is None:
        mask_token_id = default_mask_id(target)
    cfg = drafter_config(target.config, mask_token_id=mask_token_id, **kw)
    torch.manual_seed(seed)
    return drafter_class(cfg)(cfg)


def default_mask_id(target) -> int:
    """The embedded model's unused special token; otherwise the last row of the embedding table."""
    n = target.get_input_embeddings().weight.shape[0]
    if getattr(target.config, "vocab_size", None) == SMOLLM2_VOCAB:
        return SMOLLM2_MASK_ID
    return n - 1


def load_drafter(name: str | None, target, device: torch.device, dtype: torch.dtype,
                 target_name: str = EMBEDDED_NAME, trust_remote_code: bool = False):
    """'default' (the shipped drafter for the embedded target, else random), 'random', a folder or a hub id."""
    name = name or "default"
    if name == "default":
        name = default_drafter(target_name)
    if name == "none":
        return None, "none"
    if name == "random":
        return random_drafter(target).to(device=device, dtype=dtype).eval(), "random"
    from transformers import AutoConfig

    from .variants import draft_value

    def load(src: str, local: bool):
        cfg = AutoConfig.from_pretrained(src, trust_remote_code=trust_remote_code, local_files_only=local)
        ids = draft_value(cfg, "target_layer_ids", _ABSENT)
        if ids is not _ABSENT:  # before the weights: an empty or odd list would fail unnamed (on fc's shape)
            check_layer_ids(ids, target.config.num_hidden_layers)
        cls = drafter_class(cfg)
        return cls, *cls.from_pretrained(src, dtype=dtype, output_loading_info=True, local_files_only=local)

    try:
        cls, model, info = load_pretrained("drafter", name, load)
    except InputError:
        raise
    except Exception as e:
        raise InputError("drafter", f"could not load {name!r}: {str(e).splitlines()[0]}") from e
    missing = sorted(info.get("missing_keys") or [])
    if missing:  # from_pretrained would start these at random: a folder of another format
        raise InputError("drafter", f"{name} lacks the weight {missing[0]!r} that a {cls.__name__} needs"
                         + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    check_pair(target, model)
    return model.to(device).eval(), name


def output_rows(target) -> int:
    """The target's output vocabulary: the rows of its LM head."""
    head = getattr(target, "lm_head", None)
    return (head if head is not None else target.get_output_embeddings()).weight.shape[0]


def has_vocab_weights(drafter) -> bool:
    """Whether the drafter holds vocabulary-sized weights of its own (DFlash 2's candidate selector,
    Domino's and DSpark's heads); a DFlash drafter reads only the target's embeddings and head."""
    from dflash import DFlash2DraftModel

    from .variants import SequentialDrafter

    return isinstance(drafter, (DFlash2DraftModel, SequentialDrafter))


def check_layer_ids(ids, n: int) -> None:
    """target_layer_ids: a non-empty list of whole numbers 0 <= i < n, the target's layers whose outputs
    the drafter reads (a negative index would wrap around, to the embeddings' output for -1)."""
    if not isinstance(ids, (list, tuple)) or not ids:
        raise InputError("drafter", f"target_layer_ids {ids!r} is not a non-empty list of the target's "
                         f"layer indices (0 to {n - 1})")
    bad = [i for i in ids if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n]
    if bad:
        raise InputError("drafter", f"target_layer_ids {list(ids)!r}: {bad[0]!r} is not a layer of the "
                         f"target (whole numbers 0 to {n - 1}: it has {n} layers)")


def check_pair(target, drafter) -> None:
    """The drafter must read this target's features and use its embedding table."""
    tc, dc = target.config, drafter.config
    if dc.hidden_size != tc.hidden_size:
        raise InputError("drafter", f"hidden size {dc.hidden_size} != target's {tc.hidden_size}")
    check_layer_ids(drafter.target_layer_ids, tc.num_hidden_layers)
    rows = target.get_input_embeddings().weight.shape[0]
    mid = drafter.mask_token_id
    if isinstance(mid, bool) or not isinstance(mid, int) or not 0 <= mid < rows:  # 3.7 would truncate to 3
        raise InputError("drafter", f"mask_token_id {drafter.mask_token_id} is not a row of the "
                         f"target's embedding table ({rows} rows)")
    if has_vocab_weights(drafter):
        vocab, own = output_rows(target), getattr(dc, "vocab_size", None)
        if own != vocab:
            raise InputError("drafter", f"vocab_size {own} != the target's output vocabulary ({vocab} rows "
                             f"in its LM head): a {type(drafter).__name__}'s own weights are vocabulary-sized")


def in_dtype(models: Models, dtype: torch.dtype) -> Models:
    """The same target and drafter in another dtype, without loading them again: parameters cast (no full-size
    copy in the old dtype on the way), buffers kept (the rotary frequencies stay fp32), shared weights still
    shared; checked on the embedded pair: the very tensors a load with --dtype gives. A run's feature taps
    (features.py: they hold a thread-local) are not copied: the copy's first run taps its own layers.

    Each parameter keeps its requires_grad as loaded: torch's matmul folds a batched input onto a 2-D weight
    (one mm) only for a weight that requires grad or an input whose leading strides fold; with requires_grad off
    a strided (1, n, d) input went through bmm with the weight expanded, copying the 49152-row head at every
    draft (the bfloat16 copy drafted at 55-280 ms a call against 13 ms for a bfloat16 load)."""
    import copy

    def cast(m):
        if m is None:
            return None
        memo = {id(p): torch.nn.Parameter(p.detach().to(dtype), requires_grad=p.requires_grad) for p in m.parameters()}
        for mod in m.modules():
            if isinstance(mod.__dict__.get("_feature_taps"), dict):
                memo[id(mod.__dict__["_feature_taps"])] = {}
        return copy.deepcopy(m, memo).eval()

    return replace(models, target=cast(models.target), drafter=cast(models.drafter), dtype=dtype)


def load_models(target: str | None = None, drafter: str | None = None, device: str = "auto",
                dtype: str | None = "auto", trust_remote_code: bool = False,
                draft_dtype: str | None = "auto") -> Models:
    """Target in `dtype` (auto: fp32 on CPU for exactness, bf16 on CUDA); drafter in `draft_dtype`
    (auto: as the target; drafts need not be exact, but on this project's CPU a bf16 drafter
    measured 2.8x slower per call than fp32)."""
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    ddt = resolve_dtype(draft_dtype, dev, "draft_dtype") if draft_dtype not in (None, "", "auto") else dt
    tname = target or EMBEDDED_NAME
    tgt, tok = load_target(tname, dev, dt, trust_remote_code)
    drf, dname = load_drafter(drafter, tgt, dev, ddt, tname, trust_remote_code)
    return Models(tgt, tok, drf, dev, dt, tname, dname, draft_dtype or "auto")
