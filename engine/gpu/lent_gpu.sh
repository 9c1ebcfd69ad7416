#!/usr/bin/env bash
# The third device call of a drafter run (docs/training.md): the DFlash drafter trained on, optionally a variant's
# head beside it on the same GPU, then engine/gpu/gpu_check.py. Run from the repo root on the device machine, after
# the two calls that left /root/gguf.part0, /root/gguf.part1 and /root/drafter (the committed DFlash folder) there:
#
#   HEAD=domino SEED=5 bash engine/gpu/lent_gpu.sh          (carry .whl and .gpu/gguf.sha256)
#
# A call returns at most 8 files from $OUT and empties $OUT first, so every run writes under /root/keep (kept while
# the machine stays warm) and only static_check.json, the DFlash folder's four files and gpu_check.json are copied to
# $OUT; a head's files come back by a next call: `cp /root/keep/<head>/* $OUT/`. Knobs: SEED (the DFlash run's prompt
# seed; the head's is SEED+100), STATIC_S (engine/gpu/static_check.py's time, run first, default 360; 0: skip),
# TOTAL_S (each training, default 300), HEAD (domino|dspark, empty: none), CHECK_S (gpu_check's time, default 150;
# 0: skip), PYTHON.
set -uo pipefail
PY=${PYTHON:-python3}
SEED=${SEED:?name the prompt seed (docs/training.md lists those used)}
KEEP=${KEEP:-/root/keep}
mkdir -p "$KEEP"
cp /root/gguf.part1 .gpu/ || exit 2
if compgen -G ".whl/*.whl" > /dev/null; then   # once, for both trainings
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 2
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
# first, the static path's device script (engine/gpu/static_check.py, issue 57): the embedded target with the committed
# DFlash drafter and the 8 B shapes, eager against captured; its JSON comes back as $OUT/static_check.json
if [ "${STATIC_S:-360}" -gt 0 ]; then
  [ -f assets/drafters/smollm2-135m-dflash-b16/config.json ] || { rm -rf assets/drafters/smollm2-135m-dflash-b16; \
    cp -r /root/drafter assets/drafters/smollm2-135m-dflash-b16; }
  (WORK=/tmp/reanchor; . engine/gpu/gguf_env.sh && timeout "${STATIC_S:-360}" $PY engine/gpu/static_check.py \
     --budget-s $(( ${STATIC_S:-360} - 40 )) --out "$OUT/static_check.json" 2>&1 \
     | grep -v "Loading weights\|clean_up_tokenization" | tail -n 40)
fi
# each training runs from its own copy without .whl (train_gpu.sh would reinstall the wheels under the other's feet)
for r in dflash ${HEAD:-}; do
  rm -rf "/tmp/repo-$r" && mkdir -p "/tmp/repo-$r/assets" && cp -r engine tests .gpu "/tmp/repo-$r/" \
    && cp -r assets/prompts "/tmp/repo-$r/assets/"
done
(cd /tmp/repo-dflash && TOTAL_S=${TOTAL_S:-300} GEN_MIN=${GEN_MIN:-1.8} PROMPT_SEED=$SEED INIT_FROM=/root/drafter \
   OUT=$KEEP/drafter bash engine/gpu/train_gpu.sh > "$KEEP/drafter.log" 2>&1) &
PIDS=$!
if [ -n "${HEAD:-}" ]; then
  [ -d "assets/drafters/smollm2-135m-$HEAD-b16" ] || { echo "no assets/drafters/smollm2-135m-$HEAD-b16 in this call's tree"; exit 2; }
  cp -r "assets/drafters/smollm2-135m-$HEAD-b16" "/tmp/repo-$HEAD/head"
  # a head's feature cache is built first, on the host (3,072 responses took 220 s): fewer responses than a drafter run
  (cd "/tmp/repo-$HEAD" && TOTAL_S=${TOTAL_S:-300} GEN_MIN=${HEAD_GEN_MIN:-0.6} PROMPT_SEED=$((SEED + 100)) \
     WORK=/tmp/reanchor-$HEAD INIT_FROM=head LR=1e-4 OUT=$KEEP/$HEAD \
     EXTRA="--variant $HEAD --backbone-from /root/drafter --head-policy-floor 0.2" \
     bash engine/gpu/train_gpu.sh > "$KEEP/$HEAD.log" 2>&1) &
  PIDS="$PIDS $!"
fi
wait $PIDS
for f in config.json model.safetensors README.md train_log.json; do cp "$KEEP/drafter/$f" "$OUT/" || echo "missing $f"; done
grep -h "tau_sim\|done" "$KEEP"/*.log | tail -n 12
# gpu_check on the committed drafter: the device's tree may hold its folder only as an empty one (docs/training.md)
[ -f assets/drafters/smollm2-135m-dflash-b16/config.json ] || { rm -rf assets/drafters/smollm2-135m-dflash-b16; \
  cp -r /root/drafter assets/drafters/smollm2-135m-dflash-b16; }
if [ "${CHECK_S:-150}" -gt 0 ]; then
  export REANCHOR_GGUF=/tmp/reanchor/gguf/SmolLM2-135M-Instruct.Q4_1.gguf REANCHOR_CACHE=/tmp/reanchor/cache
  timeout "${CHECK_S:-150}" $PY engine/gpu/gpu_check.py --skip-lossless --pairs 1 --seeds 10 --prompts 4 \
    --out "$OUT/gpu_check.json" 2>&1 | grep -v "Loading weights\|clean_up_tokenization" | tail -n 20
fi
