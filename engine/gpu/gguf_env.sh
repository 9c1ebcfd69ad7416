# Sourced by train_gpu.sh and lent_gpu.sh: the embedded target's GGUF reassembled from its two parts under $WORK and
# checked against .gpu/gguf.sha256 (python -m engine.gpu.split_gguf makes the parts), then REANCHOR_GGUF and
# REANCHOR_CACHE exported. Needs WORK and PART0 (default /root/gguf.part0, copied there by an earlier call) and
# .gpu/gguf.part1 and .gpu/gguf.sha256 in the current directory. A file already in place and matching is kept.
PART0=${PART0:-/root/gguf.part0}
mkdir -p "$WORK/gguf"
GGUF=$WORK/gguf/SmolLM2-135M-Instruct.Q4_1.gguf
if ! { [ -f "$GGUF" ] && [ "$(sha256sum "$GGUF" | cut -d' ' -f1)" = "$(cut -d' ' -f1 .gpu/gguf.sha256 2>/dev/null)" ]; }; then
  [ -f "$PART0" ] || { echo "missing $PART0: run the call that copies .gpu/gguf.part0 there first"; exit 2; }
  [ -f .gpu/gguf.part1 ] && [ -f .gpu/gguf.sha256 ] || { echo "missing .gpu/gguf.part1 or .gpu/gguf.sha256"; exit 2; }
  cat "$PART0" .gpu/gguf.part1 > "$GGUF"
  [ "$(sha256sum "$GGUF" | cut -d' ' -f1)" = "$(cut -d' ' -f1 .gpu/gguf.sha256)" ] \
    || { echo "sha256 mismatch for the reassembled GGUF"; exit 3; }
fi
export REANCHOR_GGUF=$GGUF REANCHOR_CACHE=$WORK/cache
