"""The device script of the static path (engine/gpu/static_check.py), rehearsed on the CPU at tiny sizes: every step
it will take on a lent GPU runs here, so that a loan is never spent on a typo."""
import json

from engine.gpu import static_check


def test_the_rehearsal_runs_every_step_and_writes_its_json(tmp_path, capsys):
    out = tmp_path / "static.json"
    assert static_check.main(["--rehearse", "--prompts", "1", "--budget-s", "3600", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert '"user_scale"' in capsys.readouterr().out   # the whole JSON printed at the end, for the device's log
    assert res["rehearsal"] and not res["capture"]
    emb = res["embedded"]
    assert set(emb) == {"eager", "static"}
    for name, labels in emb.items():
        assert labels["profile"]["verify"] and labels["profile"]["draft"], name   # the auto budget's profile, taken on that engine
        for label in static_check.LABELS:
            v = labels[label]
            assert v["equal_to_ar"] == v["prompts"] == 1, (name, label)   # lossless, eager and static
            assert v["tokens_per_s"] > 0 and v["x_over_ar"] > 0 and set(v["stages_ms"]) >= {"draft", "verify"}
            assert ("picked" in v) == label.endswith("-auto"), (name, label)
    scale = res["user_scale"]
    for name in ("eager", "static"):
        d = scale[name]["dflash"]
        assert d["engine_ms_per_round"] > 0 and d["reference_ms_per_round"] > 0, name
        assert all(f["same_tokens"] and f["same_accepted"] == f["aligned"] for f in d["fidelity"]), name
