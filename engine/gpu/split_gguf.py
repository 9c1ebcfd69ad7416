"""Split the embedded GGUF into two parts for the GPU machine, whose calls carry at most 64 MiB each.

    python -m engine.gpu.split_gguf [--part0-mib N]

writes .gpu/gguf.part0, .gpu/gguf.part1 and .gpu/gguf.sha256 (of the whole file). Call 1 carries
.gpu/gguf.part0 and copies it to /root/gguf.part0; call 2 carries .gpu/gguf.part1, .gpu/gguf.sha256 and
.whl and runs engine/gpu/train_gpu.sh, which reassembles and verifies the file. Each call also carries the
working tree, so the sizes printed here must satisfy: tree + part0 <= 64 MiB and tree + part1 + .whl <= 64 MiB.
"""
from __future__ import annotations

import argparse
import hashlib
import os
from pathlib import Path

from ..paths import REPO as ROOT

MiB = 2**20
SKIP = {".git", ".gpu", ".whl", "out", "venv", ".venv", "__pycache__", ".pytest_cache", "test-output"}


def tree_size(root: Path = ROOT) -> int:
    """Rough size of what a device call sends (the repo minus the usual ignored folders)."""
    total = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIP]
        total += sum((Path(dirpath) / f).stat().st_size for f in filenames if not f.endswith(".pyc"))
    return total


def main() -> None:
    from ..models.embedded import gguf_path

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part0-mib", type=float, default=0, help="size of part 0 (default: both calls equally big)")
    a = ap.parse_args()
    src = gguf_path()
    data = src.read_bytes()
    tree = tree_size()
    whl = sum(p.stat().st_size for p in (ROOT / ".whl").glob("*.whl"))
    cut = int(a.part0_mib * MiB) if a.part0_mib else (len(data) + whl) // 2  # same headroom for both calls
    cut = max(1, min(cut, len(data) - 1))
    out = ROOT / ".gpu"
    out.mkdir(exist_ok=True)
    (out / "gguf.part0").write_bytes(data[:cut])
    (out / "gguf.part1").write_bytes(data[cut:])
    (out / "gguf.sha256").write_text(f"{hashlib.sha256(data).hexdigest()}  {src.name}\n")
    call1, call2 = tree + cut, tree + len(data) - cut + whl
    print(f"{src} ({len(data) / MiB:.1f} MiB) -> .gpu/gguf.part0 {cut / MiB:.1f} MiB, "
          f".gpu/gguf.part1 {(len(data) - cut) / MiB:.1f} MiB, .gpu/gguf.sha256")
    print(f"working tree ~{tree / MiB:.1f} MiB, .whl {whl / MiB:.1f} MiB: call 1 ~{call1 / MiB:.1f} MiB, "
          f"call 2 ~{call2 / MiB:.1f} MiB (limit 64)")
    if call2 > 63 * MiB:
        print("WARNING: call 2 is too big. Keep large files (e.g. a drafter in assets/drafters/) out of the "
              "working tree for the two GPU calls. The transformers 5.15 wheels must stay: the device's 5.17 "
              "refuses to save a GGUF-loaded model, which engine/models/embedded.py needs.")


if __name__ == "__main__":
    main()
