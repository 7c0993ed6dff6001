#!/usr/bin/env bash
# Mutation check, run on demand (not in CI): plants each bug of scripts/mutations.txt alone in a
# scratch copy of the tree (the working tree is never touched), rebuilds, and runs that bug's
# tests until one fails. Prints "caught by TEST" or "MISSED" per bug, a summary and the run
# time; exits nonzero when a bug is missed, a mutation no longer applies (its search text must
# occur exactly once, so the list cannot rot silently), or a test fails without any mutation.
# usage: scripts/mutate.sh [--list] [NAME...]   (no names: every mutation)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
list=${WEFT_MUTATIONS:-$root/scripts/mutations.txt} # another list, for trying one out
start=$(date +%s)
work=$(mktemp -d /tmp/weft-mutate.XXXXXX)
trap 'rm -rf "$work"' EXIT

# The list, parsed and checked against the working tree: one directory per selected mutation
# under $work/m (name, file, tests, why, search, replace), or a loud failure.
rc=0
python3 - "$list" "$root" "$work/m" "$@" << 'EOF' || rc=$?
import os, sys
path, root, out, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
muts, cur, mode, errors = [], None, None, []
for no, line in enumerate(open(path).read().split("\n"), 1):
    if mode in ("search", "replace"):
        if line == ("replace" if mode == "search" else "end"):
            mode = "replace" if mode == "search" else None
            if mode is None:
                muts.append(cur)
            continue
        cur[mode].append(line)
        continue
    if not line.strip() or line.startswith("#"):
        continue
    key, _, val = line.partition(" ")
    if key == "mutation":
        cur = {"name": val.strip(), "line": no, "search": [], "replace": [], "tests": [], "why": ""}
    elif key in ("file", "why") and cur:
        cur[key] = val.strip()
    elif key == "tests" and cur:
        cur["tests"] = val.split()
    elif key == "search" and cur:
        mode = "search"
    else:
        errors.append(f"{path}:{no}: unexpected line: {line}")
if mode:
    errors.append(f"{path}: the last block has no 'end'")
names = [m["name"] for m in muts]
for m in muts:
    where = f"{path}:{m['line']} ({m['name']})"
    if names.count(m["name"]) > 1:
        errors.append(f"{where}: the name is used twice")
    if not m.get("file") or not m["tests"]:
        errors.append(f"{where}: needs a file and tests")
        continue
    try:
        text = open(os.path.join(root, m["file"])).read()
    except OSError as e:
        errors.append(f"{where}: {e}")
        continue
    n = text.count("\n".join(m["search"]))
    if n != 1:
        errors.append(f"{where}: the search text occurs {n} times in {m['file']}, not once")
for a in args:
    if a not in names and a != "--list":
        errors.append(f"no mutation named {a}")
if errors:
    sys.exit("mutate: the list does not apply to this tree:\n  " + "\n  ".join(errors))
if "--list" in args:
    for m in muts:
        print(f"{m['name']:32} {m['file']:20} {' '.join(m['tests'])}")
    sys.exit(3)
for i, m in enumerate(x for x in muts if not args or x["name"] in args):
    d = os.path.join(out, f"{i:03d}")
    os.makedirs(d)
    for k in ("name", "file", "why"):
        open(os.path.join(d, k), "w").write(m[k])
    open(os.path.join(d, "tests"), "w").write(" ".join(m["tests"]))
    for k in ("search", "replace"):
        open(os.path.join(d, k), "w").write("\n".join(m[k]))
EOF
if [ "$rc" -eq 3 ]; then exit 0; fi # --list
if [ "$rc" -ne 0 ]; then exit "$rc"; fi

# The scratch tree: tracked and untracked files as they are now, no build directories.
src=$work/src
mkdir -p "$src" "$work/orig"
git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done |
  tar --null -T - -cf - | tar -xf - -C "$src"
build=$work/build
echo "mutate: building a scratch copy in $src"
meson setup "$build" "$src" -Dcuda=disabled -Dmpi=disabled -Dwerror=false > "$work/setup.log" ||
  { cat "$work/setup.log"; exit 1; }
ninja -C "$build" > "$work/build.log" || { tail -30 "$work/build.log"; exit 1; }

# Half of meson's timeouts: a planted hang is caught sooner, and no test needs that much here.
run_test() { # TEST -> prints its result (OK, FAIL, TIMEOUT, SKIP, ...)
  rm -f "$build/meson-logs/testlog.json"
  meson test -C "$build" --no-rebuild --timeout-multiplier 0.5 "$1" > "$work/test.log" 2>&1 || true
  python3 -c 'import json,sys
r=[json.loads(l)["result"] for l in open(sys.argv[1])]
print(r[0] if r else "ERROR")' "$build/meson-logs/testlog.json" 2> /dev/null || echo ERROR
}

# Baseline: every test named by the selected mutations, without any mutation. A test that does
# not pass here cannot be said to catch anything.
declare -A base
for d in "$work"/m/*; do
  for t in $(cat "$d/tests"); do base[$t]=; done
done
echo "mutate: baseline, ${#base[@]} tests without any mutation"
bad_base=0
for t in $(printf '%s\n' "${!base[@]}" | sort); do
  t0=$(date +%s)
  base[$t]=$(run_test "$t")
  echo "  $t: ${base[$t]} ($(($(date +%s) - t0)) s)"
  if [ "${base[$t]}" != OK ]; then bad_base=1; fi
done

caught=0 missed=0 broken=0 total=0
missed_names=()
for d in "$work"/m/*; do
  name=$(cat "$d/name") file=$(cat "$d/file")
  total=$((total + 1))
  cp "$src/$file" "$work/orig/file"
  python3 - "$src/$file" "$d/search" "$d/replace" << 'EOF'
import sys
p, s, r = sys.argv[1], open(sys.argv[2]).read(), open(sys.argv[3]).read()
t = open(p).read()
assert t.count(s) == 1, f"{p}: search text not found once"
open(p, "w").write(t.replace(s, r))
EOF
  t0=$(date +%s)
  verdict="MISSED" ran=()
  if ! ninja -C "$build" > "$work/build.log" 2>&1; then
    verdict="BROKEN: does not build"
    grep -m3 "error:" "$work/build.log" | sed 's/^/    /'
  else
    for t in $(cat "$d/tests"); do
      if [ "${base[$t]}" != OK ]; then
        ran+=("$t: not usable (${base[$t]} without mutation)")
        continue
      fi
      res=$(run_test "$t")
      if [ "$res" != OK ] && [ "$res" != SKIP ]; then
        verdict="caught by $t ($res)"
        break
      fi
      ran+=("$t: $res")
    done
  fi
  # restore: the copy gets a new mtime, so ninja rebuilds it for the next mutation
  cp "$work/orig/file" "$src/$file"
  case $verdict in
  caught*) caught=$((caught + 1)) ;;
  BROKEN*) broken=$((broken + 1)); missed_names+=("$name (broken)") ;;
  *) missed=$((missed + 1)); missed_names+=("$name") ;;
  esac
  echo "[$total] $name ($file): $verdict, $(($(date +%s) - t0)) s"
  echo "    $(cat "$d/why")"
  if [ "$verdict" = MISSED ]; then printf '    ran %s\n' "${ran[@]}"; fi
done

secs=$(($(date +%s) - start))
echo
echo "mutate: $total mutations: $caught caught, $missed missed, $broken broken"
if [ "${#missed_names[@]}" -gt 0 ]; then echo "mutate: not caught: ${missed_names[*]}"; fi
if [ "$bad_base" -ne 0 ]; then echo "mutate: some tests fail without any mutation (see the baseline)"; fi
echo "mutate: total time $((secs / 60)) min $((secs % 60)) s"
[ "$missed" -eq 0 ] && [ "$broken" -eq 0 ] && [ "$bad_base" -eq 0 ]
