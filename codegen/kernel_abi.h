// The calling convention between generated kernels and the runtime that launches them.
//
// Every CPU kernel is `void fn(int64_t begin, int64_t end, const KernelArgs* args)` and
// processes the flat iteration indices [begin, end) (row-major over the spec's shape), so
// a thread pool can hand disjoint ranges to different threads. The emitter mirrors this
// struct's layout field by field (see llvm_emitter.cpp); the static_asserts pin it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ampfuse::codegen {

struct KernelArgs {
  void* const* data;       // one base pointer per operand: the inputs, then the outputs
  const int64_t* shape;    // rank extents
  const int64_t* strides;  // operand k, dimension d at [k * rank + d], in elements
  const double* params;    // num_params values, rounded to the compute type by the kernel
  int32_t* flags;          // one per flag; the kernel stores 1 when it finds a non-finite value
  int64_t streaming;       // nonzero: write contiguous outputs with non-temporal stores
                           // (heeded only by kernels whose signature `streams`)
};

static_assert(offsetof(KernelArgs, data) == 0 && offsetof(KernelArgs, shape) == 8 &&
              offsetof(KernelArgs, strides) == 16 && offsetof(KernelArgs, params) == 24 &&
              offsetof(KernelArgs, flags) == 32 && offsetof(KernelArgs, streaming) == 40 &&
              sizeof(KernelArgs) == 48);

// Outputs of more than this many bytes in one launch are written with non-temporal stores
// when 64-byte aligned (they would not stay in the caches anyway, and bypassing them saves
// the read-for-ownership of every line). Only kernels whose spec writes that much are
// compiled with the streaming loops (KernelSignature::streams): the second copy of the
// loop was half of every other kernel's compile time (bench/README.md).
inline constexpr int64_t kStreamingOutputBytes = int64_t{32} << 20;

using KernelFn = void (*)(int64_t begin, int64_t end, const KernelArgs* args);

}  // namespace ampfuse::codegen
