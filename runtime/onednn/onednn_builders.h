// What a builder of a oneDNN-run op needs (private to runtime/onednn/): the builders turn a
// node with its operand types into a created primitive (Prepared) or refuse it.
// onednn_ops.cpp keeps the primitive cache, the low-precision-as-f32 path and `builder_for`,
// which maps op names to builders, including those defined in other files of this folder.
#pragma once

#include "ir/graph.h"
#include "runtime/tensor.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <fmt/format.h>

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>

namespace ampfuse::runtime::onednn_detail {

using dnnl::memory;
using Dims = memory::dims;
using Types = std::span<const TensorType>;

// A node oneDNN cannot run as asked: the caller uses the reference kernel. Thrown by the
// builders and turned into onednn_supports() == false with `why` kept.
struct Refusal {
  std::string why;
};

template <class... Args>
[[noreturn]] void refuse(fmt::format_string<Args...> format, Args&&... args) {
  throw Refusal{fmt::format(format, std::forward<Args>(args)...)};
}

dnnl::engine& cpu_engine();

// The oneDNN type of an f32 or bf16 tensor; refuses others. The builders see only those
// two: f16 reaches them widened to f32 (oneDNN 2.6 has no f16 CPU compute).
memory::data_type dnnl_type(ir::DType t);

// A row-major tensor of this shape and type.
memory::desc dense_desc(const ir::Shape& shape, ir::DType t);

using InPtrs = std::span<const void* const>;
using OutPtrs = std::span<void* const>;

// A type-erased dnnl::memory of reordered weights (OnednnWeightCache::reordered), or null.
using WeightSlot = std::shared_ptr<void>*;

// A created primitive with what running it needs.
struct Prepared {
  std::string impl;
  // Runs the primitive on the node's buffers (inputs, outputs in node order). `weights`,
  // when not null, holds (or receives) the weights in the primitive's layout.
  std::function<void(InPtrs, OutPtrs, WeightSlot weights)> run;
  bool widened = false;  // low-precision operands computed as f32 (through_f32)
};

// A oneDNN memory over a buffer the caller owns.
memory wrap(const memory::desc& d, const void* p);

// Runs `prim` on this thread's stream and waits for it.
void execute(const dnnl::primitive& prim, const std::unordered_map<int, memory>& args);

// Refuses unless `n` has lo..hi inputs.
void require_inputs(const ir::Node& n, Types in, size_t lo, size_t hi);

// Builders defined outside onednn_ops.cpp.
Prepared prepare_backward_softmax(const ir::Node& n, Types in, Types out);      // onednn_norm_backward.cpp
Prepared prepare_backward_layer_norm(const ir::Node& n, Types in, Types out);  // onednn_norm_backward.cpp

}  // namespace ampfuse::runtime::onednn_detail
