#!/usr/bin/env bash
# Installs every Debian package that loom's build, tests and benchmarks need. Idempotent: packages
# already present are skipped, so a second run costs a few seconds.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config clang-format
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev            # CBLAS for loom's CPU matrix products (also libtorch's BLAS)
  libtorch-dev python3-torch # anchors for `loom bench` (PyTorch 1.13, CPU)
  libgloo-dev libopenmpi-dev openmpi-bin # anchors for distributed benchmarks
  dataset-fashion-mnist      # the main job's data set
  fortunes                   # text for `loom train --model gpt`
  liburing-dev libzstd-dev zlib1g-dev
  chromium                   # headless check that `loom mem viz` pages render (tests)
  iproute2                   # ip and tc: hosts emulated by network namespaces (emulated-hosts.sh)
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi

# libtorch links against libblas.so.3; Debian's default alternative is the slow reference BLAS.
# Point it (and liblapack) at OpenBLAS so that benchmarks compare like with like.
arch_dir="/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)"
for lib in libblas.so.3 liblapack.so.3; do
  name="${lib}-$(basename "$arch_dir")"
  target="$arch_dir/openblas-pthread/$lib"
  if [ -e "$target" ] && update-alternatives --query "$name" >/dev/null 2>&1; then
    current=$(update-alternatives --query "$name" | awk '/^Value:/{print $2}')
    if [ "$current" != "$target" ]; then
      $SUDO update-alternatives --set "$name" "$target" >/dev/null
      echo "setup: $name -> $target"
    fi
  fi
done
