"""Model folders and options that do not fit: exit 2 and `error: field: message` naming what is wrong, never a
crash mid-decode or a silent random weight; folders that fit still load and decode.

The drafter must match the target's output vocabulary when it has vocabulary-sized weights of its own (DFlash 2,
Domino, DSpark), read layers the target has (target_layer_ids: whole numbers 0 <= i < num_hidden_layers); the
target folder must hold every weight, and a tokenizer no larger than its embedding table; --device, --draft-dtype,
--max-trie-nodes and --max-shifted name themselves and the range. A name that is no folder says so, and as a hub id
it is read from the HF cache first, failing at once (no retries) when it is not there and the hub cannot be reached;
a drafter's block size that leaves no room in the target's context is named (not max_new_tokens)."""
import hashlib
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoConfig

from conftest import ROOT
from engine.__main__ import main
from engine.errors import InputError
from engine.models import drafter_class, drafter_config, load_models, load_target, resolve_device
from engine.models.variants import variant_config
from engine.options import parse_max_shifted, parse_max_trie_nodes
from tiny import save_tiny, tiny_target, tiny_tokenizer

N_LAYERS = 4  # tiny.tiny_target's


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Tiny llama (tied embeddings) and qwen3 targets, each with its DFlash drafter, 8 ids each."""
    root = tmp_path_factory.mktemp("models")
    llama, llama_drafter = save_tiny(root, "llama", 0, block_size=6)
    qwen3, _ = save_tiny(root, "qwen3", 0, block_size=6)
    return {"root": root, "llama": llama, "llama_drafter": llama_drafter, "qwen3": qwen3}


def head_drafter(target_dir, folder, kind: str, vocab: int):
    """A random drafter of `kind` (dflash, dflash2, domino, dspark) for the target in `target_dir`, whose
    config says vocab_size `vocab` (its vocabulary-sized weights are that many rows), saved in `folder`."""
    cfg = drafter_config(AutoConfig.from_pretrained(target_dir), num_layers=1, block_size=6, mask_token_id=3)
    cfg.vocab_size = vocab
    if kind == "dflash2":
        cfg.dflash_config.update(conv_kernel_size=3, conv_group_size=16, selector_rank=8, selector_top_k=4)
    elif kind in ("domino", "dspark"):
        cfg = variant_config(cfg, kind, rank=8, gru_hidden=16)
    torch.manual_seed(0)
    d = drafter_class(cfg)(cfg).eval()
    if kind == "dflash2":
        with torch.no_grad():  # its base kernels start uninitialised
            for layer in d.layers:
                for conv in (layer.attention_conv, layer.mlp_conv):
                    conv.base_kernel.normal_(0, 0.1)
    d.save_pretrained(folder)
    return folder


def cli(capsys, *args):
    """`python -m engine generate` in-process: (exit code, last stderr line, stdout); a crash reads as exit 1."""
    argv = ["generate", "--prompt", "ab", "--max-new-tokens", "6", "--json", *map(str, args)]
    try:
        rc = main(argv)
    except Exception as e:  # what the CLI would print as a traceback (exit 1)
        rc, crash = 1, f"Traceback: {type(e).__name__}: {e}"
    else:
        crash = None
    cap = capsys.readouterr()
    err = [ln for ln in cap.err.strip().splitlines() if ln.strip()]
    return rc, crash or (err[-1] if err else ""), cap.out


def refused(capsys, field: str, needles, *args):
    """Exit 2, the last line `error: field: ...` and every needle in it (folder paths blanked: the tmp folders
    carry the test's name)."""
    rc, line, _ = cli(capsys, *args)
    assert rc == 2 and line.startswith(f"error: {field}: "), (rc, line)
    text = line
    for a in sorted(map(str, args), key=len, reverse=True):
        text = text.replace(a, "<path>") if "/" in a else text
    for needle in [needles] if isinstance(needles, str) else needles:
        assert needle in text, (needle, line)
    return line


def decodes(capsys, *args):
    rc, line, out = cli(capsys, *args)
    assert rc == 0, line
    assert len(json.loads(out)["output_ids"]) >= 1


def edit_config(src, dst, change):
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    change(cfg)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


# -- 1. the drafter's own vocabulary-sized weights ---------------------------------------------------------

@pytest.mark.parametrize("kind", ["domino", "dspark", "dflash2"])
def test_a_drafter_with_its_own_vocabulary_must_match_the_target(tiny, tmp_path, capsys, kind):
    target = tiny["qwen3"]
    rows = AutoConfig.from_pretrained(target).vocab_size
    for vocab in (rows - 3, rows + 4):  # smaller: ids beyond its tables; larger: logits of the wrong width
        folder = head_drafter(target, tmp_path / f"{kind}-{vocab}", kind, vocab)
        refused(capsys, "drafter", [f"vocab_size {vocab}", f"{rows} rows"], "--target", target, "--drafter", folder)
    decodes(capsys, "--target", target, "--drafter", head_drafter(target, tmp_path / kind, kind, rows))
    if kind == "dflash2":  # a DFlash drafter has no vocabulary weights: its vocab_size is not read
        decodes(capsys, "--target", target, "--drafter", head_drafter(target, tmp_path / "dflash", "dflash", rows + 4))


def test_the_cli_exits_2_naming_the_drafter(tiny, tmp_path, capfd):
    """All the command prints (capfd: the stderr file, loggers included), from its main in this process: a python
    of its own re-imported torch for this one line (test_cli.py runs the command line)."""
    target = tiny["qwen3"]
    folder = head_drafter(target, tmp_path / "domino", "domino", AutoConfig.from_pretrained(target).vocab_size + 4)
    capfd.readouterr()
    rc = main(["generate", "--prompt", "ab", "--max-new-tokens", "6", "--target", str(target), "--drafter",
               str(folder), "--device", "cpu"])
    err = capfd.readouterr().err
    assert rc == 2, err[-2000:]
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("error: drafter: vocab_size 12 != "), err[-2000:]


# -- 2. target_layer_ids ------------------------------------------------------------------------------------

@pytest.mark.parametrize("ids", [[-10], [-1], [N_LAYERS], [2.0], "2", [], [True], 2, None, [[1]]],
                         ids=lambda v: repr(v))
def test_target_layer_ids_must_be_layers_of_the_target(tiny, tmp_path, capsys, ids):
    def change(cfg):
        cfg["dflash_config"]["target_layer_ids"] = ids
    folder = edit_config(tiny["llama_drafter"], tmp_path / "drafter", change)
    refused(capsys, "drafter", [f"target_layer_ids {ids!r}", f"0 to {N_LAYERS - 1}"],
            "--target", tiny["llama"], "--drafter", folder)


def test_every_layer_of_the_target_may_be_read(tiny, tmp_path, capsys):
    for i in (0, N_LAYERS - 1):
        def change(cfg):
            cfg["dflash_config"]["target_layer_ids"] = [i]
        folder = edit_config(tiny["llama_drafter"], tmp_path / f"drafter{i}", change)
        decodes(capsys, "--target", tiny["llama"], "--drafter", folder)
    # and not one past the last, nor the embeddings' output
    refused(capsys, "drafter", ["target_layer_ids", f"0 to {N_LAYERS - 1}"], "--target", tiny["llama"],
            "--drafter", edit_config(tiny["llama_drafter"], tmp_path / "neg",
                                     lambda c: c["dflash_config"].update(target_layer_ids=[-1])))


@pytest.mark.parametrize("field", ["conv_group_size", "selector_rank", "selector_top_k"])
def test_a_dflash2_config_names_its_missing_field(tiny, tmp_path, capsys, field):
    folder = head_drafter(tiny["llama"], tmp_path / "d2", "dflash2", 8)
    edit = edit_config(folder, tmp_path / "d2-partial", lambda c: c["dflash_config"].pop(field))
    refused(capsys, "drafter", f"config.json has no dflash_config.{field} (a DFlash 2 drafter needs it)",
            "--target", tiny["llama"], "--drafter", edit)


@pytest.mark.parametrize("mask", [3.7, "3", True, -1, 99], ids=repr)
def test_the_mask_token_must_be_a_row_of_the_table(tiny, tmp_path, capsys, mask):
    folder = edit_config(tiny["llama_drafter"], tmp_path / "drafter",
                         lambda c: c["dflash_config"].update(mask_token_id=mask))
    refused(capsys, "drafter", f"mask_token_id {mask}", "--target", tiny["llama"], "--drafter", folder)


# -- 3. a target folder missing weights ----------------------------------------------------------------------

def test_a_target_missing_weights_is_refused(tiny, tmp_path, capsys):
    broken = tmp_path / "target"
    shutil.copytree(tiny["llama"], broken)
    w = load_file(broken / "model.safetensors")
    w.pop("model.layers.1.mlp.up_proj.weight")
    save_file(w, broken / "model.safetensors", metadata={"format": "pt"})
    refused(capsys, "target", "model.layers.1.mlp.up_proj.weight", "--target", broken, "--drafter", "random")
    # a drafter's folder passed as the target: it has no embedding table or head
    refused(capsys, "target", ["model.embed_tokens.weight", "lm_head.weight", "drafter"],
            "--target", tiny["llama_drafter"], "--mode", "ar")
    # complete folders load as before: tied embeddings (llama: no lm_head.weight stored) and untied (qwen3)
    assert "lm_head.weight" not in load_file(tiny["llama"] / "model.safetensors")
    for name in ("llama", "qwen3"):
        decodes(capsys, "--target", tiny[name], "--drafter", "random")
    # and the embedded SmolLM2 (tied embeddings, from the GGUF), when it has been converted already
    from engine.models.embedded import cache_dir

    if (cache_dir() / "model.safetensors").is_file():
        model, tok = load_target("embedded", torch.device("cpu"), torch.float32)
        assert len(tok) <= model.get_input_embeddings().weight.shape[0] == 49152


# -- 4. a tokenizer larger than the embedding table ----------------------------------------------------------

def test_a_tokenizer_larger_than_the_embedding_table_is_refused(tiny, tmp_path, capsys):
    big = tmp_path / "big-tokenizer"
    shutil.copytree(tiny["llama"], big)
    tok = tiny_tokenizer("abcdefghij :.,?")  # 19 ids; the model has 8 rows
    tok.save_pretrained(big)
    refused(capsys, "target", ["19 ids", "8 rows"], "--target", big, "--drafter", "random", "--prompt", "hij")
    # fewer ids than rows (a padded vocabulary) is normal
    padded = tmp_path / "padded"
    tiny_target("qwen3", vocab_size=12).save_pretrained(padded)
    tiny_tokenizer("ab c").save_pretrained(padded)
    m = load_models(str(padded), "random", "cpu", "float32")
    assert len(m.tokenizer) == 8 and m.target.get_input_embeddings().weight.shape[0] == 12


# -- 5. options -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args,field,needle", [
    (["--draft-dtype", "float64"], "draft_dtype", "unknown dtype 'float64'"),
    (["--device", "meta"], "device", "'meta'"),
    (["--device", "mps"], "device", "'mps'"),
    (["--device", "xpu:0"], "device", "'xpu:0'"),
    (["--device", "cpu:3"], "device", "'cpu:3'"),
    (["--max-trie-nodes", "0"], "max_trie_nodes", "must be at least 1, got 0"),
    (["--max-shifted", "-1"], "max_shifted", "must be at least 0, got -1"),
])
def test_bad_options_name_the_option_and_the_problem(tiny, capsys, args, field, needle):
    refused(capsys, field, needle, "--target", tiny["llama"], "--drafter", tiny["llama_drafter"], *args)


def test_option_words_and_numbers():
    with pytest.raises(InputError, match="^dtype: unknown dtype 'float64'"):
        load_models("unused", "unused", "cpu", "float64")
    for value, want in (("3", 3), (" AUTO ", "auto"), ("all", None), (None, None), (2, 2)):
        assert parse_max_shifted(value) == want
    for bad, message in (("many", "'many' is not a whole number, 'all' or 'auto'"), ("2.5", "'2.5' is not a whole"),
                         ("-3", "must be at least 1, got -3")):
        with pytest.raises(InputError, match=f"^max_trie_nodes: {message}"):
            parse_max_trie_nodes(bad)
    with pytest.raises(InputError, match="^max_shifted: must be at least 0, got -1"):
        parse_max_shifted("-1")


def test_caps_fit_a_trace_and_messages_stay_short():
    """The largest cap a control accepts still fits the trace a run saves (a larger one used to run
    to the end, then fail at export); a huge bad value is quoted cut short, not whole."""
    from engine.decode import DecodeConfig, Engine
    from engine.options import MAX_SHIFTED, MAX_TRIE_NODES, to_int
    from engine.trace import validate_trace
    from tiny import tiny_models
    for field, parse, cap in (("max_trie_nodes", parse_max_trie_nodes, MAX_TRIE_NODES),
                              ("max_shifted", parse_max_shifted, MAX_SHIFTED)):
        with pytest.raises(InputError, match=f"^{field}: must be at most {cap}"):
            parse("1" + "0" * 30)
    eng = Engine(tiny_models("llama", 0))
    run = eng.run(eng.encode_prompt("ab"), DecodeConfig(max_new_tokens=6, max_shifted=str(MAX_SHIFTED),
                                                        max_trie_nodes=MAX_TRIE_NODES))
    run.finish()
    assert validate_trace(run.trace())["config"]["max_trie_nodes"] == MAX_TRIE_NODES
    with pytest.raises(InputError) as e:
        to_int("9x" * 50_000, "seed")
    assert len(str(e.value)) < 120


def test_cuda_devices_must_exist(monkeypatch):
    """cuda and cuda:N with N below the device count; others refused (the CUDA branch, faked on a CPU machine)."""
    assert resolve_device("cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("cuda") == torch.device("cuda")
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    for bad in ("cuda:2", "cuda:7", "meta", "gpu", "cuda:x"):
        with pytest.raises(InputError) as e:
            resolve_device(bad)
        assert e.value.field == "device" and bad in str(e.value)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(InputError, match="^device: .*no CUDA device"):
        resolve_device("cuda:0")


# -- 6. names: a folder, a hub id in the HF cache, a hub id to download ----------------------------------------

LOAD = """
import json, sys, time, torch
from engine.errors import InputError
from engine.models import load_drafter, load_target
cpu, f32 = torch.device("cpu"), torch.float32
target = load_target(sys.argv[1], cpu, f32)[0]
for field, name in json.loads(sys.argv[2]):
    t = time.perf_counter()
    try:
        load_target(name, cpu, f32) if field == "target" else load_drafter(name, target, cpu, f32)
        error = None
    except InputError as e:
        error = str(e)
    print(json.dumps([error, time.perf_counter() - t]))
"""


def hub_loads(target, loads, cache, endpoint: str, offline: bool = False) -> list:
    """[error or None, seconds] of load_target / load_drafter per (field, name) of `loads`, in a python whose
    Hugging Face cache is `cache` and hub `endpoint` (HF_ENDPOINT is read at import: a process of its own)."""
    env = {k: v for k, v in os.environ.items() if "PROXY" not in k.upper() and k not in
           ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN")}
    env.update(HF_HUB_CACHE=str(cache), HF_ENDPOINT=endpoint, OMP_NUM_THREADS="1",
               **({"HF_HUB_OFFLINE": "1"} if offline else {}))
    p = subprocess.run([sys.executable, "-c", LOAD, str(target), json.dumps(loads)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return [json.loads(line) for line in p.stdout.splitlines()]


class FakeHub(http.server.BaseHTTPRequestHandler):
    """The hub's download routes over folders `repos`/<owner>/<name>: enough for transformers to download them."""
    repos: Path

    def do_HEAD(self, body: bool = False):
        parts = self.path.split("?")[0].strip("/").split("/")
        if parts[:2] == ["api", "models"]:  # listing a repo's files (chat templates): none
            repo, data = self.repos.joinpath(*parts[2:4]), b"[]"
        else:  # /<owner>/<name>/resolve/<revision>/<file>
            repo = self.repos.joinpath(*parts[:2])
            file = repo.joinpath(*parts[4:])
            data = file.read_bytes() if file.is_file() else None
        code = None if data is not None else "EntryNotFound" if repo.is_dir() else "RepoNotFound"
        self.send_response(404 if code else 200)
        if code:
            self.send_header("X-Error-Code", code)
        else:
            self.send_header("X-Repo-Commit", "0" * 40)
            self.send_header("ETag", f'"{hashlib.sha1(data).hexdigest()}"')
        self.send_header("Content-Length", str(len(data or b"")))
        self.end_headers()
        if body and data:
            self.wfile.write(data)

    def do_GET(self):
        self.do_HEAD(body=True)

    def log_message(self, *args):
        pass


def test_hub_ids_download_when_the_hub_answers_and_load_from_the_cache_without_it(tiny, tmp_path):
    repos = tmp_path / "repos"
    shutil.copytree(tiny["llama"], repos / "tiny" / "target")
    shutil.copytree(tiny["llama_drafter"], repos / "tiny" / "drafter")
    hub = http.server.ThreadingHTTPServer(("127.0.0.1", 0), type("Hub", (FakeHub,), {"repos": repos}))
    threading.Thread(target=hub.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{hub.server_address[1]}"
    loads = [["target", "tiny/target"], ["drafter", "tiny/drafter"], ["drafter", "tiny/missing"]]
    snapshot = tmp_path / "cache" / "models--tiny--target" / "snapshots" / ("0" * 40)  # the target partly cached:
    snapshot.mkdir(parents=True)                                                      # only its config.json
    shutil.copy(tiny["llama"] / "config.json", snapshot)
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("0" * 40)
    try:
        (target, _), (drafter, _), (missing, _) = hub_loads(tiny["llama"], loads, tmp_path / "cache", endpoint)
    finally:
        hub.shutdown()
        hub.server_close()
    assert target is None and drafter is None, (target, drafter)
    assert missing == "drafter: there is no folder 'tiny/missing' here, and no hub model 'tiny/missing' " \
                      "(a private one needs `hf auth login`)", missing
    # the hub gone (its port closed) or HF_HUB_OFFLINE: what was downloaded loads from the cache, and fast
    for offline in (False, True):
        (target, _), (drafter, _), (missing, seconds) = hub_loads(tiny["llama"], loads, tmp_path / "cache",
                                                                  endpoint, offline)
        assert target is None and drafter is None, (target, drafter)
        why = "HF_HUB_OFFLINE is set" if offline else "127.0.0.1 is unreachable (Connection refused)"
        assert missing == "drafter: there is no folder 'tiny/missing' here, and as a hub id it is not in the " \
                          f"Hugging Face cache and {why}", missing
        assert seconds < 3, seconds


def test_a_hub_id_out_of_the_cache_fails_at_once_without_the_hub(tiny, tmp_path):
    """transformers retried for ~30 s (offline, huggingface.co unresolvable) before it failed; a typo of a folder
    (one slash) reads as a hub id too, and the message names both readings."""
    loads = [["target", "someone/nonexistent"], ["drafter", "someone/nonexistent"], ["drafter", "asset/drafters"]]
    got = hub_loads(tiny["llama"], loads, tmp_path / "empty-cache", "http://127.0.0.1:9")
    for (field, name), (error, seconds) in zip(loads, got):
        assert error.startswith(f"{field}: there is no folder {name!r} here, and as a hub id it is not in the "
                                f"Hugging Face cache and 127.0.0.1 is unreachable"), error
        assert seconds < 3, got


def test_a_name_that_can_only_be_a_folder_says_there_is_no_such_folder(tiny, capsys):
    """Two slashes: no hub id ('Repo id must be in the form ...' said nothing of the folder)."""
    refused(capsys, "drafter", "there is no folder '<path>'", "--target", tiny["llama"],
            "--drafter", "assets/drafterz/x")
    refused(capsys, "target", "there is no folder '<path>'", "--target", "assets/targetz/x")


def test_a_block_too_large_for_the_context_names_the_block_size(tiny, tmp_path, capsys):
    """A block size with no room left in the target's context was blamed on max_new_tokens."""
    big = edit_config(tiny["llama_drafter"], tmp_path / "big-block", lambda c: c.update(block_size=300))
    args = ["--target", tiny["llama"], "--drafter", big]
    # (a block over engine.options.MAX_BLOCK_SIZE is refused as such first: tests/test_limits.py)
    line = refused(capsys, "drafter", ["its block size 300 is over the bound of 32"], *args)
    assert "max_new_tokens" not in line
    refused(capsys, "block_size", "must be at most 32, got 260", *args, "--block-size", "260")
    decodes(capsys, *args, "--block-size", "32")
    # a max_new_tokens that does not fit is still named so
    refused(capsys, "max_new_tokens", "500 does not fit", *args, "--block-size", "8", "--max-new-tokens", "500")


# -- the embedded target's first start --------------------------------------------------------------------------

def test_processes_starting_together_on_an_empty_cache_convert_the_gguf_once(tmp_path, monkeypatch):
    """The GGUF's de-quantisation (~25 s of a core) is done once when several starts need it at once (an app and a
    bench, two test workers on a fresh machine): the others wait on the cache's lock and read the folder it wrote.
    The conversion here stands in for transformers' (it writes the two files the cache is known by); the lock and
    the cache folder are the real ones. flock locks each open of the file, so threads contend as processes do."""
    from engine.models import embedded

    monkeypatch.setenv("REANCHOR_CACHE", str(tmp_path))
    calls, inside, most = [], [0], [0]
    lock = threading.Lock()
    entered = threading.Barrier(3)
    found_empty, looked = set(), threading.Condition()
    converted = embedded._converted

    def looks(out: Path) -> bool:   # the real check, noting each thread that found no cache yet
        done = converted(out)
        if not done:
            with looked:
                found_empty.add(threading.get_ident())
                looked.notify_all()
        return done

    def convert(out: Path) -> None:
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        calls.append(out)
        with looked:   # every start has found the cache empty, so each will want to convert: the race is on
            assert looked.wait_for(lambda: len(found_empty) == 3, timeout=30), found_empty
        tmp = out.with_name(out.name + f".tmp{threading.get_ident()}")
        tmp.mkdir()
        (tmp / "model.safetensors").write_bytes(b"weights")
        (tmp / "tokenizer.json").write_text("{}")
        os.replace(tmp, out)
        with lock:
            inside[0] -= 1

    monkeypatch.setattr(embedded, "_converted", looks)
    monkeypatch.setattr(embedded, "_convert", convert)
    got = []

    def start() -> None:
        entered.wait()
        got.append(embedded.embedded_dir())

    threads = [threading.Thread(target=start) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(calls) == 1 and most[0] == 1, calls
    assert got == [tmp_path / "smollm2-135m-instruct"] * 3
    assert (got[0] / "model.safetensors").read_bytes() == b"weights"
