// The external ops of a training step, beside the inference ones of onednn_ops.cpp: sum and
// mean (the bias and BatchNorm gradients' reductions), _BatchNorm_train's forward and
// _backward_Pooling. f32 and bf16 here; onednn_ops.cpp widens what has no native kernel.
#include "runtime/onednn/onednn_builders.h"

#include "ir/lowp.h"
#include "ir/ops/tensor_shapes.h"
#include "runtime/onednn/onednn_ops.h"
#include "runtime/thread_pool.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <memory>
#include <optional>
#include <string_view>
#include <type_traits>
#include <vector>

namespace ampfuse::runtime::onednn_detail {

namespace {

// Per-thread buffers for the copies in oneDNN's layouts that a step makes (blocked data, max
// pooling's workspace), kept between runs: a fresh multi-megabyte allocation per run is a
// fresh mapping, a page fault per 4 KiB (a [32,16,32,32] f32 BatchNorm took 3.7 ms so, 0.8
// ms with these). Separate from the bf16-as-f32 buffers, which hold this step's operands.
memory thread_buffer(size_t slot, const memory::desc& desc) {
  struct Buffer {
    std::unique_ptr<std::byte[]> data;
    size_t capacity = 0;
  };
  thread_local std::vector<Buffer> buffers;
  if (buffers.size() <= slot) buffers.resize(slot + 1);
  Buffer& b = buffers[slot];
  if (b.capacity < desc.get_size()) {
    b.data = std::make_unique_for_overwrite<std::byte[]>(desc.get_size());
    b.capacity = desc.get_size();
  }
  return wrap(desc, b.data.get());
}

// ---- sum and mean -------------------------------------------------------------------------
//
// oneDNN 2.6's reduction has JIT kernels only when the reduced dims are the innermost ones;
// per-channel sums over (N, H, W) of NCHW data, the column sums of bias gradients and
// anything channels-last get "ref:any", a scalar loop per output element. Those run on the
// loops below instead: vectorizable f32 accumulation over the input in memory order.
//
// The reference kernel (fold, runtime/reference/tensor_kernels.cpp) adds each output's
// elements one by one in row-major order into a double and rounds once. These loops (and
// oneDNN's) accumulate in f32, in several partial sums per output that are added at the
// end: the same terms in another order, each partial rounded to f32, so results differ from
// the reference by summation order and f32 partials only (a few ulp of the sum of the
// magnitudes). f64 data stays on the reference (onednn_ops.cpp refuses it).

float widened(float v) { return v; }
float widened(uint16_t bf16) { return ir::bf16_bits_to_f32(bf16); }

// 16 independent partial sums: the adds vectorize without reassociating any one of them.
template <class E>
[[gnu::always_inline]] inline float row_sum(const E* __restrict x, int64_t n) {
  constexpr int kLanes = 16;
  float partial[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) partial[j] += widened(x[i + j]);
  float tail = 0;
  for (; i < n; ++i) tail += widened(x[i]);
  for (int width = kLanes / 2; width > 0; width /= 2)
    for (int j = 0; j < width; ++j) partial[j] += partial[j + width];
  return partial[0] + tail;
}

template <class E>
[[gnu::always_inline]] inline void add_row(const E* __restrict x, float* __restrict acc, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] += widened(x[i]);
}

// The build targets baseline x86-64; these clones give the loops AVX2 where the CPU has it.
[[gnu::target_clones("avx2", "default")]] float row_sum_f32(const float* x, int64_t n) { return row_sum(x, n); }
[[gnu::target_clones("avx2", "default")]] float row_sum_bf16(const uint16_t* x, int64_t n) { return row_sum(x, n); }
[[gnu::target_clones("avx2", "default")]] void add_row_f32(const float* x, float* acc, int64_t n) { add_row(x, acc, n); }
[[gnu::target_clones("avx2", "default")]] void add_row_bf16(const uint16_t* x, float* acc, int64_t n) {
  add_row(x, acc, n);
}

// Adjacent dims that are all reduced or all kept, merged (extent-1 dims dropped), outermost
// first, with their strides in the input and, kept ones, in the output.
struct DimGroup {
  int64_t extent = 1;
  bool reduced = false;
  int64_t in_stride = 0, out_stride = 0;
};

std::vector<DimGroup> reduction_groups(const ir::Shape& shape, const std::vector<bool>& reduced) {
  std::vector<DimGroup> groups;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!groups.empty() && groups.back().reduced == reduced[d])
      groups.back().extent *= shape[d];
    else
      groups.push_back({.extent = shape[d], .reduced = reduced[d]});
  }
  if (groups.empty()) groups.push_back({});
  int64_t in_stride = 1, out_stride = 1;
  for (auto g = groups.rbegin(); g != groups.rend(); ++g) {
    g->in_stride = in_stride;
    in_stride *= g->extent;
    if (g->reduced) continue;
    g->out_stride = out_stride;
    out_stride *= g->extent;
  }
  return groups;
}

// Adds the input into `acc` (the output in f32, zeroed), with the kept group `split` (if
// any) limited to [lo, hi): threads given disjoint ranges of it write disjoint outputs.
template <class E>
void accumulate(const E* in, float* acc, const std::vector<DimGroup>& groups, size_t split, int64_t lo, int64_t hi,
                size_t level = 0) {
  const DimGroup& g = groups[level];
  const int64_t begin = level == split ? lo : 0, end = level == split ? hi : g.extent;
  if (level + 1 == groups.size()) {
    if constexpr (std::is_same_v<E, float>) {
      if (g.reduced) *acc += row_sum_f32(in, g.extent);
      else add_row_f32(in + begin, acc + begin, end - begin);
    } else {
      if (g.reduced) *acc += row_sum_bf16(in, g.extent);
      else add_row_bf16(in + begin, acc + begin, end - begin);
    }
    return;
  }
  for (int64_t i = begin; i < end; ++i)
    accumulate(in + i * g.in_stride, g.reduced ? acc : acc + i * g.out_stride, groups, split, lo, hi, level + 1);
}

Prepared vectorized_reduction(DType in_type, DType out_type, const ir::ReducePlan& plan, const ir::Shape& shape,
                              bool mean) {
  const std::vector<DimGroup> groups = reduction_groups(shape, plan.reduced);
  int64_t reduced_count = 1, out_elements = 1;
  size_t split = groups.size();  // the kept group with the most outputs, which threads divide
  for (size_t i = 0; i < groups.size(); ++i) {
    if (groups[i].reduced) {
      reduced_count *= groups[i].extent;
      continue;
    }
    out_elements *= groups[i].extent;
    if (split == groups.size() || groups[i].extent > groups[split].extent) split = i;
  }
  const int64_t split_extent = split == groups.size() ? 1 : groups[split].extent;
  const int64_t work_per_split = std::max<int64_t>(reduced_count * out_elements / split_extent, 1);
  // At least 2^20 elements a thread: these loops add about 20 a nanosecond here, and waking a
  // thread costs as much as the 50 us below that would save (more on a busy machine).
  const int64_t min_chunk = std::max<int64_t>(1, (int64_t{1} << 20) / work_per_split);
  const int64_t align = split + 1 == groups.size() ? 16 : 1;
  auto run = [=](InPtrs ins, OutPtrs outs, WeightSlot) {
    std::vector<float> staged;
    float* acc = static_cast<float*>(outs[0]);
    if (out_type != DType::f32) {
      staged.resize(static_cast<size_t>(out_elements));
      acc = staged.data();
    }
    std::fill_n(acc, out_elements, 0.0f);
    ThreadPool::global().parallel_for(
        split_extent,
        [&](int64_t lo, int64_t hi) {
          if (in_type == DType::f32)
            accumulate(static_cast<const float*>(ins[0]), acc, groups, split, lo, hi);
          else
            accumulate(static_cast<const uint16_t*>(ins[0]), acc, groups, split, lo, hi);
        },
        min_chunk, align);
    if (mean)
      for (int64_t o = 0; o < out_elements; ++o) acc[o] /= static_cast<float>(reduced_count);
    if (out_type != DType::f32) {
      auto* out = static_cast<uint16_t*>(outs[0]);
      for (int64_t o = 0; o < out_elements; ++o) out[o] = ir::f32_to_bf16_bits(acc[o]);
    }
  };
  return Prepared{mean ? "ampfuse:vectorized_mean" : "ampfuse:vectorized_sum", std::move(run)};
}

// oneDNN's reduction where it has a JIT kernel for it, else nullopt.
std::optional<Prepared> jit_reduction(const TensorType& x, const TensorType& y, const ir::ReducePlan& plan, bool mean) {
  // oneDNN rejects a reduction that reduces nothing (every reduced dim of extent 1).
  if (plan.kept == x.shape) return std::nullopt;
  const memory::desc src = dense_desc(x.shape, x.dtype), dst = dense_desc(plan.kept, y.dtype);
  try {
    const dnnl::reduction::primitive_desc pd(
        dnnl::reduction::desc(mean ? dnnl::algorithm::reduction_mean : dnnl::algorithm::reduction_sum, src, dst, 0, 0),
        scratchpad_attr(), cpu_engine());
    if (onednn_impl_is_slow(pd.impl_info_str())) return std::nullopt;
    const dnnl::reduction prim(pd);
    return Prepared{pd.impl_info_str(), [=](InPtrs ins, OutPtrs outs, WeightSlot) {
                      execute(prim, {{DNNL_ARG_SRC, wrap(src, ins[0])}, {DNNL_ARG_DST, wrap(dst, outs[0])}});
                    }};
  } catch (const dnnl::error& e) {
    if (e.status != dnnl_unimplemented) throw;
  }
  return std::nullopt;
}

}  // namespace

Prepared prepare_reduction(const Node& n, Types in, Types out) {
  require_inputs(n, in, 1, 1);
  for (const TensorType& t : {in[0], out[0]})
    if (t.dtype != DType::f32 && t.dtype != DType::bf16) refuse("{} operand {}", ir::dtype_name(t.dtype), ir::type_str(t));
  const bool mean = n.op == "mean";
  const ir::ReducePlan plan = ir::reduce_plan(in[0].shape, n.attrs);
  if (std::optional<Prepared> jit = jit_reduction(in[0], out[0], plan, mean)) return std::move(*jit);
  return vectorized_reduction(in[0].dtype, out[0].dtype, plan, in[0].shape, mean);
}

// ---- _BatchNorm_train ---------------------------------------------------------------------

namespace {

using BatchNormPd = dnnl::batch_normalization_forward::primitive_desc;

BatchNormPd batch_norm_pd(const memory::desc& md, float eps, dnnl::normalization_flags flags) {
  return BatchNormPd(dnnl::batch_normalization_forward::desc(dnnl::prop_kind::forward_training, md, eps, flags),
                     scratchpad_attr(), cpu_engine());
}

// oneDNN 2.6 normalizes channels-first data with a plain C++ loop ("ncsp_bnorm", 3x slower
// here than its JIT kernel for [32,16,32,32] f32, 7x for bf16, reorders included) and has
// JIT kernels for the channel-blocked layouts (nChw16c, nChw8c). Normalizing per channel
// there gives the same values (reorders copy exactly; padding channels are separate
// channels nothing reads back). nullopt when no blocking gets a JIT kernel either.
struct BlockedBatchNorm {
  ChannelBlocking blocking;
  BatchNormPd pd;
};

std::optional<BlockedBatchNorm> blocked_batch_norm(const memory::desc& md, float eps, dnnl::normalization_flags flags) {
  for (const ChannelBlocking& blocking : channel_blockings(md)) {
    try {
      BatchNormPd pd = batch_norm_pd(blocking.layout, eps, flags);
      if (std::string_view(pd.impl_info_str()).find("jit") != std::string_view::npos) return BlockedBatchNorm{blocking, pd};
    } catch (const dnnl::error&) {
    }
  }
  return std::nullopt;
}

}  // namespace

// oneDNN's training forward gives y and the batch mean and biased variance (its two-pass
// sum((x - mean)^2) / M, as MXNet's); the per-channel rest of the op (ir/ops/nn_norm_train.cpp)
// follows here in MXNet's order: invstd = 1 / sqrt(var + eps), the moving statistics from
// momentum and INVSTD_TO_VARIANCE. y is computed by oneDNN as (x - mean) * (gamma / sqrt(var
// + eps)) + beta: the reference's terms, rounded in another order.
Prepared prepare_batch_norm_train(const Node& n, Types in, Types out) {
  require_inputs(n, in, 5, 5);
  const TensorType& x = in[0];
  const size_t rank = x.shape.size();
  if (rank < 2 || rank > 5) refuse("data of rank {} (oneDNN normalizes ranks 2 to 5)", rank);
  const auto axis = static_cast<size_t>(ir::nn::normalize_axis(n.attrs.get_int("axis"), rank));
  const bool channels_last = rank > 2 && axis == rank - 1;
  if (axis != 1 && !channels_last) refuse("axis {} of rank-{} data is not a channel axis (1 or the last)", axis, rank);
  if (out[0].dtype != x.dtype) refuse("output dtype differs from the data");
  for (size_t i = 1; i < 5; ++i)
    if (in[i].dtype != DType::f32 || out[i].dtype != DType::f32)
      refuse("parameters and statistics in {}, oneDNN keeps them in f32", ir::dtype_name(in[i].dtype));
  const double eps = n.attrs.get_float("eps");
  // MXNet gives a constant channel invstd 0 when eps is 0; oneDNN would divide by zero.
  if (!(eps > 0)) refuse("eps {} is not positive", eps);
  const bool fix_gamma = n.attrs.get_bool("fix_gamma");
  const float momentum = static_cast<float>(n.attrs.get_float("momentum"));
  const int64_t channels = x.shape[axis];
  // 1-D data as 2-D (a trailing extent-1 dim): oneDNN has only "bnorm_ref" for 3-D tensors.
  ir::Shape shape = x.shape;
  if (rank == 3) shape.insert(shape.begin() + (channels_last ? 2 : 3), 1);
  const memory::desc md = channels_desc(shape, x.dtype, channels_last);
  const memory::desc per_channel({channels}, memory::data_type::f32, memory::format_tag::a);
  const auto flags = fix_gamma ? dnnl::normalization_flags::use_shift
                               : dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
  BatchNormPd pd = batch_norm_pd(md, static_cast<float>(eps), flags);
  memory::desc inner = md;  // the layout the primitive runs in
  std::string impl = pd.impl_info_str();
  std::optional<dnnl::reorder> to_inner, from_inner;
  if (!channels_last && impl.find("jit") == std::string::npos)
    if (std::optional<BlockedBatchNorm> blocked = blocked_batch_norm(md, static_cast<float>(eps), flags)) {
      inner = blocked->blocking.layout;
      pd = blocked->pd;
      impl = fmt::format("{} (via {})", pd.impl_info_str(), blocked->blocking.name);
      to_inner = dnnl::reorder(dnnl::reorder::primitive_desc(cpu_engine(), md, cpu_engine(), inner, scratchpad_attr()));
      from_inner = dnnl::reorder(dnnl::reorder::primitive_desc(cpu_engine(), inner, cpu_engine(), md, scratchpad_attr()));
    }
  const dnnl::batch_normalization_forward prim(pd);
  return Prepared{impl, [=](InPtrs ins, OutPtrs outs, WeightSlot) {
                    auto* mean = static_cast<float*>(outs[3]);
                    auto* invstd = static_cast<float*>(outs[4]);  // first the variance
                    memory src = wrap(md, ins[0]), dst = wrap(md, outs[0]);
                    if (to_inner) {
                      src = thread_buffer(0, inner), dst = thread_buffer(1, inner);
                      execute(*to_inner, {{DNNL_ARG_FROM, wrap(md, ins[0])}, {DNNL_ARG_TO, src}});
                    }
                    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src},
                                                         {DNNL_ARG_SHIFT, wrap(per_channel, ins[2])},
                                                         {DNNL_ARG_DST, dst},
                                                         {DNNL_ARG_MEAN, wrap(per_channel, mean)},
                                                         {DNNL_ARG_VARIANCE, wrap(per_channel, invstd)}};
                    if (!fix_gamma) args.emplace(DNNL_ARG_SCALE, wrap(per_channel, ins[1]));
                    execute(prim, std::move(args));
                    if (from_inner) execute(*from_inner, {{DNNL_ARG_FROM, dst}, {DNNL_ARG_TO, wrap(md, outs[0])}});
                    const auto* moving_mean = static_cast<const float*>(ins[3]);
                    const auto* moving_var = static_cast<const float*>(ins[4]);
                    auto* new_mean = static_cast<float*>(outs[1]);
                    auto* new_var = static_cast<float*>(outs[2]);
                    for (int64_t c = 0; c < channels; ++c) {
                      invstd[c] = 1.0f / std::sqrt(invstd[c] + static_cast<float>(eps));
                      const auto variance = static_cast<float>(1.0 / static_cast<double>(invstd[c] * invstd[c]) - eps);
                      new_mean[c] = moving_mean[c] * momentum + mean[c] * (1.0f - momentum);
                      new_var[c] = moving_var[c] * momentum + variance * (1.0f - momentum);
                    }
                  }};
}

// ---- _backward_Pooling --------------------------------------------------------------------

namespace {

// A pooling gradient's primitives for the data (src) and gradient (dst) in given layouts.
struct PoolingGradient {
  memory::desc src, dst;
  dnnl::pooling_forward::primitive_desc forward;
  dnnl::pooling_backward::primitive_desc backward;

  bool slow() const {
    return onednn_impl_is_slow(backward.impl_info_str()) ||
           (backward.workspace_desc().get_size() > 0 && onednn_impl_is_slow(forward.impl_info_str()));
  }
};

PoolingGradient pooling_gradient(const PoolWindow& w, const memory::desc& src, const memory::desc& dst) {
  dnnl::pooling_forward::primitive_desc forward(
      dnnl::pooling_forward::desc(dnnl::prop_kind::forward_training, w.algorithm, src, dst, w.stride, w.kernel,
                                  w.pad_left, w.pad_right),
      scratchpad_attr(), cpu_engine());
  dnnl::pooling_backward::primitive_desc backward(
      dnnl::pooling_backward::desc(w.algorithm, src, dst, w.stride, w.kernel, w.pad_left, w.pad_right), scratchpad_attr(), cpu_engine(),
      forward);
  return {src, dst, forward, backward};
}

}  // namespace

// oneDNN's pooling backward. max needs the forward's workspace (where each window's maximum
// is), so the step runs the forward training primitive on the data first. oneDNN keeps a
// window's first maximum in scan order, as MXNet (ties alike: tested); a window holding NaN
// differs (MXNet gives its gradient to the window's last element, oneDNN's max compares
// keep the first maximal number). Channels-first data whose gradient oneDNN has only a plain
// loop for ("simple_nchw", slower than the reference kernel for a 3x3 max) runs channel-
// blocked, between reorders.
Prepared prepare_pooling_gradient(const Node& n, Types in, Types out) {
  require_inputs(n, in, 2, 2);
  const TensorType& x = in[0];
  const TensorType& dy = in[1];
  if (dy.dtype != x.dtype || out[0].dtype != x.dtype) refuse("the data, gradient and result differ in dtype");
  const ir::nn::PoolGeometry geo = ir::nn::pool_geometry(n.attrs, x.shape);
  const PoolWindow w = pool_window(geo);
  const memory::desc src = channels_desc(x.shape, x.dtype, geo.channels_last);
  const memory::desc dst = channels_desc(dy.shape, dy.dtype, geo.channels_last);
  PoolingGradient p = pooling_gradient(w, src, dst);
  std::string via;
  if (!geo.channels_last && p.slow()) {
    const std::vector<ChannelBlocking> src_blockings = channel_blockings(src), dst_blockings = channel_blockings(dst);
    for (size_t b = 0; b < src_blockings.size() && via.empty(); ++b) {
      try {
        PoolingGradient blocked = pooling_gradient(w, src_blockings[b].layout, dst_blockings[b].layout);
        if (blocked.slow()) continue;
        p = blocked;
        via = fmt::format(" (via {})", src_blockings[b].name);
      } catch (const dnnl::error&) {
      }
    }
  }
  const bool max = w.algorithm == dnnl::algorithm::pooling_max;
  const bool reordered = !via.empty();
  const dnnl::pooling_forward forward(p.forward);
  const dnnl::pooling_backward backward(p.backward);
  std::optional<dnnl::reorder> data_in, gradient_in, gradient_out;
  if (reordered) {
    data_in = dnnl::reorder(dnnl::reorder::primitive_desc(cpu_engine(), src, cpu_engine(), p.src, scratchpad_attr()));
    gradient_in = dnnl::reorder(dnnl::reorder::primitive_desc(cpu_engine(), dst, cpu_engine(), p.dst, scratchpad_attr()));
    gradient_out = dnnl::reorder(dnnl::reorder::primitive_desc(cpu_engine(), p.src, cpu_engine(), src, scratchpad_attr()));
  }
  // The slower of the two names the step (run reports flag reference loops).
  const std::string impl =
      (max && onednn_impl_is_slow(p.forward.impl_info_str()) ? p.forward.impl_info_str() : p.backward.impl_info_str()) + via;
  const memory::desc workspace = p.forward.workspace_desc(), inner_src = p.src, inner_dst = p.dst;
  return Prepared{impl, [=](InPtrs ins, OutPtrs outs, WeightSlot) {
                    memory data = wrap(src, ins[0]), gradient = wrap(dst, ins[1]), result = wrap(src, outs[0]);
                    if (reordered) {
                      const memory blocked_gradient = thread_buffer(2, inner_dst);
                      execute(*gradient_in, {{DNNL_ARG_FROM, gradient}, {DNNL_ARG_TO, blocked_gradient}});
                      gradient = blocked_gradient;
                      result = thread_buffer(3, inner_src);
                      if (max) {
                        const memory blocked_data = thread_buffer(4, inner_src);
                        execute(*data_in, {{DNNL_ARG_FROM, data}, {DNNL_ARG_TO, blocked_data}});
                        data = blocked_data;
                      }
                    }
                    std::unordered_map<int, memory> args{{DNNL_ARG_DIFF_DST, gradient}, {DNNL_ARG_DIFF_SRC, result}};
                    if (max) {
                      const memory where = thread_buffer(1, workspace);
                      execute(forward, {{DNNL_ARG_SRC, data}, {DNNL_ARG_DST, thread_buffer(0, inner_dst)}, {DNNL_ARG_WORKSPACE, where}});
                      args.emplace(DNNL_ARG_WORKSPACE, where);
                    }
                    execute(backward, std::move(args));
                    if (reordered) execute(*gradient_out, {{DNNL_ARG_FROM, result}, {DNNL_ARG_TO, wrap(src, outs[0])}});
                  }};
}

}  // namespace ampfuse::runtime::onednn_detail
