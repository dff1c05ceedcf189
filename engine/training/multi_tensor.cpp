#include "engine/training/multi_tensor.h"

#include "codegen/kernel_abi.h"
#include "ir/error.h"
#include "runtime/kernel_cache.h"
#include "runtime/thread_pool.h"

#include <algorithm>
#include <memory>

namespace ampfuse::engine {

namespace {

// One compiled (body, dtypes) combination.
struct Variant {
  int body;
  std::vector<ir::DType> dtypes;
  int64_t size = 0;  // elements of its groups together: its spec's size
  std::shared_ptr<const runtime::CompiledKernel> kernel;
};

// What one group's calls need: its KernelArgs and where it lies in the concatenation.
struct Piece {
  int64_t begin = 0;  // a multiple of runtime::kLaunchChunkAlign
  int64_t size = 0;
  codegen::KernelFn fn = nullptr;
  codegen::KernelArgs args{};
};

void check_group(std::span<const MultiTensorBody> bodies, const MultiTensorGroup& g, size_t i, size_t num_params,
                 size_t num_flags) {
  if (g.body < 0 || static_cast<size_t>(g.body) >= bodies.size())
    fail("multi-tensor launch: group {} names body {} of {}", i, g.body, bodies.size());
  const MultiTensorBody& b = bodies[g.body];
  const size_t operands = static_cast<size_t>(b.num_inputs + b.num_outputs);
  if (g.dtypes.size() != operands || g.data.size() != operands)
    fail("multi-tensor launch '{}': group {} has {} dtypes and {} buffers for {} inputs and {} outputs", b.name, i,
         g.dtypes.size(), g.data.size(), b.num_inputs, b.num_outputs);
  if (g.size < 0) fail("multi-tensor launch '{}': group {} has negative size {}", b.name, i, g.size);
  if (static_cast<size_t>(b.num_params) != num_params)
    fail("multi-tensor launch '{}': {} parameters given for {}", b.name, num_params, b.num_params);
  if (b.flags.size() != num_flags)
    fail("multi-tensor launch '{}': {} flag slots given for {} flags", b.name, num_flags, b.flags.size());
  if (g.size > 0)
    for (size_t k = 0; k < operands; ++k)
      if (!g.data[k]) fail("multi-tensor launch '{}': group {} operand {} has no buffer", b.name, i, k);
}

}  // namespace

codegen::KernelSpec multi_tensor_spec(const MultiTensorBody& body, std::span<const ir::DType> dtypes, int64_t size) {
  codegen::KernelSpec s;
  s.name = body.name;
  // At least 2 elements: an extent of 1 would make every operand a broadcast scalar and give
  // another cache key (and a compile) for nothing. The size decides only whether the
  // kernel has streaming loops (KernelSignature::streams).
  s.shape = {std::max<int64_t>(size, 2)};
  for (int k = 0; k < body.num_inputs + body.num_outputs; ++k) {
    codegen::OperandSpec o{(k < body.num_inputs ? "in" : "out") +
                               std::to_string(k < body.num_inputs ? k : k - body.num_inputs),
                           dtypes[k], {1}};
    (k < body.num_inputs ? s.inputs : s.outputs).push_back(std::move(o));
  }
  s.num_params = body.num_params;
  s.compute = ir::compute_type(dtypes);
  s.body = body.body;
  s.flags = body.flags;
  return s;
}

void run_multi_tensor(std::span<const MultiTensorBody> bodies, std::span<const MultiTensorGroup> groups,
                      std::span<const double> params, std::span<int32_t> flags, runtime::ThreadPool* pool,
                      runtime::KernelCache* cache) {
  for (size_t i = 0; i < groups.size(); ++i) check_group(bodies, groups[i], i, params.size(), flags.size());

  // Distinct (body, dtypes) combinations: a handful per launch, so a linear search.
  std::vector<Variant> variants;
  std::vector<int> variant_of(groups.size(), -1);
  for (size_t i = 0; i < groups.size(); ++i) {
    const MultiTensorGroup& g = groups[i];
    if (g.size == 0) continue;
    auto it = std::find_if(variants.begin(), variants.end(),
                           [&](const Variant& v) { return v.body == g.body && v.dtypes == g.dtypes; });
    if (it == variants.end()) it = variants.insert(variants.end(), Variant{g.body, g.dtypes, 0, nullptr});
    it->size += g.size;
    variant_of[i] = static_cast<int>(it - variants.begin());
  }
  if (variants.empty()) return;
  runtime::KernelCache& kc = cache ? *cache : runtime::KernelCache::global();
  for (Variant& v : variants) {
    const codegen::KernelSpec spec = multi_tensor_spec(bodies[v.body], v.dtypes, v.size);
    v.kernel = kc.get(spec);
  }

  // Flat contiguous kernels read neither shape nor strides (their signature has rank 0), but
  // the arguments stay well-formed: rank 1, unit strides.
  size_t max_operands = 0;
  for (const MultiTensorBody& b : bodies) max_operands = std::max(max_operands, static_cast<size_t>(b.num_inputs + b.num_outputs));
  const std::vector<int64_t> unit_strides(std::max<size_t>(max_operands, 1), 1);

  std::vector<Piece> pieces;
  pieces.reserve(groups.size());
  int64_t total = 0;
  for (size_t i = 0; i < groups.size(); ++i) {
    const MultiTensorGroup& g = groups[i];
    if (g.size == 0) continue;
    const MultiTensorBody& b = bodies[g.body];
    const Variant& v = variants[variant_of[i]];
    // Non-temporal stores where the variant's outputs together pass kLaunchStreamingBytes
    // (its spec's size is their sum, so its kernel has the streaming loop) and this group's
    // are 64-byte aligned.
    bool streaming = v.kernel->streams;
    for (int k = b.num_inputs; k < b.num_inputs + b.num_outputs; ++k)
      streaming &= reinterpret_cast<uintptr_t>(g.data[k]) % runtime::kLaunchStreamingAlign == 0;
    Piece p;
    p.begin = total;
    p.size = g.size;
    p.fn = v.kernel->fn;
    p.args = {.data = g.data.data(),
              .shape = &g.size,
              .strides = unit_strides.data(),
              .params = params.data(),
              .flags = flags.data(),
              .streaming = streaming ? 1 : 0};
    pieces.push_back(p);
    total += (g.size + runtime::kLaunchChunkAlign - 1) / runtime::kLaunchChunkAlign * runtime::kLaunchChunkAlign;
  }

  runtime::ThreadPool& tp = pool ? *pool : runtime::ThreadPool::global();
  tp.parallel_for(
      total,
      [&](int64_t begin, int64_t end) {
        // The first piece that ends after `begin` (the padding between pieces belongs to none).
        auto it = std::upper_bound(pieces.begin(), pieces.end(), begin,
                                   [](int64_t x, const Piece& p) { return x < p.begin + p.size; });
        for (; it != pieces.end() && it->begin < end; ++it) {
          const int64_t lo = std::max(begin, it->begin) - it->begin;
          const int64_t hi = std::min(end, it->begin + it->size) - it->begin;
          if (lo < hi) it->fn(lo, hi, &it->args);
        }
      },
      runtime::kLaunchMinElementsPerThread, runtime::kLaunchChunkAlign);
}

}  // namespace ampfuse::engine
