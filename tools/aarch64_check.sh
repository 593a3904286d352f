#!/usr/bin/env bash
# modelc on aarch64: run a subset of the test suite in an arm64 Debian root under qemu-user (issue 43).
#
#   tools/aarch64_check.sh [ci|full|smoke] [PYTEST ARGS...]      (as root, on Linux x86-64; docs/arm.md)
#
# ci    what .ci/run runs: bounded to about 5 minutes on a cold 2-core machine (setup included)
# full  issue 43's list: the logit tests against stored references for llama and a MoE model in F32, F16,
#       Q4_0, Q8_0, Q4_K, Q6_K, IQ4_XS and IQ3_S, the tokenizer tests, `modelc run` + chat completions
#       with the numba kernels compared to the reference kernels (an hour or more cold, minutes warm)
# smoke only the `modelc run` + /v1/chat/completions smoke test
# Extra arguments go to every pytest run (e.g. -x, -k NAME).
#
# The root: debootstrap's first stage (download and unpack, no emulated package configuration, which
# alone took 6-7 minutes) plus every fetched .deb unpacked with dpkg-deb on this machine. Python packages:
# aarch64 wheels from PyPI, installed by this machine's pip (--platform, --target) into a folder that is
# bind-mounted into the root, at the versions of the checkout's .venv where it has one. The checkout is
# bind-mounted read-only at /src. Everything runs in a private mount namespace (nothing stays mounted).
#
# Cached under $MODELC_AARCH64_CACHE (default ~/.cache/modelc-aarch64), each keyed by what built it:
# the root as a tarball, pip's download cache and the installed packages, numba's kernel cache (its
# folders are keyed by the kernels' source, kernels/runtime/jit_cache.py), Python's bytecode.
# On an aarch64 machine the same subset runs natively in the checkout's .venv, without qemu.
#
# Skips (prints "aarch64: skipped: REASON", exit 0) where the emulated root cannot be set up: not Linux
# x86-64, not root, no qemu-user/binfmt_misc, no network for a missing cache.
# MODELC_AARCH64_STRICT=1 makes a skip an error.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
SUBSET=${1:-ci}
[ $# -gt 0 ] && shift
CACHE=${MODELC_AARCH64_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/modelc-aarch64}
SUITE=bookworm  # Python 3.11, glibc 2.36
PYVER=3.11
MIRROR=${MODELC_AARCH64_MIRROR:-http://deb.debian.org/debian}
DEBS=python3,libgomp1  # libgomp: numba's OpenMP threading layer (without it: workqueue, unsafe here)
T_START=$(date +%s)

say() { echo "aarch64: $*"; }
step_t=$T_START
step() {  # print how long the step before took
  local now
  now=$(date +%s)
  say "$1 ($((now - step_t))s)"
  step_t=$now
}
skip() {
  say "skipped: $*"
  if [ -n "${MODELC_AARCH64_STRICT:-}" ]; then exit 1; fi
  exit 0
}

# ---- the subsets: groups of pytest node ids, each group one pytest process (two run at a time) ----------
QUANT=tests/models/test_quant_vs_llamacpp.py::test_no_worse_than_llamacpp
VARIANTS=tests/models/test_hf_variants.py
F16=tests/models/test_f16_weights.py::test_f16_weights_match_numpy_twins_and_transformers
case "$SUBSET" in
  ci)
    GROUPS_=(
      "tests/tokenizer/test_tokenizer.py tests/tokenizer/test_chat_template.py tests/kernels/matmul/test_plan.py tests/kernels/runtime/test_threads.py"
      "$F16[half-llama3] tests/kernels/simd/test_half.py"
    )
    SMOKE=(--max-tokens 8)
    ;;
  full)
    GROUPS_=(
      "tests/tokenizer $VARIANTS::test_hf_folder_matches_transformers[llama3] $F16[half-llama3] $F16[blas-llama3] $QUANT[llama-Q8_0] $QUANT[llama-Q4_0] $QUANT[llama-Q4_K_M] $QUANT[llama-Q6_K] $QUANT[llama-IQ4_XS] $QUANT[llama-IQ3_S]"
      "$VARIANTS::test_gguf_matches_transformers[qwen3moe] $F16[half-qwen3moe] $F16[blas-qwen3moe] $QUANT[qwen3moe-Q4_K_M] $QUANT[qwen3moe-IQ4_XS] $QUANT[qwen3moe-Q4_0]"
    )
    SMOKE=(--until-ready --timeout 3600)
    ;;
  smoke)
    GROUPS_=()
    SMOKE=(--until-ready --timeout 3600)
    ;;
  *)
    echo "usage: $0 [ci|full|smoke] [PYTEST ARGS...]" >&2
    exit 2
    ;;
esac
PYTEST=(-q -p no:cacheprovider -o "addopts=--strict-markers --import-mode=importlib -ra" --timeout=7200 "$@")

run_groups() {  # $1: how to run a command ("native" or "chroot"); every group, two at a time, then the smoke test
  local how=$1 logs=$2 pids=() rc=0 i
  for i in "${!GROUPS_[@]}"; do
    # shellcheck disable=SC2086
    (in_"$how" python3 -m pytest "${PYTEST[@]}" ${GROUPS_[$i]} > "$logs/group$i.log" 2>&1) &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    if wait "${pids[$i]}"; then
      say "group $i: $(tail -1 "$logs/group$i.log")"
    else
      rc=1
      say "group $i FAILED:"
      tail -60 "$logs/group$i.log"
    fi
  done
  step "tests"
  if in_"$how" python3 tools/aarch64_smoke.py "${SMOKE[@]}" > "$logs/smoke.log" 2>&1; then
    say "$(grep '^smoke:' "$logs/smoke.log" | tr '\n' ' ')"
  else
    rc=1
    say "smoke test FAILED:"
    tail -60 "$logs/smoke.log"
  fi
  step "smoke test"
  return $rc
}

# ---- an aarch64 machine: no emulation --------------------------------------------------------------------
if [ "$(uname -m)" = aarch64 ]; then
  PY=${PYTHON:-$REPO/.venv/bin/python}
  [ -x "$PY" ] || skip "no $PY (pip install -e '.[dev]' into .venv first)"
  in_native() { (cd "$REPO" && "${@/#python3/$PY}"); }
  logs=$(mktemp -d)
  trap 'rm -rf "$logs"' EXIT
  if run_groups native "$logs"; then say "ok, $(($(date +%s) - T_START))s (native aarch64)"; exit 0; fi
  say "FAILED"
  exit 1
fi

# ---- the emulated root -------------------------------------------------------------------------------------
[ "$(uname -s)-$(uname -m)" = Linux-x86_64 ] || skip "needs Linux x86-64 or aarch64 (this is $(uname -s) $(uname -m))"
[ "$(id -u)" = 0 ] || skip "needs root (binfmt_misc, chroot, mounts)"
command -v unshare > /dev/null || skip "no unshare (util-linux)"

if ! command -v qemu-aarch64-static > /dev/null || ! command -v debootstrap > /dev/null; then
  command -v apt-get > /dev/null || skip "no qemu-aarch64-static/debootstrap and no apt-get to install them"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -qq qemu-user-static binfmt-support debootstrap > /dev/null 2>&1; then
    (apt-get update -qq > /dev/null 2>&1 && apt-get install -y -qq qemu-user-static binfmt-support debootstrap > /dev/null 2>&1) ||
      skip "cannot install qemu-user-static, binfmt-support, debootstrap (no network?)"
  fi
  step "installed qemu-user-static, binfmt-support, debootstrap"
fi
BINFMT=/proc/sys/fs/binfmt_misc
if [ ! -e $BINFMT/register ]; then
  mount -t binfmt_misc binfmt_misc $BINFMT 2> /dev/null || skip "cannot mount binfmt_misc (a container without it?)"
fi
if ! grep -q '^enabled' $BINFMT/qemu-aarch64 2> /dev/null; then
  update-binfmts --enable qemu-aarch64 > /dev/null 2>&1 || true
fi
grep -q '^enabled' $BINFMT/qemu-aarch64 2> /dev/null || skip "qemu-aarch64 is not registered with binfmt_misc"
INTERP=$(sed -n 's/^interpreter //p' $BINFMT/qemu-aarch64)
FIXED=$(sed -n 's/^flags: //p' $BINFMT/qemu-aarch64 | grep -c F || true)  # F: the kernel holds the interpreter open

mkdir -p "$CACHE"
exec 9> "$CACHE/.lock"
flock 9  # one check at a time per cache

# The root tarball, keyed by the suite, packages and mirror.
key=$(echo "$SUITE $DEBS $MIRROR 1" | sha256sum | cut -c1-12)
TARBALL=$CACHE/root-$SUITE-arm64-$key.tar.gz
if [ ! -f "$TARBALL" ]; then
  build=$(mktemp -d "$CACHE/build.XXXXXX")
  trap 'rm -rf "$build"' EXIT
  if ! debootstrap --foreign --arch=arm64 --variant=minbase --include="$DEBS" "$SUITE" "$build/root" "$MIRROR" \
    > "$build/debootstrap.log" 2>&1; then
    tail -5 "$build/debootstrap.log"
    skip "debootstrap could not fetch $SUITE arm64 from $MIRROR (no network?)"
  fi
  for deb in "$build"/root/var/cache/apt/archives/*.deb; do dpkg-deb -x "$deb" "$build/root"; done
  rm -rf "$build"/root/var/cache/apt/archives/*.deb "$build/root/debootstrap"
  # what the packages' configure scripts (never run) would have written, and what the chroot needs
  cp "$build/root/usr/share/base-passwd/passwd.master" "$build/root/etc/passwd"
  cp "$build/root/usr/share/base-passwd/group.master" "$build/root/etc/group"
  printf '127.0.0.1 localhost\n::1 localhost\n' > "$build/root/etc/hosts"
  mkdir -p "$build/root/src" "$build/root/opt/site" "$build/root/cache"
  tar -C "$build/root" -czf "$TARBALL.tmp" . && mv "$TARBALL.tmp" "$TARBALL"
  rm -rf "$build"
  trap - EXIT
  step "built the $SUITE arm64 root ($(du -h "$TARBALL" | cut -f1) tarball)"
fi

# The Python packages: modelc's dependencies and the test tools, aarch64 wheels only.
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x "$REPO/.venv/bin/python" ]; then PY=$REPO/.venv/bin/python; else PY=python3; fi
fi
"$PY" -m pip --version > /dev/null 2>&1 || skip "no pip for $PY (set PYTHON=...)"
reqs=$("$PY" - "$REPO/pyproject.toml" << 'EOF'
import sys, tomllib
deps = tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]
print("\n".join([*deps, "pytest>=8.0", "pytest-timeout>=2.3", "hypothesis>=6.100"]))
EOF
)
pins=""
if [ -x "$REPO/.venv/bin/pip" ]; then  # the versions the x86-64 suite runs with
  pins=$("$REPO/.venv/bin/pip" freeze --exclude-editable 2> /dev/null | grep -E '^[A-Za-z0-9_.-]+==' || true)
fi
key=$(printf '%s\n--\n%s\n%s\n' "$reqs" "$pins" "$PYVER" | sha256sum | cut -c1-12)
SITE=$CACHE/site-$key
if [ ! -f "$SITE/.complete" ]; then
  rm -rf "$SITE" "$SITE.tmp"
  printf '%s\n' "$reqs" > "$CACHE/requirements-$key.txt"
  printf '%s\n' "$pins" > "$CACHE/constraints-$key.txt"
  if ! "$PY" -m pip install -q --disable-pip-version-check --cache-dir "$CACHE/pip" --target "$SITE.tmp" \
    --platform manylinux_2_36_aarch64 --implementation cp --python-version "$PYVER" --abi "cp${PYVER/./}" \
    --only-binary=:all: -r "$CACHE/requirements-$key.txt" -c "$CACHE/constraints-$key.txt" > "$CACHE/pip-$key.log" 2>&1; then
    tail -5 "$CACHE/pip-$key.log"
    if grep -qiE 'No matching distribution|conflict|ResolutionImpossible' "$CACHE/pip-$key.log"; then
      say "FAILED: the dependencies do not install on aarch64 (above)"
      exit 1
    fi
    skip "pip could not fetch the aarch64 wheels (no network?)"
  fi
  touch "$SITE.tmp/.complete"
  mv "$SITE.tmp" "$SITE"
  step "installed the aarch64 wheels ($(du -sh "$SITE" | cut -f1))"
fi
ls -dt "$CACHE"/site-* 2> /dev/null | tail -n +3 | xargs -r rm -rf  # keep the two newest package sets

WORK=$(mktemp -d "$CACHE/run.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
R=$WORK/root
mkdir -p "$R" "$WORK/logs" "$CACHE/state"
tar -C "$R" -xzf "$TARBALL"
if [ "$FIXED" = 0 ]; then  # the kernel opens the interpreter in the chroot: put it there
  mkdir -p "$R$(dirname "$INTERP")"
  cp "$INTERP" "$R$INTERP"
fi
ls -dt "$CACHE"/state/numba/*/ 2> /dev/null | tail -n +5 | xargs -r rm -rf  # numba: the 4 newest kernel sources
step "unpacked the root"

# Run a command in the root as the checkout's /src, in a private mount namespace.
in_chroot() {
  unshare --mount --propagation private -- /bin/bash -c '
    set -e
    R=$1 REPO=$2 SITE=$3 STATE=$4
    shift 4
    mount -t proc proc "$R/proc"
    mount --rbind /dev "$R/dev"
    mount --rbind /sys "$R/sys"
    mount --bind "$REPO" "$R/src"
    mount -o remount,bind,ro "$R/src"
    mount --bind "$SITE" "$R/opt/site"
    mount -o remount,bind,ro "$R/opt/site"
    mount --bind "$STATE" "$R/cache"
    cd "$R"
    exec chroot "$R" /usr/bin/env -i HOME=/root USER=root LOGNAME=root LANG=C.UTF-8 \
      PATH=/usr/local/bin:/usr/bin:/bin PYTHONPATH=/opt/site PYTHONPYCACHEPREFIX=/cache/pyc \
      NUMBA_CACHE_DIR=/cache/numba XDG_CACHE_HOME=/tmp/xdg HYPOTHESIS_STORAGE_DIRECTORY=/tmp/hypothesis \
      /bin/sh -c "cd /src && exec \"\$@\"" sh "$@"
  ' sh "$R" "$REPO" "$SITE" "$CACHE/state" "$@"
}

arch=$(in_chroot python3 -c 'import platform, numba, numpy; print(platform.machine(), numba.__version__, numpy.__version__)')
[ "${arch%% *}" = aarch64 ] || { say "FAILED: the root's python reports '$arch', not aarch64"; exit 1; }
say "python $PYVER $arch (numba, numpy)"
plan_table=$(in_chroot python3 -m modelc.kernels.matmul.plan)
say "plan: ${plan_table%%$'\n'*}"
in_chroot python3 -c '
from modelc.kernels.runtime import cpu
on = [k for k, v in cpu.describe().items() if v and k != "WIDE_DOT_EXACT"]
assert not on, f"x86 paths switched on on aarch64: {on}"
' || { say "FAILED: x86 kernels selected on aarch64"; exit 1; }
step "modelc imports, every x86 path off"

if run_groups chroot "$WORK/logs"; then
  say "ok, $(($(date +%s) - T_START))s in all"
  exit 0
fi
say "FAILED after $(($(date +%s) - T_START))s"
exit 1
