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
        vague += [f"{f.relative_to(ROOT)}: {m}" for m in NAMED_DOC.findall(text)]
    assert not missing, f"files named but not in the repository: {missing}"
    assert not vague, f"references to documents outside the repository: {vague}"


def test_every_doc_link_resolves():
    bad = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
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
    """docs/algorithm.md and the README walk round 3 of the math example (the round the app opens on): anchor `,`
    at 68 after round 2's extra `·station`, g(1)..g(4) each attached one index before their native one, 8 accepted
    drafts through g(2)-g(4) and the bonus ` and`, where the baseline alone would have committed 4 tokens."""
    from app.records import most_instructive

    doc = (ROOT / "docs/algorithm.md").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "assets/traces/math-speed-reanchor.json" in doc and "math round 3" in doc and "--round 3" in doc
    trace = json.loads((ROOT / "assets/traces/math-speed-reanchor.json").read_text(encoding="utf-8"))
    cfg = trace["config"]
    assert (cfg["mode"], cfg["rule"], cfg["max_new_tokens"], cfg["temperature"], cfg["seed"]) == \
        ("reanchor", "earliest", 80, 0.0, 0)
    assert f"--drafter {cfg['drafter']}" in doc and f"{len(trace['rounds'])} rounds, tau {trace['stats']['tau']:.2f}" in doc
    assert most_instructive(trace["rounds"])[0] == 3          # the round the app opens the example on
    r, word = trace["rounds"][3], lambda i: trace["token_texts"][str(i)].replace(" ", "·").replace("\n", "⏎")
    text = lambda ids: " ".join(word(i) for i in ids)
    # the facts as the doc writes them, each read from the trace
    facts = [f"Round 3's anchor is `{word(r['anchor'])}` at s = {r['anchor_pos']}",
             f"drafted\n  `{text(r['baseline'])}`",
             f"Round 3's trie has {len(r['trie']['tokens'])} nodes, at depths 0..{max(r['trie']['depths'])}",
             f"over all {len(r['trie']['tokens'])} nodes, each at position {r['anchor_pos']} + its depth",
             f"a = {r['accepted']} accepted drafts",
             f"{r['accepted'] + 1} tokens committed (`{text(r['new_tokens'])}`)",
             f"the next anchor is `{word(r['bonus'])}` at s' = {r['anchor_pos'] + len(r['new_tokens'])}",
             f"(`retained` = {r['retained']})"]
    for d, sites, chosen in [(s["d"], s["sites"], s["chosen"]) for s in r["shifted"] if s["chosen"] is not None]:
        facts.append(f"| g({d}) | `{word(r['shifted'][d - 1]['tokens'][0])}` | {r['anchor_pos'] + d} | "
                     f"{', '.join(map(str, sites))} | {chosen} |")
    T, paths = r["trie"], r["paths"]
    for k, n in enumerate(r["accepted_nodes"]):
        facts.append(f"| {n} | {T['depths'][n]} | `{word(T['tokens'][n])}`")
        assert T["depths"][n] == k
    missing = [f for f in facts if f not in doc]
    assert not missing, f"docs/algorithm.md does not state what the trace records: {missing}"
    # the shift: g(1)..g(4) each join one index before their native d; the accepted drafts past depth 3 are theirs
    assert [s["chosen"] for s in r["shifted"][:4]] == [0, 1, 2, 3]
    sources = [{paths[p]["source"] for p in T["provenance"][n]} for n in r["accepted_nodes"]]
    assert sources[4] == {2, 3, 4} and sources[6] == {3, 4}
    # the baseline alone: its first disagreement with the target
    alone = next(k for k in range(1, r["block_size"]) if r["baseline"][k] != r["target_top1"][k - 1]) - 1
    assert f"would have committed {alone + 1} (`{text(r['baseline'][1:alone + 1])}` and the bonus " \
           f"`{word(r['target_top1'][alone])}`)" in doc
    assert f"shifted gain**: {r['accepted'] - alone} tokens" in doc
    prev = trace["rounds"][2]
    assert (prev["retained"], prev["anchor_pos"], text(prev["new_tokens"])) == (14, 66, "·train ,")
    assert f"(`retained` = {prev['retained']})" in doc and f"Round 2 had anchor `{word(prev['anchor'])}` at s = 66" in doc
    a_d = " ".join(word(s["tokens"][0]) for s in r["shifted"][:4])
    assert a_d == ", ·we ·need ·to"
    assert "That is round 3 of `assets/traces/math-speed-reanchor.json`" in readme
    assert f"{r['accepted']} accepted drafts + the bonus = {r['accepted'] + 1} tokens" in readme
