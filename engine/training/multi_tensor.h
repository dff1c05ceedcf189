// One generated elementwise kernel over a whole list of tensors: one thread-pool launch, one
// flag, any number of tensors of mixed dtypes.
//
// Why: an optimizer step or a loss scaler's unscale touches every parameter of a model, and a
// model has tens to hundreds of them, most of them small (cifar_resnet20: 63 tensors, 0.27M
// values; a BatchNorm's gamma has 16). Launching one kernel per tensor pays a thread wake-up
// and a barrier per tensor, which for small tensors costs more than the arithmetic. MXNet
// answers with multi_sgd_update / multi_all_finite: one operator call over up to 200 arrays,
// but of one dtype only, and with one host synchronization per chunk of 200. Here the whole
// list is one parallel_for over the concatenated elements: a thread's share may cover many
// small tensors or part of a large one, and each piece calls that tensor's compiled kernel
// with that tensor's arguments. The non-finite flags are shared by the whole list, so "did
// anything overflow" is one answer read once after the launch.
//
// The kernels are ordinary generated kernels (codegen/kernel_spec.h): one flat, contiguous
// KernelSpec per distinct (body, dtypes) combination, compiled through the KernelCache,
// whose key has no sizes: a list of 200 tensors of three dtypes compiles three kernels once,
// and a later call with other sizes or other buffers compiles nothing.
#pragma once

#include "codegen/kernel_spec.h"
#include "ir/dtype.h"
#include "ir/scalar_program.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ampfuse::runtime {
class KernelCache;
class ThreadPool;
}  // namespace ampfuse::runtime

namespace ampfuse::engine {

// The per-element math of a multi-tensor kernel, without dtypes or sizes. Like a KernelSpec:
// the body reads the inputs, then the parameters; results[k] is stored to output k; flags
// name operands 0..inputs-1 (inputs), then inputs..inputs+outputs-1 (outputs).
struct MultiTensorBody {
  std::string name;  // for dumps and errors
  int num_inputs = 0;
  int num_outputs = 0;
  int num_params = 0;
  ir::ScalarProgram body;
  std::vector<codegen::FlagSpec> flags;
};

// One tensor group (the operands of one parameter: weight, gradient, state...), dense and
// contiguous, every operand of `size` elements. Groups of one launch may use different
// bodies (say, with or without a low-precision copy) and different dtypes.
struct MultiTensorGroup {
  int body = 0;  // index into the launch's bodies
  int64_t size = 0;
  std::vector<ir::DType> dtypes;  // inputs, then outputs: f32, f16 or bf16 (anything a kernel takes)
  std::vector<void*> data;        // base pointers, same order (inputs are only read)
};

// Runs bodies[g.body] over every group g in ONE parallel_for over the concatenated element
// count. Each group starts on a multiple of 64 elements of the concatenation, so chunk
// boundaries fall on multiples of 64 elements within each tensor (cache lines and vector
// loops stay whole, as in run_kernel). `params` go to every group (every body must take
// params.size() of them); `flags` is one slot per flag entry, shared by every group (every
// body must have flags.size() entries), set to 1 when any group finds a non-finite value and
// never cleared: zero them first. An output may be the same buffer as an input of its group
// read at the same element (in place, as the executor's memory plan does); otherwise outputs
// must not overlap anything. Empty groups and an empty list run nothing. Throws
// ampfuse::Error naming the group and body for a mismatch, before running anything.
// `pool`/`cache` null: the global ones.
void run_multi_tensor(std::span<const MultiTensorBody> bodies, std::span<const MultiTensorGroup> groups,
                      std::span<const double> params, std::span<int32_t> flags, runtime::ThreadPool* pool = nullptr,
                      runtime::KernelCache* cache = nullptr);

// The KernelSpec run for the groups of one (body, dtypes), which have `size` elements
// together: flat, contiguous, compute type from the dtypes; with streaming loops when
// their outputs pass runtime::kLaunchStreamingBytes. Exposed for tests and dumps.
codegen::KernelSpec multi_tensor_spec(const MultiTensorBody& body, std::span<const ir::DType> dtypes, int64_t size);

}  // namespace ampfuse::engine
