#!/usr/bin/env bash
# The nvidia profile end to end on a real NVIDIA GPU, in one call on a machine that has one
# (docs/testing.md, "On a real GPU"), and NVIDIA's Container Toolkit beside it.
#
#   scripts/gpu-check.sh --pack        here: build and pack what the GPU machine needs into
#                                      target/gpu-kit.tar.xz (release binaries, runc 1.4, NVIDIA's
#                                      toolkit when scripts/nvidia-toolkit-build.sh has built it,
#                                      and a container image: busybox, glibc and cuda-smoke)
#   scripts/gpu-check.sh [--rounds N] [--detail]
#                                      on the GPU machine: unpack the kit and check, on the host's
#                                      driver (driver root /, or where libcuda.so.1 is), through
#                                      the hook and through the shim on runc, and through NVIDIA's
#                                      nvidia-container-runtime (cdi mode, its nvml-mode spec):
#                                      the container lists the GPU with nvidia-smi, asked for by
#                                      index and by UUID, and runs a kernel (cuda-smoke: a PTX
#                                      kernel JIT-compiled by the driver, checked result); then
#                                      N interleaved rounds of create/start/wait/delete of each
#                                      path and of plain runc (two of them, the A/A pair): medians
#                                      of wall time and CPU; --detail adds the rows that part the
#                                      hook's cost: runc running a hook that does nothing, the hook
#                                      with no device asked for, and with each capability group alone
#   scripts/gpu-check.sh --simulated   here: the same steps on the vendor-stack node (Debian's 535
#                                      user space, nodes no driver answers), where each GPU step
#                                      must stop at the kernel instead: a check of the script
#
# Everything goes to $OUT/gpu-check.txt when $OUT is set (the GPU machine's result folder), else
# to target/gpu-check.txt. Exits non-zero when a step that must pass failed.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
kit_archive=$repo/target/gpu-kit.tar.xz
mode=real
rounds=20
detail=false
while [ $# -gt 0 ]; do
  case $1 in
    --pack) mode=pack ;;
    --simulated) mode=simulated ;;
    --rounds) rounds=$2; shift ;;
    --detail) detail=true ;;
    *) echo "usage: scripts/gpu-check.sh [--pack | --simulated] [--rounds N] [--detail]" >&2; exit 2 ;;
  esac
  shift
done
fail() { echo "gpu-check: $*" >&2; exit 1; }

pack() {
  set -e
  local kit=$repo/target/gpu-kit
  rm -rf "$kit" && mkdir -p "$kit"/{bin,rootfs}
  cargo build --release --quiet -p devinject-oci -p devinject-ctl --bins
  cp target/release/{devinject-hook,devinject-runtime,devinject-ctl} "$kit/bin/"
  cp "$(scripts/runc-build.sh)" "$kit/bin/runc"
  local toolkit
  if toolkit=$(scripts/nvidia-toolkit-build.sh --if-built); then
    cp "$toolkit"/{nvidia-container-runtime,nvidia-cdi-hook,nvidia-ctk} "$kit/bin/"
  else
    echo "gpu-check: NVIDIA's toolkit is not built (scripts/nvidia-toolkit-build.sh): packed without it" >&2
  fi
  local root=$kit/rootfs
  mkdir -p "$root"/{bin,sbin,etc,dev,proc,sys,tmp,usr/bin,root}
  cp /bin/busybox "$root/bin/busybox"
  for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "$root/bin/$a"; done
  echo "root:x:0:0:root:/root:/bin/sh" >"$root/etc/passwd"
  echo "root:x:0:" >"$root/etc/group"
  gcc -O2 -Wall -o "$root/usr/bin/cuda-smoke" scripts/gpu-check/cuda-smoke.c
  # glibc as the program and NVIDIA's tools link it (nvidia-smi: libc, libm, libdl, libpthread,
  # librt), at the host's paths.
  local lib
  for lib in $(ldd "$root/usr/bin/cuda-smoke" | grep -o '/[^ ]*') /lib/x86_64-linux-gnu/{libm.so.6,libpthread.so.0,librt.so.1,libdl.so.2}; do
    mkdir -p "$root$(dirname "$lib")" && cp -L "$lib" "$root$lib"
  done
  cp /sbin/ldconfig "$root/sbin/ldconfig"
  tar -C "$repo/target" -cJf "$kit_archive" gpu-kit
  echo "gpu-check: packed $(du -h "$kit_archive" | cut -f1) into $kit_archive (carry target/gpu-kit.tar.xz)"
}

if [ "$mode" = pack ]; then
  pack
  exit $?
fi

[ "$(id -u)" = 0 ] || fail "needs root (runc, device nodes)"
[ -f "$kit_archive" ] || fail "no $kit_archive: run scripts/gpu-check.sh --pack first, and carry it"
report=${OUT:-$repo/target}/gpu-check.txt
mkdir -p "$(dirname "$report")"
work=$(mktemp -d /tmp/gpu-check.XXXXXX)
trap 'for id in $(ls "$work/state" 2>/dev/null); do "$kit/bin/runc" --root "$work/state" delete --force "$id" >/dev/null 2>&1; done; rm -rf "$work"' EXIT
tar -C "$work" -xJf "$kit_archive"
kit=$work/gpu-kit
exec > >(tee "$report") 2>&1
failed=0
step() { echo; echo "== $*"; }
must() { if "$@"; then echo "PASS"; else echo "FAIL"; failed=1; fi; }

# The host's roots, or the simulated node's.
dev=/dev sys=/sys proc=/proc driver=/
expect_gpu=true
if [ "$mode" = simulated ]; then
  expect_gpu=false
  stacks=${DEVINJECT_VENDOR_STACKS:-$(scripts/vendor-stacks-fetch.sh --if-fetched)} ||
    fail "--simulated needs the vendor stacks (scripts/vendor-stacks-fetch.sh)"
  dev=$work/dev proc=$work/proc sys=$work/sys driver=$stacks/nvidia
  mkdir -p "$dev" "$sys" "$proc/driver/nvidia/gpus/0000:01:00.0"
  mknod -m 666 "$dev/nvidia0" c 195 0 && mknod -m 666 "$dev/nvidiactl" c 195 255 &&
    mknod -m 666 "$dev/nvidia-uvm" c 509 0 || fail "mknod"
  printf 'Model: \t\t simulated\nGPU UUID: \t GPU-00000000-1111-2222-3333-444444444444\nBus Location: \t 0000:01:00.0\nDevice Minor: \t 0\n' \
    >"$proc/driver/nvidia/gpus/0000:01:00.0/information"
  mkdir -p "$work/bin" && ln -s "$driver/usr/lib/nvidia/current/nvidia-smi" "$work/bin/nvidia-smi"
  export PATH=$work/bin:$PATH
fi

step "the host"
uname -r
if $expect_gpu; then
  nvidia-smi -L || { echo "FAIL: nvidia-smi on the host"; failed=1; }
  cat /proc/driver/nvidia/version 2>&1 | head -n 2
  # What the profile's discovery reads, and MIG as the GPU has it (read only: the mode is the
  # machine's to set).
  ls -l /dev/nvidia* /dev/nvidia-caps 2>&1 | head -n 20
  ls /proc/driver/nvidia/gpus /proc/driver/nvidia/capabilities 2>&1 | head -n 10
  nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,mig.mode.current --format=csv 2>&1
  nvidia-smi -L 2>&1 | grep -i mig || echo "no MIG device listed"
  # runc needs a cgroup hierarchy; a VM's init may not mount one.
  if ! grep -q ' /sys/fs/cgroup ' /proc/self/mountinfo; then
    mount -t cgroup2 none /sys/fs/cgroup && echo "mounted cgroup2 on /sys/fs/cgroup"
  fi
  grep ' /sys/fs/cgroup' /proc/self/mountinfo | head -n 3
fi
# Where the host's driver libraries are (a host may keep them outside the profile's library
# directories, e.g. /usr/local/nvidia/lib64): added to a copy of the profile.
libcuda_dir=$( (ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 .*x86-64/ {print $NF; exit}') )
libcuda_dir=${libcuda_dir%/*}
if [ -z "$libcuda_dir" ] && [ "$mode" = real ]; then
  # A driver kept off the linker cache (reached through LD_LIBRARY_PATH, e.g. /usr/local/nvidia).
  ld_path=${LD_LIBRARY_PATH:-}
  for d in ${ld_path//:/ } /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib64; do
    [ -e "$d/libcuda.so.1" ] && libcuda_dir=$d && break
  done
fi
smi=$(command -v nvidia-smi || true)
# NVIDIA's spec mounts nvidia-smi at its host path: the containers' PATH has that directory too.
smi_dir= && [ "$mode" = real ] && [ -n "$smi" ] && smi_dir=$(dirname "$(readlink -f "$smi")")
echo "libcuda.so.1 in: ${libcuda_dir:-(not in the linker cache)}; nvidia-smi: ${smi:-(none)}"

profiles=$work/profiles
mkdir -p "$profiles"
cp profiles/nvidia.toml "$profiles/"
if [ -n "$libcuda_dir" ] && [ "$mode" = real ]; then
  sed -i "s|^library_dirs = \[|library_dirs = [\"$libcuda_dir\", |" "$profiles/nvidia.toml"
fi
if [ "$mode" = real ]; then
  # The host's nvidia-smi program: on PATH, or beside the driver's libraries (a host may keep a
  # wrapper script at /usr/bin/nvidia-smi that runs the one in the driver's directory, a path
  # the container does not have). Listed ahead of the profile's binaries: the first file for a
  # container path is the one mounted.
  real_smi=
  for c in "$smi" "${libcuda_dir%/*}/bin/nvidia-smi"; do
    [ -n "$c" ] && c=$(readlink -f "$c") && head -c 4 "$c" 2>/dev/null | grep -q ELF && real_smi=$c && break
  done
  echo "nvidia-smi program: ${real_smi:-(none found)}"
  if [ -n "$real_smi" ] && [ "$real_smi" != /usr/bin/nvidia-smi ]; then
    awk -v p="$real_smi" '!done && /^\[\[binaries\]\]/ {print "[[binaries]]\npath = \"" p "\"\ncapability = \"utility\"\n"; done = 1} {print}' \
      "$profiles/nvidia.toml" >"$profiles/nvidia.toml.new" && mv "$profiles/nvidia.toml.new" "$profiles/nvidia.toml"
  fi
fi
config=$work/config.toml
cat >"$config" <<EOF
profiles_dir = "$profiles"
dev_root = "$dev"
sys_root = "$sys"
proc_root = "$proc"
driver_root = "$driver"
runtime = "$kit/bin/runc"
hook = "$kit/bin/devinject-hook"
EOF

step "devinject-ctl devices list"
"$kit/bin/devinject-ctl" devices list --profiles-dir "$profiles" --dev-root "$dev" --sys-root "$sys" \
  --proc-root "$proc" || failed=1
uuid=$(cat "$proc"/driver/nvidia/gpus/*/information 2>/dev/null | awk -F': *' '/^GPU UUID/ {gsub(/[ \t]/, "", $2); print $2; exit}')
if [ -z "$uuid" ] && $expect_gpu; then
  # Where procfs has no driver directory (a sandboxed kernel), ask NVML; the profile's alias
  # discovery reads procfs, so this request shows whether that host is served.
  uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0 2>/dev/null)
fi
echo "GPU 0's UUID: ${uuid:-(none)}"

# bundle NAME HOOKS_JSON ENV_JSON_ITEMS COMMAND: an OCI bundle on its own copy of the image.
bundle() {
  local b=$work/bundles/$1
  mkdir -p "$b"
  cp -a "$kit/rootfs" "$b/rootfs"
  cat >"$b/config.json" <<EOF
{"ociVersion": "1.0.2",
 "process": {"terminal": false, "user": {"uid": 0, "gid": 0}, "cwd": "/",
   "args": ["/bin/sh", "-c", "$4"],
   "env": ["PATH=/usr/bin:/bin:/sbin${smi_dir:+:$smi_dir}"$3],
   "capabilities": {"bounding": ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_SETUID", "CAP_SETGID"],
     "effective": ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_SETUID", "CAP_SETGID"],
     "permitted": ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_SETUID", "CAP_SETGID"]},
   "noNewPrivileges": true},
 "root": {"path": "rootfs"},
 "hostname": "gpu-check",
 "mounts": [
   {"destination": "/proc", "type": "proc", "source": "proc"},
   {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
   {"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
   {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]}],
 "hooks": {$2},
 "linux": {"namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}],
   "resources": {"devices": [{"allow": false, "access": "rwm"}]}}}
EOF
  echo "$b"
}
hook_json="\"createRuntime\": [{\"path\": \"$kit/bin/devinject-hook\", \"args\": [\"devinject-hook\", \"--config\", \"$config\"]}]"
runc=("$kit/bin/runc" --root "$work/state")
shim=("$kit/bin/devinject-runtime" --config "$config" --runtime "$kit/bin/runc" --root "$work/state")
# run NAME RUNTIME... -- BUNDLE: create, start, wait for the end, delete, as an engine does
# (NVIDIA's runtime edits the spec on `create` only); the container's output is this output.
n=0
run() {
  local name=$1 b id status
  shift
  local rt=()
  while [ "$1" != -- ]; do rt+=("$1"); shift; done
  b=$2
  n=$((n + 1))
  id=$name-$n
  timeout 60 "${rt[@]}" create --bundle "$b" "$id" </dev/null || return 1
  "${runc[@]}" start "$id" || return 1
  for ((i = 0; i < 6000; i++)); do
    status=$("${runc[@]}" state "$id" 2>/dev/null | grep -o '"status": "[a-z]*"')
    [ "$status" = '"status": "stopped"' ] && break
    sleep 0.01
  done
  "${runc[@]}" delete --force "$id" >/dev/null 2>&1
}
gpu_ok() {
  if $expect_gpu; then
    grep -q '^GPU 0: ' <<<"$1" && grep -q '^cuda-smoke: OK' <<<"$1"
  else
    grep -q "couldn't communicate with the NVIDIA driver\|^nvidia-smi not checked" <<<"$1" &&
      grep -q 'cuInit failed: 100 CUDA_ERROR_NO_DEVICE' <<<"$1"
  fi
}
check() {
  local what=$1 out
  shift
  step "$what"
  out=$("$@" 2>&1)
  echo "$out"
  must gpu_ok "$out"
}
script="nvidia-smi -L; cuda-smoke"
check "the hook: NVIDIA_VISIBLE_DEVICES=0" run hook "${runc[@]}" -- \
  "$(bundle hook0 "$hook_json" ', "NVIDIA_VISIBLE_DEVICES=0"' "$script")"
if [ -n "$uuid" ]; then
  check "the hook: NVIDIA_VISIBLE_DEVICES=$uuid" run hook "${runc[@]}" -- \
    "$(bundle hookuuid "$hook_json" ", \"NVIDIA_VISIBLE_DEVICES=$uuid\"" "$script")"
fi
check "the shim: NVIDIA_VISIBLE_DEVICES=0" run shim "${shim[@]}" -- \
  "$(bundle shim0 "" ', "NVIDIA_VISIBLE_DEVICES=0"' "$script")"

# nvidia_runtime_config SPEC_DIR KIND: nvidia-container-runtime's configuration for cdi mode,
# reading the specs in SPEC_DIR, in front of the kit's runc.
nvidia_runtime_config() {
  printf '[nvidia-container-runtime]\nmode = "cdi"\nruntimes = ["%s"]\n[nvidia-container-runtime.modes.cdi]\nspec-dirs = ["%s"]\ndefault-kind = "%s"\n' \
    "$kit/bin/runc" "$1" "$2"
}
nvidia=false
ours=false
if [ -x "$kit/bin/nvidia-container-runtime" ]; then
  # Our CDI spec, as an engine's CDI support reads it: NVIDIA's runtime in cdi mode is such an
  # engine here (no containerd on this machine), with only our spec in its directory.
  step "CDI: devinject-ctl cdi generate"
  mkdir -p "$work/cdi-ours" "$work/nvidia-ours"
  if "$kit/bin/devinject-ctl" cdi generate --output "$work/cdi-ours" --profiles-dir "$profiles" \
    --dev-root "$dev" --sys-root "$sys" --proc-root "$proc" --driver-root "$driver" \
    --hook-path "$kit/bin/devinject-hook" --hook-config "$config"; then
    ls "$work/cdi-ours"
    [ -n "${OUT:-}" ] && cp "$work"/cdi-ours/*.json "$OUT/" 2>/dev/null
    nvidia_runtime_config "$work/cdi-ours" devinject.io/nvidia >"$work/nvidia-ours/config.toml"
    ours=true
    cdi_rt=(env NVIDIA_CTK_CONFIG_FILE_PATH="$work/nvidia-ours/config.toml" "$kit/bin/nvidia-container-runtime" --root "$work/state")
    check "CDI: our spec through nvidia-container-runtime (cdi mode), NVIDIA_VISIBLE_DEVICES=devinject.io/nvidia=0" \
      run cdi "${cdi_rt[@]}" -- \
      "$(bundle cdi0 "" ', "NVIDIA_VISIBLE_DEVICES=devinject.io/nvidia=0"' "$script")"
  else
    echo "FAIL: devinject-ctl cdi generate"
    failed=1
  fi

  step "NVIDIA's toolkit: nvidia-ctk cdi generate"
  mkdir -p "$work/cdi" "$work/nvidia"
  gen_mode=() && [ "$mode" = simulated ] && gen_mode=(--mode=management --dev-root="$work" --driver-root="$driver")
  if "$kit/bin/nvidia-ctk" cdi generate "${gen_mode[@]}" --nvidia-cdi-hook-path="$kit/bin/nvidia-cdi-hook" \
    --output="$work/cdi/nvidia.yaml" 2>&1 | tail -n 5; then
    [ -n "${OUT:-}" ] && cp "$work/cdi/nvidia.yaml" "$OUT/" 2>/dev/null
    nvidia_runtime_config "$work/cdi" nvidia.com/gpu >"$work/nvidia/config.toml"
    export NVIDIA_CTK_CONFIG_FILE_PATH=$work/nvidia/config.toml
    device=nvidia.com/gpu=0 && [ "$mode" = simulated ] && device=nvidia.com/gpu=all
    nvidia=true
    # Debian's packages keep nvidia-smi off PATH (alternatives link it on a real host), where
    # NVIDIA's generator looks for it: the simulated node checks cuda-smoke alone there.
    nvscript=$script && [ "$mode" = simulated ] && nvscript="echo nvidia-smi not checked; cuda-smoke"
    check "NVIDIA's nvidia-container-runtime, cdi mode: NVIDIA_VISIBLE_DEVICES=$device" \
      run nvidia "$kit/bin/nvidia-container-runtime" --root "$work/state" -- \
      "$(bundle nvidia0 "" ", \"NVIDIA_VISIBLE_DEVICES=$device\"" "$nvscript")"
  else
    echo "FAIL: nvidia-ctk cdi generate"
    failed=1
  fi
fi

step "start cost: $rounds interleaved rounds of create, start, the container's end, delete (container: true)"
# runc: no device, twice (the A/A pair); floor: runc given our CDI spec's device nodes, mounts and
# environment written into config.json (scripts/gpu-check/floor-bundle.py), nothing run at start.
# scripts/gpu-check/start-cost.py times create + start and counts the CPU of every process of a
# start, the container's own included.
paths=(runc runc-aa)
$ours && paths+=(floor)
paths+=(hook)
groups=(utility compute video graphics display ngx compat32)
$detail && paths+=(runc-hook hook-none "${groups[@]/#/hook-}")
paths+=(shim)
$ours && paths+=(cdi)
$nvidia && paths+=(nvidia)
: >"$work/paths"
for p in "${paths[@]}"; do
  case $p in
    runc | runc-aa) bundle "t-$p" "" "" "true" >/dev/null ;;
    floor)
      bundle "t-$p" "" "" "true" >/dev/null
      python3 scripts/gpu-check/floor-bundle.py "$(ls "$work"/cdi-ours/*nvidia*.json | head -n 1)" 0 \
        "$work/bundles/t-$p/config.json" || failed=1
      ;;
    # Every part, as NVIDIA's spec injects every library of the driver.
    hook) bundle "t-$p" "$hook_json" ', "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=all"' "true" >/dev/null ;;
    # What runc pays to run any createRuntime hook: the host's true(1).
    runc-hook) bundle "t-$p" "\"createRuntime\": [{\"path\": \"$(type -P true)\"}]" "" "true" >/dev/null ;;
    # The hook's start and its reading of the state and config.json, nothing asked for.
    hook-none) bundle "t-$p" "$hook_json" "" "true" >/dev/null ;;
    # One capability group each.
    hook-*) bundle "t-$p" "$hook_json" ", \"NVIDIA_VISIBLE_DEVICES=0\", \"NVIDIA_DRIVER_CAPABILITIES=${p#hook-}\"" "true" >/dev/null ;;
    shim) bundle "t-$p" "" ', "NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=all"' "true" >/dev/null ;;
    cdi) bundle "t-$p" "" ', "NVIDIA_VISIBLE_DEVICES=devinject.io/nvidia=0", "NVIDIA_DRIVER_CAPABILITIES=all"' "true" >/dev/null ;;
    nvidia) bundle "t-$p" "" ", \"NVIDIA_VISIBLE_DEVICES=$device\"" "true" >/dev/null ;;
  esac
  case $p in
    runc | runc-aa | floor | hook | runc-hook | hook-*) rt=("${runc[@]}") ;;
    shim) rt=("${shim[@]}") ;;
    cdi) rt=("${cdi_rt[@]}") ;;
    nvidia) rt=("$kit/bin/nvidia-container-runtime" --root "$work/state") ;;
  esac
  echo "$p $work/bundles/t-$p ${rt[*]}" >>"$work/paths"
done
python3 scripts/gpu-check/start-cost.py "$rounds" "$kit/bin/runc" "$work/state" "$work/paths" || failed=1

echo
if [ "$failed" = 0 ]; then echo "gpu-check: every step passed (report: $report)"; else echo "gpu-check: a step FAILED (report: $report)"; fi
exit "$failed"
