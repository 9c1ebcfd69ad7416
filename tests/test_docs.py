"""The repository explains itself: every file that code, tests and docs name is in the repository, every link of
the README and docs/ resolves, and docs/algorithm.md's worked round is what the shipped trace records."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# a path into the repository with a file extension (module.attr references and globs are not files)
FILE_REF = re.compile(r"(?<![\w/.])((?:docs|engine|app|tests|assets|\.ci)/[\w./-]*\.(?:md|py|sh|json|jsonl|txt|png))\b")
NAMED_DOC = re.compile(r"\b(ALGORITHM\.md|DFLASH\.md|CONTRACT\.md|see the re" r"port)\b")  # split: not a hit itself
MD_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
# docs other branches of this session add (the README links them; the lead checks them at merge)
ELSEWHERE = {"docs/security.md", "docs/race.md", "docs/teaching.md", "docs/performance.md", "docs/trees.md"}


def tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout.split()
    return [ROOT / p for p in out if p.endswith((".py", ".md", ".sh", ".txt")) or p == ".ci/run"]


def test_every_named_file_is_in_the_repository():
    files = tracked()
    assert len(files) > 50, "git listed too few files: the test would prove nothing"
    missing, vague = [], []
    for f in files:
        text = f.read_text(encoding="utf-8", errors="replace")
        missing += [f"{f.relative_to(ROOT)}: {ref}" for ref in FILE_REF.findall(text)
                    if not (ROOT / ref).exists() and ref not in ELSEWHERE]
        vague += [f"{f.relative_to(ROOT)}: {m}" for m in NAMED_DOC.findall(text)
                  if not (m == "CONTRACT.md" and (ROOT / "engine/CONTRACT.md").exists())]
    assert not missing, f"files named but not in the repository: {missing}"
    assert not vague, f"references to documents outside the repository: {vague}"


def test_every_doc_link_resolves():
    bad = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "engine/CONTRACT.md"]:
        for link in MD_LINK.findall(doc.read_text(encoding="utf-8")):
            if "://" in link:
                continue
            target = (doc.parent / link).resolve()
            if not target.exists() and str(target.relative_to(ROOT)) not in ELSEWHERE:
                bad.append(f"{doc.relative_to(ROOT)} -> {link}")
    assert not bad, f"broken links: {bad}"


def test_readme_is_short():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 200


def test_the_worked_round_is_the_traces():
    """docs/algorithm.md walks round 16 of the math example: anchor ` km`, 4 accepted drafts from g(1) and g(2),
    bonus ` time`, where the baseline alone would have committed 2 tokens."""
    doc = (ROOT / "docs/algorithm.md").read_text(encoding="utf-8")
    assert "assets/traces/math-speed-reanchor.json" in doc and "math round 16" in doc
    trace = json.loads((ROOT / "assets/traces/math-speed-reanchor.json").read_text(encoding="utf-8"))
    assert (trace["config"]["mode"], trace["config"]["rule"], trace["config"]["max_new_tokens"]) == \
        ("reanchor", "earliest", 80)
    r, text = trace["rounds"][16], lambda ids: "".join(trace["token_texts"][str(i)] for i in ids)
    assert (r["anchor_pos"], text([r["anchor"]])) == (108, " km")
    assert text(r["new_tokens"]) == ".\n\nThe time" and r["accepted"] == 4
    paths, trie = r["paths"], r["trie"]
    sources = [{paths[p]["source"] for p in trie["provenance"][n]} for n in r["accepted_nodes"]]
    assert sources[2] == {1, 2} and sources[4] == {2}      # nodes 16-17 shared by g(1) and g(2), then g(2) alone
    assert text(r["baseline"][:3]) == " km.." and r["target_top1"][r["accepted_nodes"][1]] != r["baseline"][2]
    assert {s["d"]: s["chosen"] for s in r["shifted"] if s["chosen"] is not None} == {1: 0, 2: 1, 3: 3, 4: 3}
    prev = trace["rounds"][15]
    assert prev["retained"] == 13 and text(prev["new_tokens"]) == "00 km"
