#!/usr/bin/env bash
# Train the embedded target's DFlash drafter on a lent GPU machine, in one shot, in under 8 minutes.
#
#   bash engine/gpu/train_gpu.sh            (from the repo root; the device has no network and no pip index)
#
# Needs: .whl/*.whl (dflash, gguf, transformers 5.15 + tokenizers 0.22.2 + regex for cp312: the image's transformers
# 5.17 refuses to save a GGUF-loaded model, which engine/models/embedded.py does once), the GGUF in two
# parts (python -m engine.gpu.split_gguf): ${PART0:-/root/gguf.part0} (copied there by an earlier call) and
# .gpu/gguf.part1, checked against .gpu/gguf.sha256. Writes the drafter flat into $OUT (config.json,
# model.safetensors, README.md, train_log.json), refreshed every SAVE_S seconds, so a timeout still leaves one.
# Everything is a knob (env): TOTAL_S, PROMPTS, PROMPT_SEED, NEW_TOKENS, GEN_BATCH, GEN_MIN, ANCHORS, BATCH, LAYERS,
# BLOCK, LR, INIT_FROM, SAVE_S, EVAL_S, EXTRA (more `python -m engine train` flags), WORK (scratch folder), PYTHON.
# By default it trains the committed drafter on (INIT_FROM; INIT_FROM= starts from the target's layers) on responses
# to prompts of a new PROMPT_SEED, so that each lent GPU adds to the last one's training instead of redoing it.
# LAYERS above the committed drafter's 2 grows it: the new layers start as the identity (--init-from: engine/train/recipe.py init_from_target).
# The variants: EXTRA="--variant dspark" (or domino: a head on the committed backbone, whose states are cached once) or
# EXTRA="--variant opd" (Draft-OPD on the committed drafter), each with OUT=out/gpu-<variant>; ship what beats the
# committed one on held-out tau (issue #13; on the 2-core CPU a Draft-OPD step takes minutes).
set -euo pipefail
T0=$(date +%s)
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
say() { echo "[gpu $(( $(date +%s) - T0 ))s] $*"; }
PY=${PYTHON:-python3}
OUT=${OUT:-$PWD/out/gpu-drafter}
WORK=${WORK:-/tmp/reanchor}
TOTAL_S=${TOTAL_S:-450}          # the whole script, setup and data generation included
mkdir -p "$OUT" "$WORK/gguf"
exec > >(tee -a "$OUT/run.log") 2>&1   # the whole log comes back with the drafter, even after a timeout

# 1. carried wheels (PYTHONPATH puts them before the image's own packages)
if compgen -G ".whl/*.whl" > /dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
say "wheels: $(ls .whl 2>/dev/null | tr '\n' ' ')"

# 2. the GGUF, reassembled and verified
. engine/gpu/gguf_env.sh
say "gguf ok ($(du -m "$GGUF" | cut -f1) MB)"
$PY -c "import torch, transformers, dflash, gguf; print('torch', torch.__version__, '| transformers', transformers.__version__, '| cuda', torch.cuda.is_available() and torch.cuda.get_device_name(0))
if transformers.__version__ != '5.15.0': print('WARNING: transformers', transformers.__version__, 'is not the carried 5.15.0')"
$PY -c "from engine.models.embedded import embedded_dir; print(embedded_dir())"   # dequantise once (~20-30 s)
say "target dequantised"

# 3. data + training + export in one process; it stops itself at the budget and exports every SAVE_S seconds
INIT_FROM=${INIT_FROM-assets/drafters/smollm2-135m-dflash-b16}   # its weights serve any BLOCK
LR=${LR:-$([ -n "$INIT_FROM" ] && echo 3e-4 || echo 6e-4)}   # lower when training on: no fresh start
LEFT=$(( TOTAL_S - ($(date +%s) - T0) ))
[ "$LEFT" -gt 60 ] || { echo "only ${LEFT}s left for training"; exit 4; }
set -x
$PY -m engine train --out "$OUT" --data "$WORK/data" --max-minutes "$(echo "$LEFT" | awk '{print ($1 - 5) / 60}')" \
  --prompts "${PROMPTS:-16384}" --prompt-seed "${PROMPT_SEED:-5}" --max-new-tokens "${NEW_TOKENS:-256}" --gen-batch "${GEN_BATCH:-1024}" \
  --gen-minutes "${GEN_MIN:-2.5}" --eval-prompts 30 --layers "${LAYERS:-2}" --block-size "${BLOCK:-16}" \
  --anchors "${ANCHORS:-64}" --batch "${BATCH:-64}" --save-every "${SAVE_S:-60}" --eval-every "${EVAL_S:-90}" \
  --lr "$LR" ${INIT_FROM:+--init-from "$INIT_FROM"} --log-every 25 ${EXTRA:-}
set +x
say "done; $OUT holds: $(ls "$OUT" | tr '\n' ' ')"
