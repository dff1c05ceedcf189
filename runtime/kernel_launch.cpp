// run_kernel (declared in runtime/kernel_cache.h): from a spec's sizes and strides to
// KernelArgs, and from one index range to one chunk per thread.
#include "ir/error.h"
#include "runtime/kernel_cache.h"

#include <vector>

namespace ampfuse::runtime {


void run_kernel(const CompiledKernel& kernel, const codegen::KernelSpec& spec, std::span<void* const> data,
                std::span<const double> params, std::span<int32_t> flags, ThreadPool& pool) {
  const size_t operands = spec.inputs.size() + spec.outputs.size();
  if (data.size() != operands)
    fail("kernel '{}': {} buffers given for {} inputs and {} outputs", spec.name, data.size(), spec.inputs.size(),
         spec.outputs.size());
  if (params.size() != static_cast<size_t>(spec.num_params))
    fail("kernel '{}': {} parameters given for {}", spec.name, params.size(), spec.num_params);
  if (flags.size() != spec.flags.size())
    fail("kernel '{}': {} flag slots given for {} flags", spec.name, flags.size(), spec.flags.size());
  const int64_t n = spec.num_elements();
  if (n == 0) return;
  for (size_t k = 0; k < operands; ++k)
    if (!data[k]) fail("kernel '{}': operand {} has no buffer", spec.name, k);

  const size_t rank = spec.shape.size();
  std::vector<int64_t> strides;
  strides.reserve(operands * rank);
  bool outputs_aligned = true;
  for (const codegen::OperandSpec& o : spec.inputs) strides.insert(strides.end(), o.strides.begin(), o.strides.end());
  for (size_t k = 0; k < spec.outputs.size(); ++k) {
    const codegen::OperandSpec& o = spec.outputs[k];
    strides.insert(strides.end(), o.strides.begin(), o.strides.end());
    outputs_aligned &= reinterpret_cast<uintptr_t>(data[spec.inputs.size() + k]) % kLaunchStreamingAlign == 0;
  }
  const codegen::KernelArgs args{
      .data = data.data(),
      .shape = spec.shape.data(),
      .strides = strides.data(),
      .params = params.data(),
      .flags = flags.data(),
      .streaming = kernel.streams && outputs_aligned ? 1 : 0,
  };
  const codegen::KernelFn fn = kernel.fn;
  if (spec.row) {
    const int64_t cols = spec.shape.back();
    const int64_t min_rows = (kLaunchMinElementsPerThread + cols - 1) / cols;
    pool.parallel_for(
        n / cols, [&](int64_t begin, int64_t end) { fn(begin, end, &args); }, min_rows, 1);
    return;
  }
  pool.parallel_for(
      n, [&](int64_t begin, int64_t end) { fn(begin, end, &args); }, kLaunchMinElementsPerThread, kLaunchChunkAlign);
}

}  // namespace ampfuse::runtime
