"""The static-shape round (engine/decode/static.py) on the CPU, where it runs without capture: lossless in every mode
and rule, and round for round the eager Engine's (the same tries, accepted nodes and tokens), for every drafter kind;
its buckets pad, its slots are per run and reused, and what it cannot do is refused by name."""
import pytest

from engine.decode import DecodeConfig, Engine
from engine.decode.cost import _PROFILES, budget_for, engine_profile
from engine.decode.static import StaticEngine, bucket
from engine.errors import InputError
from engine.decode.checks import LOSSLESS_PROMPTS as PROMPTS, greedy_reference, lossless_configs as configs
from tiny import dflash2_models, tiny_models, tiny_variant_models

N_NEW = 20


def record(r: dict, approx: bool = False) -> tuple:
    """What a round decided, exactly, and the drafter's probabilities and scores to 2e-4: the static calls pad their
    rows and mask the padding, which can move a float's last bits (the scores are rounded to 4 digits)."""
    trie = {k: v for k, v in r["trie"].items() if k not in ("prob", "score")}
    floats = [r["trie"].get(k) for k in ("prob", "score")]
    floats = [pytest.approx(f, abs=2e-4) for f in floats] if approx else floats
    return trie, floats, r["accepted"], r["new_tokens"], r["accepted_nodes"]


def both(eager: Engine, static: StaticEngine, ids: list[int], cfg: DecodeConfig) -> tuple[list, list]:
    runs = []
    for eng in (eager, static):
        run = eng.run(ids, cfg, budget_for(eng, cfg))
        run.finish()
        runs.append(run)
    return runs


def test_every_mode_and_rule_is_lossless_and_the_eager_rounds():
    padded = 0
    for kind in ("llama", "qwen3"):
        for seed in range(2):
            m = tiny_models(kind, seed, block_size=4 + seed % 3)
            eager, static = Engine(m), StaticEngine(m)
            ids = eager.encode_prompt(PROMPTS[seed])
            want = greedy_reference(m.target, ids, N_NEW)
            for mode, rule in configs():
                cfg = DecodeConfig(mode=mode, rule=rule, max_new_tokens=N_NEW, seed=seed, ignore_eos=True)
                a, b = both(eager, static, ids, cfg)
                assert b.result["output_ids"] == want, (kind, seed, mode, rule)
                assert [record(r) for r in b.rounds] == [record(r, True) for r in a.rounds], (kind, seed, mode, rule)
                padded += sum(len(r["trie"]["tokens"]) != bucket(len(r["trie"]["tokens"])) for r in b.rounds)
    assert padded > 30, "few verifies were padded: the test proves little about the padding"


@pytest.mark.parametrize("make", [lambda: dflash2_models(1), lambda: tiny_variant_models("domino", 0),
                                  lambda: tiny_variant_models("dspark", 0),
                                  lambda: tiny_variant_models("domino", 1, block_size=5, shift_label=True)],
                         ids=["dflash2", "domino", "dspark", "domino-shift-label"])
def test_every_drafter_kind_at_t0_and_t1(make):
    """DFlash 2's selector and the sequential heads pick their tokens on the host from the static call's states;
    at T = 1 the sampled drafts and the acceptance draws follow the run's seed on both paths. Trees are checked
    lossless only: the static drafter call (its context in the preallocated buffer, the padding masked) moves these
    drafters' states by about 1e-7, which can break a near-tie between two candidate nodes the other way (seen with
    DSpark and the shift-label Domino in reanchor-tree); a chain's tokens are argmax or seeded draws, which it
    does not move."""
    m = make()
    eager, static = Engine(m), StaticEngine(m)
    ids = eager.encode_prompt("ab c")
    want = greedy_reference(m.target, ids, N_NEW)
    for mode in ("dflash", "reanchor", "ddtree", "reanchor-tree"):
        for T in (0.0, 1.0) if mode in ("dflash", "reanchor") else (0.0,):
            cfg = DecodeConfig(mode=mode, temperature=T, seed=5, max_new_tokens=N_NEW, ignore_eos=True)
            a, b = both(eager, static, ids, cfg)
            assert T or b.result["output_ids"] == want, mode
            if mode in ("dflash", "reanchor"):
                assert [record(r) for r in b.rounds] == [record(r, True) for r in a.rounds], (mode, T)


def test_auto_budget_rounds_are_the_eager_ones():
    """The -auto modes with the profile's costs alone (calibration "fixed") and one profile for both engines: the
    budget then picks the same blocks and nodes, so the rounds must agree."""
    m = tiny_models("llama", 3, block_size=5)
    eager, static = Engine(m), StaticEngine(m)
    _PROFILES[static] = engine_profile(eager, reps=1)
    ids = eager.encode_prompt("ab c")
    want = greedy_reference(m.target, ids, N_NEW)
    for mode in ("dflash", "ddtree", "reanchor", "reanchor-tree"):
        cfg = DecodeConfig(mode=mode, max_shifted=None if mode in ("dflash", "ddtree") else "auto",
                           max_trie_nodes="auto", calibration="fixed", max_new_tokens=N_NEW, ignore_eos=True)
        a, b = both(eager, static, ids, cfg)
        assert b.result["output_ids"] == want, mode
        assert [record(r) for r in b.rounds] == [record(r, True) for r in a.rounds], mode
        assert [r.get("chosen") for r in b.rounds] == [r.get("chosen") for r in a.rounds], mode


def test_captured_shapes_without_capture():
    """fixed_shapes: keys over the whole preallocated buffer (stale slots and the padding hidden by the masks alone)
    and drafts through their static buffers, as a captured call takes them: still lossless and the eager rounds."""
    for kind, seed in (("llama", 2), ("qwen3", 3)):
        m = tiny_models(kind, seed, block_size=5)
        eager, static = Engine(m), StaticEngine(m, fixed_shapes=True)
        ids = eager.encode_prompt(PROMPTS[seed])
        want = greedy_reference(m.target, ids, N_NEW)
        for mode, rule in (("ar", "earliest"), ("dflash", "earliest"), ("reanchor", "latest"), ("ddtree", "earliest"),
                           ("reanchor-tree", "all")):
            cfg = DecodeConfig(mode=mode, rule=rule, max_new_tokens=N_NEW, ignore_eos=True)
            a, b = both(eager, static, ids, cfg)
            assert b.result["output_ids"] == want, (kind, mode)
            assert [record(r) for r in b.rounds] == [record(r, True) for r in a.rounds], (kind, mode)


@pytest.mark.parametrize("fixed", [False, True], ids=["spans", "fixed-shapes"])
def test_runs_hold_their_own_slots_and_reuse_them(fixed):
    """Two runs interleaved round by round on one engine each decode as alone (separate buffers); a later run takes
    a slot back with the last run's K/V and mask in it and still decodes exactly (with fixed shapes every key of
    the buffer is read: the last run's mask must be gone)."""
    m = tiny_models("qwen3", 1, block_size=5)
    static = StaticEngine(m, fixed_shapes=fixed)
    ids = [static.encode_prompt(p) for p in ("bbb aa", "c a b")]
    cfg = DecodeConfig(mode="reanchor-tree", max_new_tokens=N_NEW, ignore_eos=True)
    want = [greedy_reference(m.target, x, N_NEW) for x in ids]
    runs = [static.run(x, cfg) for x in ids]
    live = [iter(r) for r in runs]
    while live:
        for it in list(live):
            if next(it, None) is None:
                live.remove(it)
    assert [r.result["output_ids"] for r in runs] == want
    del runs, live
    assert len(static._slots) == 2          # both runs' slots are back
    for x, w in zip(reversed(ids), reversed(want)):   # each prompt now in the other's slot
        assert static.run(x, cfg).finish()["output_ids"] == w
    assert len(static._slots) == 2


def test_what_the_static_engine_refuses_is_named():
    m = tiny_models("llama", 0)
    with pytest.raises(InputError) as e:
        StaticEngine(m, capture=True)
    assert e.value.field == "capture"
    static = StaticEngine(m, context=40)
    ids = static.encode_prompt("ab")
    with pytest.raises(InputError) as e:
        static.run(ids, DecodeConfig(mode="dflash", max_new_tokens=60))
    assert e.value.field == "max_new_tokens" and "40" in str(e.value)
    assert static.run(ids, DecodeConfig(mode="dflash", max_new_tokens=40 - len(ids), ignore_eos=True)).finish()
    with pytest.raises(InputError) as e:
        StaticEngine(tiny_models("mistral", 0, window=4))
    assert e.value.field == "target"


def test_time_calls_runs_on_the_static_buffers():
    """The auto budget's profile times the static engine's own calls (its buckets), through its slot."""
    static = StaticEngine(tiny_models("llama", 0, block_size=4))
    t = static.time_calls((1, 3), (1, 5), context=32, reps=1)
    assert len(t["verify_ms"]) == 2 and len(t["draft_ms"]) == 2 and min(t["verify_ms"] + t["draft_ms"]) > 0
    assert len(static._slots) == 1
