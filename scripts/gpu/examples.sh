#!/bin/bash
# The training examples on one GPU. First the CUDA back end's tests: its operations against
# the CPU's, then ZeRO stages and tensor parallel on ranks sharing the GPU against one CPU
# rank (f32, and ZeRO with bf16 products), and tensor parallel's checkpoints. Then
# examples/zero on one rank beside PyTorch eager training the same model shape in the same
# run (gpt_torch.py), in f32 and with bf16 products (torch: autocast), for each SHAPES entry
# "batch seq channels layers heads". Writes OUT/examples-tests.txt,
# OUT/gpt-SHAPE-MATH-{weft,torch}.txt and OUT/gpt-speed.txt (a line per shape and math:
# median tokens/s of the steps after the first 5, weft's over torch's).
# usage: scripts/gpu/examples.sh OUT [BUILD]    (from the repository root, BUILD built first:
#   ninja -C BUILD examples/zero tests/examples/test_ops tests/examples/test_zero
#   tests/examples/test_tp tests/examples/test_checkpoint)
source "$(dirname "$0")/common.sh"
fail=0
t="$b/tests/examples"
{
  "$t/test_ops" || fail=1
  # ranks, stage, math (suite gpu's cases)
  for c in "1 0 gpu" "2 0 gpu" "2 1 gpu" "4 2 gpu" "4 3 gpu" "1 0 bf16" "2 1 bf16" "4 3 bf16"; do
    # shellcheck disable=SC2086
    "$t/test_zero" $c || fail=1
  done
  for c in "2 2 0" "4 2 1" "4 4 0"; do # ranks, shards, sequence parallel
    # shellcheck disable=SC2086
    "$t/test_tp" $c gpu || fail=1
  done
  "$t/test_checkpoint" "$out/ckpt" 4 tp gpu || fail=1
} > "$out/examples-tests.txt" 2>&1
SHAPES=${SHAPES-"8 256 384 6 6;8 1024 768 12 12"} # SHAPES="": the tests only
steps=${STEPS:-25}
IFS=';' read -ra shapes <<< "$SHAPES"
for s in "${shapes[@]}"; do
  read -r B T C L H <<< "$s"
  flags="--batch $B --seq $T --channels $C --layers $L --heads $H"
  for math in f32 bf16; do
    tag="b$B-t$T-c$C-l$L-h$H-$math"
    weft_math=$([ "$math" = bf16 ] && echo --bf16)
    # shellcheck disable=SC2086
    "$b/examples/zero" --gpu $weft_math --ranks 1 --stage 0 --steps "$steps" $flags --lr 3e-4 \
      > "$out/gpt-$tag-weft.txt" 2>&1 || fail=1
    # shellcheck disable=SC2086
    python3 scripts/gpu/gpt_torch.py $flags --amp "$math" --steps 20 --warmup 5 \
      > "$out/gpt-$tag-torch.txt" 2>&1 || fail=1
    python3 - "$out/gpt-$tag-weft.txt" "$out/gpt-$tag-torch.txt" "$tag" >> "$out/gpt-speed.txt" <<'PY'
import re, statistics, sys
weft = [float(m.group(2)) for m in re.finditer(r"^step (\d+) loss \S+ tokens/s (\S+)",
        open(sys.argv[1]).read(), re.M) if int(m.group(1)) > 5]
torch = dict(re.findall(r"torch attn=(\S+) amp=\S+ tokens/s (\S+)", open(sys.argv[2]).read()))
w = statistics.median(weft) if weft else 0
line = f"{sys.argv[3]}: weft {w:.0f} tokens/s"
for k, v in torch.items():
    line += f", torch {k} {float(v):.0f} (weft/torch {w / float(v):.2f})"
print(line)
PY
  done
done
exit $fail
