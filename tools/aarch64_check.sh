#!/usr/bin/env bash
# modelc on aarch64: run a subset of the test suite in an arm64 Debian root under qemu-user (issue 43).
#
#   tools/aarch64_check.sh [ci|full|smoke|tests|prepare] [PYTEST ARGS...]      (as root, on Linux x86-64; docs/arm.md)
#
# ci    what .ci/run runs, sized for about 4 minutes on a cold 2-core machine (setup included): the
#       tokenizer tests, the F16 and Q4_0/Q8_0 one-token kernels against their numpy twins,
#       `modelc run` + /v1/chat/completions
# full  issue 43's list: the logit tests against stored references for llama and the Qwen3-MoE fixture in
#       F32, F16, Q4_0, Q8_0, Q4_K, Q6_K, IQ4_XS and IQ3_S (llama's F16 logits against the numpy twins and
#       transformers among them), every tokenizer test, and the smoke test waiting
#       for the numba kernels and comparing their answer with the reference kernels' (hours cold, minutes warm)
# smoke only that smoke test (`modelc run` + /v1/chat/completions, numba against the reference kernels)
# tests  only the pytest arguments given (node ids), e.g. `tests tests/models/test_quant_vs_llamacpp.py -k Q4_0`
# prepare  only the set-up (the root, the wheels, the bytecode: downloads, mostly): .ci/run starts it in the
#       background beside the slow tests, so that `ci` later finds its cache ready
# Extra arguments go to every pytest run (e.g. -x, -k NAME).
#
# The root: debootstrap's first stage (download and unpack, no emulated package configuration, which
# alone took 6-7 minutes) plus every fetched .deb unpacked with dpkg-deb on this machine. Python packages:
# aarch64 wheels from PyPI, installed by this machine's pip (--platform, --target) into a folder that is
# bind-mounted into the root, at the versions of the checkout's .venv where it has one. Their bytecode
# (and the stdlib's and the checkout's) is compiled here, natively. The checkout is bind-mounted read-only
# at /src; everything runs in a private mount namespace, so nothing stays mounted.
#
# Cached under $MODELC_AARCH64_CACHE (default ~/.cache/modelc-aarch64), each keyed by what built it:
# the root, pip's download cache and the installed packages, numba's kernel cache (its folders are keyed
# by the kernels' source, kernels/runtime/jit_cache.py), Python's bytecode.
# On an aarch64 machine the same tests run natively in the checkout's .venv, without qemu or root.
#
# Skips (prints "aarch64: skipped: REASON", exit 0) where the emulated root cannot be set up: not Linux
# x86-64, not root, no mount rights (a container), no qemu-user/binfmt_misc, no network for a missing cache.
# MODELC_AARCH64_STRICT=1 makes a skip an error.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${MODELC_AARCH64_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/modelc-aarch64}
SUITE=bookworm # Python 3.11, glibc 2.36
PYVER=3.11
MIRROR=${MODELC_AARCH64_MIRROR:-http://deb.debian.org/debian}
DEBS=python3,libgomp1 # libgomp: numba's OpenMP threading layer (without it: workqueue, unsafe here)
T_START=$(date +%s)
step_t=$T_START

say() { echo "aarch64: $*"; }
step() { # say what was done and how long it took since the last step
  local now
  now=$(date +%s)
  say "$1 ($((now - step_t)) s)"
  step_t=$now
}
skip() {
  say "skipped: $*"
  if [ -n "${MODELC_AARCH64_STRICT:-}" ]; then exit 1; fi
  exit 0
}

# ---- the subsets: each group is one pytest process; the groups and the smoke test run side by side -------
subset() {
  local quant=tests/models/test_quant_vs_llamacpp.py::test_no_worse_than_llamacpp
  local hf=tests/models/test_hf_variants.py
  local f16=tests/models/test_f16_weights.py::test_f16_weights_match_numpy_twins_and_transformers
  case "$1" in
    ci)
      # (llama's F16 logits, 223 CPU s under qemu at the last kernel change, moved to `full`: CI's 25 minutes)
      GROUPS_=(
        "tests/tokenizer/test_tokenizer.py tests/tokenizer/test_chat_template.py tests/kernels/simd/test_half.py tests/kernels/matmul/test_gemm_fused.py"
      )
      SMOKE=(--max-tokens 8)
      ;;
    full)
      GROUPS_=(
        "tests/tokenizer $hf::test_hf_folder_matches_transformers[llama3] $f16[half-llama3] $f16[blas-llama3] $quant[llama-Q8_0] $quant[llama-Q4_0] $quant[llama-Q4_K_M] $quant[llama-Q6_K] $quant[llama-IQ4_XS] $quant[llama-IQ3_S]"
        "$hf::test_gguf_matches_transformers[qwen3moe] $f16[half-qwen3moe] $f16[blas-qwen3moe] $quant[qwen3moe-Q4_K_M] $quant[qwen3moe-IQ4_XS] $quant[qwen3moe-Q4_0]"
      )
      SMOKE=(--until-ready --timeout 7200)
      ;;
    smoke)
      GROUPS_=()
      SMOKE=(--until-ready --timeout 7200)
      ;;
    tests)
      GROUPS_=("") # the node ids given after it, one pytest process, no smoke test
      SMOKE=()
      ;;
    prepare)
      GROUPS_=()
      SMOKE=()
      PREPARE=1
      ;;
    *)
      echo "usage: $0 [ci|full|smoke|tests|prepare] [PYTEST ARGS...]" >&2
      exit 2
      ;;
  esac
}

run_tests() { # $1: how to run a command ("native" or "chroot"), $2: a folder for the logs. The groups and
  # the smoke test side by side; each one's wall and CPU seconds (CPU: qemu's, i.e. the emulated process's)
  local how=$1 logs=$2 pids=() names=() rc=0 i
  for i in "${!GROUPS_[@]}"; do
    # shellcheck disable=SC2086
    (
      TIMEFORMAT="%0R s, %0U s CPU"
      time in_"$how" python3 -m pytest "${PYTEST[@]}" ${GROUPS_[$i]} > "$logs/group$i.log" 2>&1
    ) 2> "$logs/group$i.time" &
    pids+=($!)
    names+=("group$i")
  done
  if [ ${#SMOKE[@]} -gt 0 ]; then
    (
      TIMEFORMAT="%0R s, %0U s CPU"
      time in_"$how" python3 tools/aarch64_smoke.py "${SMOKE[@]}" > "$logs/smoke.log" 2>&1
    ) 2> "$logs/smoke.time" &
    pids+=($!)
    names+=(smoke)
  fi
  for i in "${!pids[@]}"; do
    local n=${names[$i]}
    if wait "${pids[$i]}"; then
      say "$n ($(tail -1 "$logs/$n.time")): $(grep -E '^smoke:|passed|failed' "$logs/$n.log" | tail -2 | tr '\n' ' ')"
    else
      rc=1
      say "$n FAILED ($(tail -1 "$logs/$n.time")):"
      tail -80 "$logs/$n.log"
    fi
  done
  step "tests"
  return $rc
}

finish() {
  if [ "$1" = 0 ]; then
    say "ok, $(($(date +%s) - T_START)) s in all"
  else
    say "FAILED after $(($(date +%s) - T_START)) s"
  fi
  exit "$1"
}

main() {
  subset "${1:-ci}"
  [ $# -gt 0 ] && shift
  PYTEST=(-q -p no:cacheprovider -o "addopts=--strict-markers --import-mode=importlib -ra" --timeout=14400 "$@")

  if [ "$(uname -m)" = aarch64 ]; then
    native "$@"
  fi
  [ "$(uname -s)-$(uname -m)" = Linux-x86_64 ] || skip "needs Linux x86-64 or aarch64 (this is $(uname -s) $(uname -m))"
  [ "$(id -u)" = 0 ] || skip "needs root (binfmt_misc, chroot, mounts)"
  command -v unshare > /dev/null || skip "no unshare (util-linux)"
  local probe
  probe=$(mktemp -d)
  if ! unshare --mount --propagation private -- mount --bind "$probe" "$probe" 2> /dev/null; then
    rmdir "$probe"
    skip "cannot bind-mount in a private mount namespace (a container without CAP_SYS_ADMIN?)"
  fi
  rmdir "$probe"
  emulator
  mkdir -p "$CACHE"
  exec 9> "$CACHE/.lock"
  flock 9 # one check at a time per cache

  PY=${PYTHON:-}
  if [ -z "$PY" ]; then
    if [ -x "$REPO/.venv/bin/python" ]; then PY=$REPO/.venv/bin/python; else PY=python3; fi
  fi
  "$PY" -m pip --version > /dev/null 2>&1 || skip "no pip for $PY (set PYTHON=...)"

  # the root and the wheels are independent downloads: side by side
  local rc_root=0 rc_site=0
  root > "$CACHE/root.out" 2>&1 &
  local pid_root=$!
  site > "$CACHE/site.out" 2>&1 || rc_site=$?
  wait $pid_root || rc_root=$?
  cat "$CACHE/root.out" "$CACHE/site.out"
  if [ $rc_root = 3 ] || [ $rc_site = 3 ]; then skip "$(cat "$CACHE"/*.skip 2> /dev/null | head -1)"; fi
  [ $rc_root = 0 ] && [ $rc_site = 0 ] || finish 1
  ROOT=$(cat "$CACHE/root.path")
  SITE=$(cat "$CACHE/site.path")
  step "root and wheels ready"
  bytecode
  step "bytecode compiled (natively)"
  if [ -n "${PREPARE:-}" ]; then finish 0; fi

  WORK=$(mktemp -d "$CACHE/run.XXXXXX")
  trap 'rm -rf "$WORK"' EXIT
  mkdir -p "$WORK/mnt" "$WORK/tmp" "$WORK/home" "$WORK/logs"
  chmod 1777 "$WORK/tmp"
  # numba's cache: the 4 newest kernel sources
  { ls -dt "$CACHE"/state/numba/*/ 2> /dev/null || true; } | tail -n +5 | xargs -r rm -rf

  # modelc imports on aarch64 and the plan table switches every x86 path off
  local info
  if ! info=$(in_chroot python3 -c '
import platform, numba, numpy
from modelc.kernels.matmul import plan
from modelc.kernels.runtime import cpu
assert platform.machine() == "aarch64", platform.machine()
on = [k for k, v in cpu.describe().items() if v and k != "WIDE_DOT_EXACT"]
assert not on, f"x86 paths switched on on aarch64: {on}"
print(platform.machine(), "python", platform.python_version(), "numba", numba.__version__, "numpy", numpy.__version__)
print(" ".join(f"{k}={v}" for k, v in cpu.describe().items()))
print("\n".join(f"{n:26s} {t}" for n, t in plan.table()))
' 2>&1); then
    echo "$info" | tail -20
    say "FAILED: modelc does not import on aarch64, or picked an x86 path"
    finish 1
  fi
  say "${info%%$'\n'*}"
  echo "${info#*$'\n'}"
  step "modelc imports, every x86 path off"

  if run_tests chroot "$WORK/logs"; then finish 0; fi
  finish 1
}

native() { # an aarch64 machine: the checkout's .venv, no emulation
  local py=${PYTHON:-$REPO/.venv/bin/python} logs
  [ -x "$py" ] || skip "no $py (pip install -e '.[dev]' into .venv first)"
  in_native() { (cd "$REPO" && "$py" "${@:2}"); }
  logs=$(mktemp -d)
  trap 'rm -rf "$logs"' EXIT
  "$py" -m modelc.kernels.matmul.plan
  if run_tests native "$logs"; then finish 0; fi
  finish 1
}

emulator() { # qemu-user for aarch64 registered with binfmt_misc (installed if missing)
  if ! command -v qemu-aarch64-static > /dev/null || ! command -v debootstrap > /dev/null; then
    command -v apt-get > /dev/null || skip "no qemu-aarch64-static/debootstrap and no apt-get to install them"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -qq qemu-user-static binfmt-support debootstrap > /dev/null 2>&1; then
      (apt-get update -qq > /dev/null 2>&1 && apt-get install -y -qq qemu-user-static binfmt-support debootstrap > /dev/null 2>&1) ||
        skip "cannot install qemu-user-static, binfmt-support, debootstrap (no network?)"
    fi
    step "installed qemu-user-static, binfmt-support, debootstrap"
  fi
  local binfmt=/proc/sys/fs/binfmt_misc
  if [ ! -e $binfmt/register ]; then
    mount -t binfmt_misc binfmt_misc $binfmt 2> /dev/null || skip "cannot mount binfmt_misc (a container without it?)"
  fi
  if ! grep -q '^enabled' $binfmt/qemu-aarch64 2> /dev/null; then
    update-binfmts --enable qemu-aarch64 > /dev/null 2>&1 || true
  fi
  grep -q '^enabled' $binfmt/qemu-aarch64 2> /dev/null || skip "qemu-aarch64 is not registered with binfmt_misc"
  INTERP=$(sed -n 's/^interpreter //p' $binfmt/qemu-aarch64)
  FIXED=$(sed -n 's/^flags: //p' $binfmt/qemu-aarch64 | grep -c F || true) # F: the kernel holds it open
}

root() { # the root folder, keyed by the suite, packages and mirror; used read-only (each run mounts its /tmp)
  local key r
  key=$(echo "$SUITE $DEBS $MIRROR 1" | sha256sum | cut -c1-12)
  r=$CACHE/root-$SUITE-arm64-$key
  echo "$r" > "$CACHE/root.path"
  if [ ! -f "$r/.complete" ]; then
    rm -rf "$r" "$r.tmp"
    if ! debootstrap --foreign --arch=arm64 --variant=minbase --include="$DEBS" "$SUITE" "$r.tmp" "$MIRROR" \
      > "$CACHE/debootstrap.log" 2>&1; then
      tail -5 "$CACHE/debootstrap.log"
      rm -rf "$r.tmp"
      echo "debootstrap could not fetch $SUITE arm64 from $MIRROR (no network?)" > "$CACHE/root.skip"
      return 3
    fi
    for deb in "$r.tmp"/var/cache/apt/archives/*.deb; do dpkg-deb -x "$deb" "$r.tmp"; done
    rm -rf "$r.tmp"/var/cache/apt/archives/*.deb "$r.tmp/debootstrap"
    # what the packages' configure scripts (never run) would have written, and what the chroot needs
    cp "$r.tmp/usr/share/base-passwd/passwd.master" "$r.tmp/etc/passwd"
    cp "$r.tmp/usr/share/base-passwd/group.master" "$r.tmp/etc/group"
    printf '127.0.0.1 localhost\n::1 localhost\n' > "$r.tmp/etc/hosts"
    mkdir -p "$r.tmp/src" "$r.tmp/opt/site" "$r.tmp/cache"
    touch "$r.tmp/.complete"
    mv "$r.tmp" "$r"
    say "built the $SUITE arm64 root ($(du -sh "$r" | cut -f1), $(($(date +%s) - T_START)) s)"
  fi
  rm -f "$CACHE/root.skip"
  if [ "$FIXED" = 0 ] && [ ! -x "$r$INTERP" ]; then # the kernel opens the interpreter in the chroot
    mkdir -p "$r$(dirname "$INTERP")"
    cp "$INTERP" "$r$INTERP"
  fi
}

site() { # modelc's dependencies and the test tools: aarch64 wheels only, installed by this machine's pip
  local reqs pins key s log platforms
  reqs=$("$PY" - "$REPO/pyproject.toml" << 'EOF'
import sys, tomllib
deps = tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]
print("\n".join([*deps, "pytest>=8.0", "pytest-timeout>=2.3", "hypothesis>=6.100"]))
EOF
  )
  pins=""
  if [ -x "$REPO/.venv/bin/pip" ]; then # the versions the x86-64 suite runs with
    pins=$("$REPO/.venv/bin/pip" freeze --exclude-editable 2> /dev/null | grep -E '^[A-Za-z0-9_.-]+==' || true)
  fi
  key=$(printf '%s\n--\n%s\n%s\n' "$reqs" "$pins" "$PYVER" | sha256sum | cut -c1-12)
  s=$CACHE/site-$key
  echo "$s" > "$CACHE/site.path"
  rm -f "$CACHE/site.skip"
  [ -f "$s/.complete" ] && return 0
  rm -rf "$s" "$s.tmp"
  printf '%s\n' "$reqs" > "$CACHE/requirements.txt"
  printf '%s\n' "$pins" > "$CACHE/constraints.txt"
  platforms=(--platform manylinux2014_aarch64) # pip takes each glibc level it may pick by name
  for v in 17 24 26 27 28 29 30 31 32 33 34 35 36; do platforms+=(--platform "manylinux_2_${v}_aarch64"); done
  log=$CACHE/pip.log
  if ! "$PY" -m pip install -q --disable-pip-version-check --cache-dir "$CACHE/pip" --target "$s.tmp" \
    "${platforms[@]}" --implementation cp --python-version "$PYVER" --abi "cp${PYVER/./}" --only-binary=:all: \
    -r "$CACHE/requirements.txt" -c "$CACHE/constraints.txt" > "$log" 2>&1; then
    tail -5 "$log"
    rm -rf "$s.tmp"
    if grep -qiE 'No matching distribution|conflict|ResolutionImpossible' "$log"; then
      say "FAILED: modelc's dependencies do not install on aarch64 (above)"
      return 1
    fi
    echo "pip could not fetch the aarch64 wheels (no network?)" > "$CACHE/site.skip"
    return 3
  fi
  touch "$s.tmp/.complete"
  mv "$s.tmp" "$s"
  say "installed the aarch64 wheels ($(du -sh "$s" | cut -f1), $(($(date +%s) - T_START)) s)"
  { ls -dt "$CACHE"/site-*/ 2> /dev/null || true; } | tail -n +3 | xargs -r rm -rf # the two newest sets
}

bytecode() { # .pyc of the stdlib, the wheels and the checkout, compiled here (natively) where this is 3.11
  "$PY" - "$CACHE/state/pyc" "$ROOT/usr/lib/python$PYVER=/usr/lib/python$PYVER" "$SITE=/opt/site" \
    "$REPO/modelc=/src/modelc" "$REPO/tests=/src/tests" "$REPO/tools=/src/tools" << 'EOF' || true
import concurrent.futures, importlib.util, os, py_compile, sys
if sys.version_info[:2] != (3, 11):
    sys.exit(0)  # another bytecode format: the root's python compiles what it imports (slower)
prefix, jobs = sys.argv[1], []
def fresh(path, cfile):  # a .pyc the root's python takes as it is: same magic, source mtime and size
    try:
        with open(cfile, "rb") as fh:
            head = fh.read(16)
    except OSError:
        return False
    st = os.stat(path)
    want = int(st.st_mtime).to_bytes(4, "little") + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    return head[:4] == importlib.util.MAGIC_NUMBER and head[8:16] == want
for pair in sys.argv[2:]:
    host, inside = pair.split("=")
    for d, dirs, files in os.walk(host):
        dirs[:] = [x for x in dirs if x not in ("tests", "test", "__pycache__")] if inside != "/src/tests" else dirs
        for f in files:
            if f.endswith(".py"):
                src = os.path.join(inside, os.path.relpath(os.path.join(d, f), host))
                cfile = os.path.join(prefix, os.path.dirname(src).lstrip("/"), f[:-3] + "." + sys.implementation.cache_tag + ".pyc")
                if not fresh(os.path.join(d, f), cfile):
                    jobs.append((os.path.join(d, f), cfile, src))
def one(job):
    try:
        py_compile.compile(job[0], cfile=job[1], dfile=job[2], doraise=True)
    except Exception:
        pass  # a file that does not compile on 3.11 (a py2 leftover): the root's python says so if it imports it
with concurrent.futures.ProcessPoolExecutor(os.cpu_count()) as ex:
    list(ex.map(one, jobs, chunksize=64))
EOF
}

# Run a command in the root with the checkout as /src, in a private mount namespace.
in_chroot() {
  mkdir -p "$CACHE/state"
  unshare --mount --propagation private -- /bin/bash -c '
    set -e
    ROOT=$1 M=$2 WORK=$3 REPO=$4 SITE=$5 STATE=$6
    shift 6
    mount --bind "$ROOT" "$M"
    mount -o remount,bind,ro "$M"
    mount --bind "$WORK/tmp" "$M/tmp"
    mount --bind "$WORK/home" "$M/root"
    mount -t proc proc "$M/proc"
    mount --rbind /dev "$M/dev"
    mount --rbind /sys "$M/sys"
    mount --bind "$REPO" "$M/src"
    mount -o remount,bind,ro "$M/src"
    mount --bind "$SITE" "$M/opt/site"
    mount -o remount,bind,ro "$M/opt/site"
    mount --bind "$STATE" "$M/cache"
    cd "$M"
    exec chroot "$M" /usr/bin/env -i HOME=/root USER=root LOGNAME=root LANG=C.UTF-8 \
      PATH=/usr/local/bin:/usr/bin:/bin PYTHONPATH=/opt/site PYTHONPYCACHEPREFIX=/cache/pyc \
      NUMBA_CACHE_DIR=/cache/numba XDG_CACHE_HOME=/tmp/xdg HYPOTHESIS_STORAGE_DIRECTORY=/tmp/hypothesis \
      /bin/sh -c "cd /src && exec \"\$@\"" sh "$@"
  ' sh "$ROOT" "$WORK/mnt" "$WORK" "$REPO" "$SITE" "$CACHE/state" "$@"
}

main "$@"
