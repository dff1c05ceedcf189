// What the builders of runtime/onednn/ share: a builder turns a node and its operand types
// into a Prepared (its implementation's name and how to run it) or refuses it. onednn_ops.cpp
// holds the inference ops' builders, the cache and the bf16-as-f32 path; the training ops'
// builders live in onednn_training.cpp, the gradients of softmax and LayerNorm in
// onednn_norm_backward.cpp. Internal to runtime/onednn/.
#pragma once

#include "ir/graph.h"
#include "ir/ops/nn_params.h"
#include "runtime/tensor.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <fmt/format.h>

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace ampfuse::runtime::onednn_detail {

using dnnl::memory;
using Dims = memory::dims;
using ir::DType;
using ir::Node;
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

dnnl::engine& cpu_engine();

// What every stored primitive is made with: its scratchpad comes from the caller at each
// execute() (this thread's buffer). oneDNN's own ("library") scratchpad is made per thread
// with the primitive, so a primitive made on one thread crashed when run on another (a
// framework's worker thread, a Python thread).
const dnnl::primitive_attr& scratchpad_attr();

// The oneDNN type of an f32 or bf16 tensor; refuses any other.
memory::data_type dnnl_type(DType t);

Dims row_major_strides(const Dims& physical);

// Logical dims (N, C, spatial...) of a tensor stored channels-last (N, spatial..., C), with
// the strides that describe that storage; the dense tensor as it is when !channels_last.
memory::desc channels_desc(const ir::Shape& shape, DType t, bool channels_last);

memory::desc dense_desc(const ir::Shape& shape, DType t);

memory wrap(const memory::desc& d, const void* p);

// Runs `prim` on this thread's stream, with this thread's scratchpad, and waits for it.
void execute(const dnnl::primitive& prim, std::unordered_map<int, memory> args);

void require_inputs(const Node& n, Types in, size_t lo, size_t hi);

// A channel-blocked layout and its name ("nChw16c"). oneDNN 2.6 often has only a plain loop
// for channels-first data and JIT kernels for these; per-channel ops (pooling, batch
// normalization) give the same values in them, between two exact reorders.
struct ChannelBlocking {
  memory::desc layout;
  std::string name;
};
std::vector<ChannelBlocking> channel_blockings(const memory::desc& plain);

struct PoolWindow {
  dnnl::algorithm algorithm = dnnl::algorithm::pooling_max;
  Dims kernel, stride, pad_left, pad_right;
};

// oneDNN's window of an MXNet max or avg pooling (the forward's and its gradient's); refuses
// sum and lp pooling and include-pad averages whose divisor oneDNN cannot express.
PoolWindow pool_window(const ir::nn::PoolGeometry& geo);

// onednn_training.cpp: sum and mean, _BatchNorm_train, _backward_Pooling.
Prepared prepare_reduction(const Node& n, Types in, Types out);
Prepared prepare_batch_norm_train(const Node& n, Types in, Types out);
Prepared prepare_pooling_gradient(const Node& n, Types in, Types out);

// onednn_norm_backward.cpp: _backward_softmax, _backward_LayerNorm.
Prepared prepare_backward_softmax(const Node& n, Types in, Types out);
Prepared prepare_backward_layer_norm(const Node& n, Types in, Types out);

}  // namespace ampfuse::runtime::onednn_detail
