#!/usr/bin/env bash
# Packs what bench/gpu_check.sh runs, built here, for a GPU machine that cannot build
# ampfuse itself (no LLVM 19, oneDNN, fmt there): the three binaries, every shared library
# they load except the CUDA driver and NVRTC (the GPU machine's own), and this machine's
# dynamic loader, which runs them whatever that machine's C library is. Wrappers named like
# the binaries in DIR/build-gpu start them through that loader, so
#
#   bench/gpu_bundle.sh build /tmp/gpu && tar -C /tmp -cJf gpu.tar.xz gpu
#   (there)  tar -xJf gpu.tar.xz -C /tmp && AMPFUSE_GPU_BUILD=/tmp/gpu/build-gpu bench/gpu_check.sh
#
# One test cannot pass so: CudaHostEmulation.FuzzerKernelsMatchTheReference compiles kernels
# with that machine's compiler into a shared object, which the carried (older) C library may
# not load (docs/cuda.md, "First run on a GPU").
#
# BUILD must hold ampfuse, ampfuse_cuda_tests and ampfuse_cuda_bandwidth (a release build:
# cmake --build BUILD --target ampfuse ampfuse_cuda_tests ampfuse_cuda_bandwidth).
set -euo pipefail
build="${1:?usage: gpu_bundle.sh BUILD DIR}"
dir="${2:?usage: gpu_bundle.sh BUILD DIR}"
bins=(ampfuse ampfuse_cuda_tests ampfuse_cuda_bandwidth)
rm -rf "$dir"
mkdir -p "$dir/real" "$dir/lib" "$dir/build-gpu"
loader=""
for b in "${bins[@]}"; do
  [ -x "$build/$b" ] || { echo "gpu_bundle: $build/$b missing (build it first)" >&2; exit 1; }
  cp "$build/$b" "$dir/real/"
  while read -r name arrow path _; do
    case "$name" in
      libcuda.so*|libnvrtc*|linux-vdso*) continue ;;
      /*) loader="$name"; continue ;;
    esac
    [ "$arrow" = "=>" ] && [ -f "$path" ] && cp -L "$path" "$dir/lib/$name"
  done < <(ldd "$build/$b")
done
[ -n "$loader" ] || { echo "gpu_bundle: no dynamic loader in ldd's output" >&2; exit 1; }
cp -L "$loader" "$dir/lib/ld-linux.so"
for b in "${bins[@]}"; do
  cat >"$dir/build-gpu/$b" <<WRAP
#!/bin/sh
# Runs the carried $b through the carried loader; the GPU machine's libcuda and libnvrtc
# come from its own directories.
here=\$(cd "\$(dirname "\$0")/.." && pwd)
found=\$(ldconfig -p 2>/dev/null | awk '/libnvrtc.so.13|libcuda.so.1/ {print \$NF}' | xargs -r -n1 dirname | sort -u | tr '\\n' ':')
pip_nvrtc=\$(python3 -c "import nvidia.cuda_nvrtc as m, os; print(os.path.join(os.path.dirname(m.__file__), 'lib'))" 2>/dev/null || true)
exec "\$here/lib/ld-linux.so" --library-path "\$here/lib:\$found\$pip_nvrtc:/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/nvidia/lib64:/usr/lib/x86_64-linux-gnu:/usr/lib64" "\$here/real/$b" "\$@"
WRAP
  chmod +x "$dir/build-gpu/$b"
done
echo "built on $(hostname) from $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u '+%Y-%m-%d %H:%M UTC')" >"$dir/build-gpu/prebuilt.txt"
du -sh "$dir" | sed 's/^/gpu_bundle: /'
