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
};

static_assert(offsetof(KernelArgs, data) == 0 && offsetof(KernelArgs, shape) == 8 &&
              offsetof(KernelArgs, strides) == 16 && offsetof(KernelArgs, params) == 24 &&
              offsetof(KernelArgs, flags) == 32 && offsetof(KernelArgs, streaming) == 40 &&
              sizeof(KernelArgs) == 48);

using KernelFn = void (*)(int64_t begin, int64_t end, const KernelArgs* args);

}  // namespace ampfuse::codegen
