"""Drafter training's train state and data folder (engine/train/): a run killed and resumed ends where an uninterrupted
one does; a state is resumed only by the run it belongs to (its --init-from, --backbone-from and target); --data
serves its own target, each response once. Tiny folder target, CPU, seconds."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from engine.train import checkpoint as CK
from engine.train import cli as C
from engine.train import main as T
from engine.train.flags import check_args

sys.path.insert(0, str(Path(__file__).parent))


class Killed(Exception):
    pass


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A tiny target, its responses under data/, and a 1-layer DFlash backbone trained on them (base/)."""
    from tiny import save_tiny

    tmp = tmp_path_factory.mktemp("resume")
    target, _ = save_tiny(tmp, "llama", 0)
    common = ["--target", str(target), "--data", str(tmp / "data"), "--prompts", "8", "--eval-prompts", "2",
              "--max-new-tokens", "12", "--gen-batch", "4", "--layers", "1", "--block-size", "4", "--mask-id", "3",
              "--batch", "2", "--anchors", "4", "--max-minutes", "5", "--save-every", "0"]
    train(common, "--out", str(tmp / "base"), "--steps", "2")
    return tmp, common + ["--no-gen"]


def train(common: list[str], *extra: str, kill_after: int | None = None) -> int:
    """One `python -m engine train` run in this process; with `kill_after`, it dies right after that step's save."""
    args = C.build_parser().parse_args(common + list(extra))
    save = T.Trainer.save

    def save_then_die(self, final=False):
        r = save(self, final)
        if kill_after is not None and self.step == kill_after and not final:
            raise Killed
        return r
    T.Trainer.save = save_then_die
    try:
        return C.main(args)
    except Killed:
        return -1
    finally:
        T.Trainer.save = save


HEAD = ["--variant", "dspark", "--head-depth", "2", "--head-rank", "4", "--negatives", "8"]


@pytest.mark.parametrize("flags", [["--head-topk", "4", "--negatives", "8"], HEAD], ids=["dflash-topk", "dspark"])
def test_killed_and_resumed_equals_uninterrupted(work, flags):
    """--head-topk's negatives (torch's global RNG) and a head's cached rows (its own generator) were drawn afresh
    on resume: the resumed run's first steps trained on other batches."""
    tmp, common = work
    flags = flags + (["--init-from", str(tmp / "base")] if "--variant" in flags else [])
    a, b = tmp / "whole", tmp / "killed"
    assert train(common, *flags, "--out", str(a), "--steps", "5", "--fresh") == 0
    assert train(common, *flags, "--out", str(b), "--steps", "5", "--fresh", kill_after=2) == -1
    assert train(common, *flags, "--out", str(b), "--steps", "5") == 0
    wa, wb = CK.folder_state(a), CK.folder_state(b)
    assert json.loads((b / "train_log.json").read_text())["steps"] == 5
    assert all(torch.equal(wa[k], wb[k]) for k in wa), max((wa[k].float() - wb[k].float()).abs().max() for k in wa)


def cli_err(common: list[str], *extra: str, capsys) -> tuple[int, str]:
    from engine.__main__ import main

    capsys.readouterr()
    rc = main(["train", *common, *extra])
    return rc, capsys.readouterr().err


def test_state_of_another_backbone_is_refused(work, capsys):
    """A head's saved state holds its backbone: a run with a new --backbone-from resumed it, put the old backbone
    back and exported that. Refused before anything loads, naming the flag and --fresh; --fresh trains on Y."""
    tmp, common = work
    y, out = tmp / "base-y", tmp / "moved"
    assert train(common, "--out", str(y), "--steps", "1", "--seed", "1", "--fresh") == 0
    head = HEAD + ["--init-from", str(tmp / "base"), "--out", str(out), "--steps", "2"]
    assert train(common, *head, "--fresh") == 0
    rc, err = cli_err(common, *head, "--backbone-from", str(y), capsys=capsys)
    assert rc == 2 and err.startswith("error: backbone_from: the train state ") and "--fresh" in err, err
    assert "head rows" not in capsys.readouterr().out   # refused before the backbone's rows were computed
    assert train(common, *head, "--backbone-from", str(y), "--fresh") == 0
    got, want = CK.folder_state(out), CK.folder_state(y)
    assert torch.equal(got["layers.0.mlp.down_proj.weight"], want["layers.0.mlp.down_proj.weight"].bfloat16())


def test_init_from_its_own_out_trains_on(work):
    """--init-from O --out O after a finished run into O: it trains on from O's export (it resumed the finished state
    and trained 0 steps, the card counting that run twice); killed and resumed, its lineage stays the one it began
    with."""
    tmp, common = work
    out = tmp / "own"
    head = HEAD + ["--out", str(out), "--steps", "3"]
    assert train(common, *head, "--init-from", str(tmp / "base"), "--fresh") == 0
    first = CK.folder_state(out)
    lineage1 = json.loads((out / "train_log.json").read_text())["lineage"]
    assert train(common, *head, "--init-from", str(out)) == 0
    log2 = json.loads((out / "train_log.json").read_text())
    assert log2["steps"] == 3 and log2["evals"][0]["step"] == 0   # three steps of its own, from its start
    w2 = "markov_head.markov_w2.weight"
    assert not torch.equal(first[w2], CK.folder_state(out)[w2])     # trained on, not 0 steps
    assert len(log2["lineage"]) == len(lineage1) + 1 and log2["lineage"][-1]["steps"] == 3
    assert train(common, *head, "--init-from", str(out), kill_after=1) == -1
    assert train(common, *head, "--init-from", str(out)) == 0
    log3 = json.loads((out / "train_log.json").read_text())
    assert len(log3["lineage"]) == len(lineage1) + 2 and log3["steps"] == 3, log3["lineage"]


def test_state_of_another_init_from_is_refused(work, capsys):
    """A DFlash run from --init-from base, killed; the same --out without --init-from would resume it silently."""
    tmp, common = work
    out = ["--out", str(tmp / "other-init"), "--steps", "3"]
    assert train(common, *out, "--init-from", str(tmp / "base"), "--fresh", kill_after=1) == -1
    rc, err = cli_err(common, *out, capsys=capsys)
    assert rc == 2 and err.startswith("error: init_from: the train state ") and "(none)" in err, err


def test_data_of_another_target_is_refused(work, capsys):
    """--data records its target: another target reused its responses (and replayed tau_sim on them) silently."""
    from tiny import save_tiny

    tmp, common = work
    other, _ = save_tiny(tmp / "tB", "llama", 1)
    with_b = [x if x != common[1] else str(other) for x in common]
    for flags in ([], ["--no-gen"]):
        gen = [x for x in with_b if x != "--no-gen"] + flags
        rc, err = cli_err(gen, "--out", str(tmp / "for-b"), "--steps", "1", capsys=capsys)
        assert rc == 2 and err.startswith("error: data: ") and "responses of target" in err, err
    assert not (tmp / "for-b").exists()


def test_more_data_and_prompts_count_each_response_once(work, capsys):
    """--more-data naming --data doubled its responses; fewer --prompts on a --data made with more read them all."""
    tmp, common = work
    data = common[common.index("--data") + 1]
    rc, err = cli_err(common, "--out", str(tmp / "twice"), "--steps", "1", "--more-data", data, capsys=capsys)
    assert rc == 2 and err.startswith("error: more_data: ") and "--data itself" in err, err
    first4 = [json.loads(x) for x in (tmp / "data" / "train-00000.jsonl").read_text().splitlines()]
    assert train(common, "--out", str(tmp / "four"), "--steps", "1", "--prompts", "4", "--fresh") == 0
    data = json.loads((tmp / "four" / "train_log.json").read_text())["data"]
    assert data["sequences"] == sum(len(r["response_ids"]) >= 2 for r in first4) and len(first4) == 4, data


@pytest.mark.parametrize("variant", [["--variant", "opd"], HEAD], ids=["opd", "dspark"])
def test_variants_keep_the_init_from_drafters_block_size(work, variant, capsys):
    """Draft-OPD and the heads train the --init-from drafter as it is: --block-size 6 on a B=4 drafter trained a B=6
    Draft-OPD drafter (exit 0) and a head exited 2 only once the target had loaded; without the flag, both took 16
    (Draft-OPD trained a B=16 drafter, a head exited 2). Now: refused before anything loads; absent, the drafter's."""
    from engine.__main__ import main

    tmp, common = work
    i = common.index("--block-size")
    no_b, out = common[:i] + common[i + 2:], tmp / f"b-{variant[1]}"
    flags = [*variant, "--init-from", str(tmp / "base"), "--out", str(out), "--steps", "1", "--fresh"]
    capsys.readouterr()
    assert main(["train", *no_b, *flags, "--block-size", "6"]) == 2
    got = capsys.readouterr()
    assert "loaded" not in got.out and not out.exists(), got.out   # before the target loads
    assert got.err.startswith("error: block_size: 6 ") and "block size 4 " in got.err, got.err
    assert train(no_b, *flags) == 0
    assert json.loads((out / "config.json").read_text())["block_size"] == 4
    # plain DFlash may retrain a drafter at another block size: its default stays 16, as for a B=16 drafter's variants
    shipped = str(Path(__file__).parents[1] / "assets" / "drafters" / "smollm2-135m-dflash-b16")
    for args, b in ((["--init-from", str(tmp / "base")], 16), ([*variant, "--init-from", shipped], 16)):
        a = C.build_parser().parse_args(no_b + args)
        check_args(a)
        assert a.block_size == b
