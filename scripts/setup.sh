#!/usr/bin/env bash
# Installs the Debian packages ampfuse builds against, and only those that are missing.
# Idempotent: a second run installs nothing and prints nothing but a one-line summary.
set -euo pipefail

packages=(
  build-essential cmake
  llvm-19-dev          # ORC JIT + code generation (find_package(LLVM 19.1 CONFIG))
  libdnnl-dev          # oneDNN 2.6 (v2 API): convolution, matmul, pooling
  libfmt-dev           # CUDA source emission, messages
  nlohmann-json3-dev   # MXNet symbol JSON
  libcli11-dev         # the ampfuse command line
  libgtest-dev libgmock-dev
  libbenchmark-dev
  zlib1g-dev libzstd-dev libxml2-dev libedit-dev libffi-dev libncurses-dev  # LLVMExports.cmake names them
  graphviz             # `ampfuse dot -o FILE.svg`
  python3-venv python3-dev  # the Python package: its virtual environment, the module's headers
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
