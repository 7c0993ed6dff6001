#!/bin/bash
# The training examples on one GPU: the CUDA back end's tests (its operations against the
# CPU's; ZeRO stages on ranks sharing the GPU against one CPU rank), then examples/zero on one
# rank beside PyTorch eager training the same model shape in the same run (gpt_torch.py), for
# each SHAPES entry "batch seq channels layers heads". Writes OUT/examples-tests.txt,
# OUT/gpt-SHAPE-{weft,torch}.txt and OUT/gpt-speed.txt (one line per shape: median tokens/s of
# the steps after the first 5, and weft's over PyTorch's).
# usage: scripts/gpu/examples.sh OUT [BUILD]    (from the repository root; BUILD built first:
#        ninja -C BUILD examples/zero tests/examples/test_ops tests/examples/test_zero)
source "$(dirname "$0")/common.sh"
fail=0
t="$b/tests/examples"
{
  "$t/test_ops" || fail=1
  for c in "1 0" "2 0" "2 1" "4 2" "4 3"; do # ranks, stage (suite gpu's cases)
    # shellcheck disable=SC2086
    "$t/test_zero" $c gpu || fail=1
  done
} > "$out/examples-tests.txt" 2>&1
SHAPES=${SHAPES:-"8 256 384 6 6;8 1024 768 12 12"}
steps=${STEPS:-25}
IFS=';' read -ra shapes <<< "$SHAPES"
for s in "${shapes[@]}"; do
  read -r B T C L H <<< "$s"
  tag="b$B-t$T-c$C-l$L-h$H"
  flags="--batch $B --seq $T --channels $C --layers $L --heads $H"
  # shellcheck disable=SC2086
  "$b/examples/zero" --gpu --ranks 1 --stage 0 --steps "$steps" $flags --lr 3e-4 \
    > "$out/gpt-$tag-weft.txt" 2>&1 || fail=1
  # shellcheck disable=SC2086
  python3 scripts/gpu/gpt_torch.py $flags --steps 20 --warmup 5 \
    > "$out/gpt-$tag-torch.txt" 2>&1 || fail=1
  python3 - "$out/gpt-$tag-weft.txt" "$out/gpt-$tag-torch.txt" "$tag" >> "$out/gpt-speed.txt" <<'PY'
import re, statistics, sys
weft = [float(m.group(2)) for m in re.finditer(r"^step (\d+) loss \S+ tokens/s (\S+)",
        open(sys.argv[1]).read(), re.M) if int(m.group(1)) > 5]
torch = dict(re.findall(r"torch attn=(\S+) tokens/s (\S+)", open(sys.argv[2]).read()))
w = statistics.median(weft) if weft else 0
line = f"{sys.argv[3]}: weft {w:.0f} tokens/s"
for k, v in torch.items():
    line += f", torch {k} {float(v):.0f} (weft/torch {w / float(v):.2f})"
print(line)
PY
done
exit $fail
