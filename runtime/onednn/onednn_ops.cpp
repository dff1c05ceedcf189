#include "runtime/onednn/onednn_ops.h"

#include "runtime/onednn/onednn_builders.h"

#include "ir/error.h"
#include "ir/lowp.h"
#include "ir/ops/index_shapes.h"
#include "runtime/fault_injection.h"
#include "runtime/team_policy.h"
#include "runtime/thread_pool.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <unordered_set>

namespace ampfuse::runtime {

namespace onednn_detail {

const char* status_name(dnnl_status_t s) {
  switch (s) {
    case dnnl_success: return "success";
    case dnnl_out_of_memory: return "out_of_memory";
    case dnnl_invalid_arguments: return "invalid_arguments";
    case dnnl_unimplemented: return "unimplemented";
    case dnnl_iterator_ends: return "iterator_ends";
    case dnnl_runtime_error: return "runtime_error";
    case dnnl_not_required: return "not_required";
    default: return "unknown status";
  }
}

dnnl::engine& cpu_engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// The oneDNN type of an f32 or bf16 tensor. The builders see only those two: f16 reaches
// them widened to f32 (oneDNN 2.6 has no f16 CPU compute).
memory::data_type dnnl_type(DType t) {
  switch (t) {
    case DType::f32: return memory::data_type::f32;
    case DType::bf16: return memory::data_type::bf16;
    default: refuse("oneDNN has no {} kernels here", ir::dtype_name(t));
  }
}

Dims row_major_strides(const Dims& physical) {
  Dims s(physical.size(), 1);
  for (int i = static_cast<int>(physical.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * physical[i + 1];
  return s;
}

// Logical dims (N, C, spatial...) of a tensor stored channels-last (N, spatial..., C), with
// the strides that describe that storage.
memory::desc channels_desc(const ir::Shape& shape, DType t, bool channels_last) {
  Dims physical(shape.begin(), shape.end());
  Dims strides = row_major_strides(physical);
  if (!channels_last) return memory::desc(physical, dnnl_type(t), strides);
  const size_t r = physical.size();
  Dims logical = {physical[0], physical[r - 1]};
  Dims lstrides = {strides[0], strides[r - 1]};
  for (size_t i = 1; i + 1 < r; ++i) logical.push_back(physical[i]), lstrides.push_back(strides[i]);
  return memory::desc(logical, dnnl_type(t), lstrides);
}

memory::desc dense_desc(const ir::Shape& shape, DType t) {
  Dims dims(shape.begin(), shape.end());
  return memory::desc(dims, dnnl_type(t), row_major_strides(dims));
}

memory wrap(const memory::desc& d, const void* p) { return memory(d, cpu_engine(), const_cast<void*>(p)); }

dnnl::stream& thread_stream() {
  thread_local dnnl::stream s(cpu_engine());
  return s;
}

const dnnl::primitive_attr& scratchpad_attr() {
  static const dnnl::primitive_attr attr = [] {
    dnnl::primitive_attr a;
    a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return a;
  }();
  return attr;
}

void execute(const dnnl::primitive& prim, std::unordered_map<int, memory> args) {
  // The scratchpad the primitive asks for (none for those made without scratchpad_attr()),
  // from a buffer of this thread's that grows to the largest request and stays.
  const dnnl::primitive_desc_base pd(const_cast<dnnl_primitive_desc_t>(prim.get_primitive_desc()), true);
  const memory::desc scratch = pd.scratchpad_desc();
  if (const size_t bytes = scratch.get_size(); bytes > 0) {
    struct Free {
      void operator()(std::byte* p) const { std::free(p); }
    };
    thread_local std::unique_ptr<std::byte, Free> buffer;
    thread_local size_t capacity = 0;
    if (capacity < bytes) {
      const size_t rounded = (bytes + 4095) / 4096 * 4096;
      buffer.reset(static_cast<std::byte*>(std::aligned_alloc(4096, rounded)));
      if (!buffer) fail("oneDNN scratchpad of {} bytes: out of memory", rounded);
      capacity = rounded;
    }
    args.emplace(DNNL_ARG_SCRATCHPAD, memory(scratch, cpu_engine(), buffer.get()));
  }
  prim.execute(thread_stream(), args);
  thread_stream().wait();
}

// The user's weights in the layout the primitive chose (a copy only when they differ).
memory maybe_reorder(memory user, const memory::desc& want) {
  if (user.get_desc() == want) return user;
  memory m(want, cpu_engine());
  dnnl::reorder(user, m).execute(thread_stream(), user, m);
  return m;
}

// oneDNN's window of an MXNet max or avg pooling: its algorithm and the right padding that
// yields exactly the output extent MXNet's convention asked for.
PoolWindow pool_window(const ir::nn::PoolGeometry& geo) {
  if (geo.type != ir::nn::PoolType::max && geo.type != ir::nn::PoolType::avg) refuse("oneDNN has no sum or lp pooling");
  const size_t nd = geo.kernel.size();
  PoolWindow w;
  w.kernel.assign(geo.kernel.begin(), geo.kernel.end());
  w.stride.assign(geo.stride.begin(), geo.stride.end());
  w.pad_left.assign(geo.pad.begin(), geo.pad.end());
  bool overhang = false;  // a window reaches past the padded input
  for (size_t i = 0; i < nd; ++i) {
    const int64_t right = (geo.out_size[i] - 1) * w.stride[i] + w.kernel[i] - geo.in_size[i] - w.pad_left[i];
    overhang |= right > geo.pad_end[i];
    w.pad_right.push_back(std::max<int64_t>(right, 0));
  }
  if (geo.type == ir::nn::PoolType::avg) {
    // MXNet's include-pad average divides by the window clipped to the padded input;
    // oneDNN divides by the whole kernel. They agree unless a window overhangs the pad.
    if (geo.count_include_pad && overhang) refuse("an include-pad average window reaches past the padding");
    w.algorithm = geo.count_include_pad ? dnnl::algorithm::pooling_avg_include_padding
                                        : dnnl::algorithm::pooling_avg_exclude_padding;
  }
  return w;
}

// The channel-blocked layouts oneDNN's JIT kernels use (channels in groups of 16 or 8,
// innermost: nChw16c, nChw8c and their 1-D and 3-D forms) for a tensor's dims, widest first;
// none unless it has 1 to 3 spatial dims.
std::vector<ChannelBlocking> channel_blockings(const memory::desc& plain) {
  using tag = memory::format_tag;
  if (plain.dims().size() < 3 || plain.dims().size() > 5) return {};
  const size_t spatial = plain.dims().size() - 2;
  const std::pair<int, std::array<tag, 3>> blockings[] = {{16, {tag::aBc16b, tag::aBcd16b, tag::aBcde16b}},
                                                          {8, {tag::aBc8b, tag::aBcd8b, tag::aBcde8b}}};
  const char* dims_name = spatial == 3 ? "dhw" : spatial == 2 ? "hw" : "w";
  std::vector<ChannelBlocking> r;
  for (const auto& [block, tags] : blockings)
    r.push_back({memory::desc(plain.dims(), plain.data_type(), tags[spatial - 1]), fmt::format("nC{}{}c", dims_name, block)});
  return r;
}

void require_inputs(const Node& n, Types in, size_t lo, size_t hi) {
  if (in.size() < lo || in.size() > hi) refuse("{} takes {} to {} inputs, got {}", n.op, lo, hi, in.size());
}

}  // namespace onednn_detail

namespace {

using namespace onednn_detail;

// ---- Epilogues (_fused_conv, _fused_fc) ---------------------------------------------------

// The post-ops of an op with an epilogue (ir/ops/nn_epilogue.cpp), applied to the f32
// accumulators before the one rounding to the output dtype: a sum (the residual, which the
// output buffer must hold when the primitive starts) and an eltwise relu, with LeakyReLU's
// slope as its alpha (x > 0 ? x : alpha * x, NaN kept) or, for relu, alpha 0 (then oneDNN
// computes a max with 0, which turns NaN into 0: ExecutorOptions::relu_post_ops). The memory plan
// writes the output over the residual where the residual dies there
// (engine/execution/memory_plan.h), so usually nothing is copied; otherwise wrap() copies it
// in first. A binary-add post-op would read the residual where it lies, but oneDNN 2.6's
// brgconv_1x1 kernels refuse it for a full-size operand (jit_1x1 runs it, slower:
// bench/README.md, "Epilogues as oneDNN post-ops").
struct Epilogue {
  dnnl::primitive_attr attr;  // the scratchpad mode and the post-ops
  std::optional<size_t> residual;  // the input the residual is

  // `inner` (the primitive's run), with the residual copied into the output first unless
  // it is the output's buffer already.
  Prepared wrap(Prepared inner, size_t output_bytes) const {
    if (!residual) return inner;
    return Prepared{std::move(inner.impl),
                    [run = std::move(inner.run), output_bytes, r = *residual](InPtrs ins, OutPtrs outs, WeightSlot w) {
                      if (ins[r] != outs[0]) std::memcpy(outs[0], ins[r], output_bytes);
                      run(ins, outs, w);
                    }};
  }
};

// The inputs are data, weight, bias (unless no_bias), residual (with with_residual).
Epilogue epilogue_of(const Node& n, Types in, Types out) {
  const bool has_bias = !n.attrs.get_bool("no_bias"), with_residual = n.attrs.get_bool("with_residual");
  const size_t count = 2 + (has_bias ? 1 : 0) + (with_residual ? 1 : 0);
  require_inputs(n, in, count, count);
  Epilogue e;
  e.attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // as scratchpad_attr(), whose handle is shared
  dnnl::post_ops ops;
  if (with_residual) {
    if (in[count - 1] != out[0]) refuse("the residual's type differs from the output's");
    ops.append_sum(1.0f);
    e.residual = count - 1;
  }
  const std::string act = n.attrs.get_string("act_type");
  if (act == "relu") {
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
  } else if (act == "leaky") {
    const float slope = static_cast<float>(n.attrs.get_float("slope"));
    if (!(slope != 0)) refuse("slope {} (oneDNN's relu of slope 0 turns NaN into 0)", slope);
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, slope, 0.0f);
  } else if (act != "none") {
    refuse("act_type '{}' has no oneDNN post-op here", act);
  }
  e.attr.set_post_ops(ops);
  return e;
}

// ---- Convolution ------------------------------------------------------------------------

// MXNet's weight as oneDNN's logical weight dims with the strides of its storage.
// Convolution's (O, I/g, k...) is oneDNN's ({g,} O/g, I/g, k...); Deconvolution's
// (I, O/g, k...) is oneDNN's ({g,} O/g, I/g, k...) with the first two axes swapped. Both are
// stored (first, k..., second) channels-last.
memory::desc mxnet_weight_desc(const ir::nn::ConvGeometry& geo, const TensorType& weight) {
  const bool cl = geo.channels_last;
  const int64_t groups = geo.groups;
  Dims phys(weight.shape.begin(), weight.shape.end());
  Dims str = row_major_strides(phys);
  const int64_t d0 = phys[0], d1 = cl ? phys.back() : phys[1];
  const int64_t s0 = str[0], s1 = cl ? str.back() : str[1];
  // (out per group, in per group) with their strides.
  const Dims per_group = geo.deconv ? Dims{d1, d0 / groups} : Dims{d0 / groups, d1};
  const Dims per_group_strides = geo.deconv ? Dims{s1, s0} : Dims{s0, s1};
  Dims dims = groups > 1 ? Dims{groups} : Dims{}, strides = groups > 1 ? Dims{s0 * (d0 / groups)} : Dims{};
  dims.insert(dims.end(), per_group.begin(), per_group.end());
  strides.insert(strides.end(), per_group_strides.begin(), per_group_strides.end());
  for (size_t i = 0; i < geo.spatial(); ++i) {
    dims.push_back(phys[(cl ? 1 : 2) + i]);
    strides.push_back(str[(cl ? 1 : 2) + i]);
  }
  return memory::desc(dims, dnnl_type(weight.dtype), strides);
}

memory::desc any_layout(const memory::desc& d) { return memory::desc(d.dims(), d.data_type(), memory::format_tag::any); }

struct ConvWindow {
  Dims strides, dilates, pad_left, pad_right;
  bool negative_padding = false;  // some pad_right < 0
};

// oneDNN's window of an MXNet (de)convolution: MXNet pads both sides alike. A
// Deconvolution's `adj` extends its output on the right, which oneDNN's deconvolution
// expresses as less right padding (`with_adj`); the convolution it is the data gradient of
// pads both sides alike, the rounding down of its output extent dropping the rest.
ConvWindow conv_window(const ir::nn::ConvGeometry& geo, bool with_adj) {
  ConvWindow w;
  w.strides.assign(geo.stride.begin(), geo.stride.end());
  for (int64_t d : geo.dilate) w.dilates.push_back(d - 1);  // oneDNN counts the gaps
  w.pad_left.assign(geo.pad.begin(), geo.pad.end());
  for (size_t i = 0; i < geo.spatial(); ++i) {
    w.pad_right.push_back(geo.pad[i] - (with_adj ? geo.adj[i] : 0));
    w.negative_padding |= w.pad_right.back() < 0;
  }
  return w;
}

// Runs a (de)convolution primitive whose weights are input 1, kept reordered in `cached`
// when the caller has a cache for them.
// `src_arg` and `dst_arg` name input 0 and the output to the primitive (DIFF_DST and
// DIFF_SRC for a backward-data convolution).
template <class Prim>
std::function<void(InPtrs, OutPtrs, WeightSlot)> run_with_weights(Prim prim, memory::desc src, memory::desc wuser,
                                                                   memory::desc wwant, memory::desc bias,
                                                                   memory::desc dst, bool has_bias,
                                                                   int src_arg = DNNL_ARG_SRC,
                                                                   int dst_arg = DNNL_ARG_DST) {
  return [=](InPtrs ins, OutPtrs outs, WeightSlot cached) {
    memory w;
    if (cached && *cached) {
      w = *static_cast<const memory*>(cached->get());
    } else {
      w = maybe_reorder(wrap(wuser, ins[1]), wwant);
      if (cached) *cached = std::make_shared<memory>(w);
    }
    std::unordered_map<int, memory> args{
        {src_arg, wrap(src, ins[0])}, {DNNL_ARG_WEIGHTS, w}, {dst_arg, wrap(dst, outs[0])}};
    if (has_bias) args.emplace(DNNL_ARG_BIAS, wrap(bias, ins[2]));
    execute(prim, std::move(args));
  };
}

// Convolution and Deconvolution (the data gradient of a convolution); _fused_conv
// (ir/ops/nn_epilogue.cpp) with its epilogue as post-ops.
Prepared prepare_convolution(const Node& n, Types in, Types out, bool deconv) {
  std::optional<Epilogue> epilogue;
  if (n.op == "_fused_conv") epilogue = epilogue_of(n, in, out);
  else require_inputs(n, in, 2, 3);
  const TensorType& x = in[0];
  if (in[1].dtype != x.dtype) refuse("weight {} differs from data {}", ir::dtype_name(in[1].dtype), ir::dtype_name(x.dtype));
  const ir::nn::ConvGeometry geo = ir::nn::conv_geometry(n.attrs, x.shape, deconv);
  const bool has_bias = epilogue ? !n.attrs.get_bool("no_bias") : in.size() > 2;
  memory::desc src = channels_desc(x.shape, x.dtype, geo.channels_last);
  memory::desc dst = channels_desc(out[0].shape, out[0].dtype, geo.channels_last);
  const memory::desc wuser = mxnet_weight_desc(geo, in[1]);
  // MXNet's bias has the weight's dtype (bf16 after AMP); a wider f32 bias is allowed too.
  memory::desc bias_desc;
  if (has_bias) bias_desc = memory::desc({geo.out_channels}, dnnl_type(in[2].dtype), memory::format_tag::a);
  const ConvWindow w = conv_window(geo, deconv);
  if (deconv && w.negative_padding) {
    // adj beyond pad: the deconvolution as the backward-data convolution it transposes
    // (x its output gradient, y its input gradient), which pads both sides alike.
    if (has_bias) refuse("adj exceeds pad and there is a bias (oneDNN's backward-data convolution has none)");
    ir::nn::ConvGeometry as_conv = geo;
    as_conv.deconv = false;
    const memory::desc conv_weights = mxnet_weight_desc(as_conv, in[1]);
    const ConvWindow cw = conv_window(geo, false);
    dnnl::convolution_forward::desc fd(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, dst,
                                       any_layout(conv_weights), src, cw.strides, cw.dilates, cw.pad_left,
                                       cw.pad_right);
    dnnl::convolution_forward::primitive_desc fpd(fd, scratchpad_attr(), cpu_engine());
    dnnl::convolution_backward_data::desc bd(dnnl::algorithm::convolution_direct, dst, any_layout(conv_weights), src,
                                             cw.strides, cw.dilates, cw.pad_left, cw.pad_right);
    dnnl::convolution_backward_data::primitive_desc pd(bd, scratchpad_attr(), cpu_engine(), fpd);
    return Prepared{pd.impl_info_str(),
                    run_with_weights(dnnl::convolution_backward_data(pd), src, conv_weights, pd.weights_desc(), {},
                                     dst, false, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_SRC)};
  }
  if (deconv) {
    dnnl::deconvolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct, src,
                                        any_layout(wuser), bias_desc, dst, w.strides, w.dilates, w.pad_left,
                                        w.pad_right);
    dnnl::deconvolution_forward::primitive_desc pd(d, scratchpad_attr(), cpu_engine());
    return Prepared{pd.impl_info_str(), run_with_weights(dnnl::deconvolution_forward(pd), src, wuser,
                                                         pd.weights_desc(), bias_desc, dst, has_bias)};
  }
  dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src,
                                    any_layout(wuser), bias_desc, dst, w.strides, w.dilates, w.pad_left, w.pad_right);
  dnnl::convolution_forward::primitive_desc pd(d, epilogue ? epilogue->attr : scratchpad_attr(), cpu_engine());
  Prepared p{pd.impl_info_str(), run_with_weights(dnnl::convolution_forward(pd), src, wuser, pd.weights_desc(),
                                                  bias_desc, dst, has_bias)};
  return epilogue ? epilogue->wrap(std::move(p), dst.get_size()) : p;
}

// _backward_Convolution_weight(data, out_grad): oneDNN's backward-weights convolution,
// written in its chosen layout and reordered into MXNet's.
Prepared prepare_convolution_weight_gradient(const Node& n, Types in, Types out) {
  require_inputs(n, in, 2, 2);
  const TensorType& x = in[0];
  if (in[1].dtype != x.dtype) refuse("out_grad {} differs from data {}", ir::dtype_name(in[1].dtype), ir::dtype_name(x.dtype));
  const ir::nn::ConvGeometry geo = ir::nn::conv_geometry(n.attrs, x.shape, false);
  const memory::desc src = channels_desc(x.shape, x.dtype, geo.channels_last);
  const memory::desc diff_dst = channels_desc(in[1].shape, in[1].dtype, geo.channels_last);
  const memory::desc wuser = mxnet_weight_desc(geo, out[0]);
  const ConvWindow w = conv_window(geo, false);
  // The backward primitive takes the forward one it belongs to as a hint.
  dnnl::convolution_forward::desc fd(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, src,
                                     any_layout(wuser), diff_dst, w.strides, w.dilates, w.pad_left, w.pad_right);
  dnnl::convolution_forward::primitive_desc fpd(fd, scratchpad_attr(), cpu_engine());
  dnnl::convolution_backward_weights::desc bd(dnnl::algorithm::convolution_direct, src, any_layout(wuser), diff_dst,
                                              w.strides, w.dilates, w.pad_left, w.pad_right);
  dnnl::convolution_backward_weights::primitive_desc pd(bd, scratchpad_attr(), cpu_engine(), fpd);
  // oneDNN 2.6's AVX2 1x1 kernel writes past its workspace (heap corruption) for strided
  // channels-last data with input channels per group not a multiple of its block of 8
  // (oneDNN issue #6035): the next implementation runs those.
  const bool strided = std::any_of(w.strides.begin(), w.strides.end(), [](int64_t s) { return s > 1; });
  if (geo.channels_last && strided && (geo.in_channels / geo.groups) % 8 != 0 &&
      std::string_view(pd.impl_info_str()) == "jit_1x1:avx2" && !pd.next_impl())
    refuse("oneDNN's only weight gradient here is its AVX2 1x1 kernel, which writes out of bounds for this shape");
  const dnnl::convolution_backward_weights prim(pd);
  const memory::desc wgot = pd.diff_weights_desc();
  return Prepared{pd.impl_info_str(), [=](InPtrs ins, OutPtrs outs, WeightSlot) {
                    const memory user = wrap(wuser, outs[0]);
                    const memory got = wgot == wuser ? user : memory(wgot, cpu_engine());
                    execute(prim, {{DNNL_ARG_SRC, wrap(src, ins[0])},
                                   {DNNL_ARG_DIFF_DST, wrap(diff_dst, ins[1])},
                                   {DNNL_ARG_DIFF_WEIGHTS, got}});
                    if (wgot != wuser) execute(dnnl::reorder(got, user), {{DNNL_ARG_FROM, got}, {DNNL_ARG_TO, user}});
                  }};
}

// ---- Matrix products ----------------------------------------------------------------------

// C[b] (m, n) = A[b] (m, k) x B[b] (k, n) (+ bias over n). A is stored (k, m) when
// `ta`, B (n, k) when `tb`: strides describe the transposes, so they cost nothing.
Prepared prepare_matmul(const Node& n, Types in, Types out, int64_t batch, int64_t m, int64_t k, int64_t nn, bool ta,
                        bool tb, bool has_bias, const Epilogue* epilogue = nullptr) {
  if (in[0].dtype != in[1].dtype) refuse("operands differ in dtype ({} and {})", ir::dtype_name(in[0].dtype), ir::dtype_name(in[1].dtype));
  if (batch * m * k != ir::num_elements(in[0].shape) || batch * k * nn != ir::num_elements(in[1].shape) ||
      batch * m * nn != ir::num_elements(out[0].shape))
    refuse("operand shapes {} and {} do not form a ({}x{}) x ({}x{}) product", ir::shape_str(in[0].shape),
           ir::shape_str(in[1].shape), m, k, k, nn);
  const Dims as = ta ? Dims{m * k, 1, m} : Dims{m * k, k, 1};
  const Dims bs = tb ? Dims{k * nn, 1, k} : Dims{k * nn, nn, 1};
  memory::desc a({batch, m, k}, dnnl_type(in[0].dtype), as);
  memory::desc b({batch, k, nn}, dnnl_type(in[1].dtype), bs);
  memory::desc c({batch, m, nn}, dnnl_type(out[0].dtype), memory::format_tag::abc);
  memory::desc bias;
  if (has_bias) bias = memory::desc({1, 1, nn}, dnnl_type(in[2].dtype), memory::format_tag::abc);
  dnnl::matmul::desc d(a, b, bias, c);
  dnnl::matmul::primitive_desc pd(d, epilogue ? epilogue->attr : scratchpad_attr(), cpu_engine());
  dnnl::matmul prim(pd);
  Prepared p{pd.impl_info_str(), [=](InPtrs ins, OutPtrs outs, WeightSlot) {
               std::unordered_map<int, memory> args{{DNNL_ARG_SRC, wrap(a, ins[0])},
                                                    {DNNL_ARG_WEIGHTS, wrap(b, ins[1])},
                                                    {DNNL_ARG_DST, wrap(c, outs[0])}};
               if (has_bias) args.emplace(DNNL_ARG_BIAS, wrap(bias, ins[2]));
               execute(prim, std::move(args));
             }};
  return epilogue ? epilogue->wrap(std::move(p), c.get_size()) : p;
}

int64_t extent(const ir::Shape& s, size_t from, size_t to) {
  int64_t e = 1;
  for (size_t i = from; i < to; ++i) e *= s[i];
  return e;
}

// y (rows, hidden) = x (rows, features) * weight (hidden, features)^T + bias; _fused_fc
// (ir/ops/nn_epilogue.cpp) with its epilogue as post-ops.
Prepared prepare_fully_connected(const Node& n, Types in, Types out) {
  std::optional<Epilogue> epilogue;
  if (n.op == "_fused_fc") epilogue = epilogue_of(n, in, out);
  else require_inputs(n, in, 2, 3);
  const ir::Shape& x = in[0].shape;
  if (in[1].shape.size() != 2) refuse("weight shape {} is not (num_hidden, features)", ir::shape_str(in[1].shape));
  const int64_t hidden = in[1].shape[0], features = in[1].shape[1];
  const int64_t rows = n.attrs.get_bool("flatten") ? x[0] : extent(x, 0, x.size() - 1);
  return prepare_matmul(n, in, out, 1, rows, features, hidden, false, true, !n.attrs.get_bool("no_bias"),
                        epilogue ? &*epilogue : nullptr);
}

// MXNet's dot as one matrix product (the reference kernel's reading of N-D operands).
Prepared prepare_dot(const Node& n, Types in, Types out) {
  require_inputs(n, in, 2, 2);
  const bool ta = n.attrs.get_bool("transpose_a"), tb = n.attrs.get_bool("transpose_b");
  const ir::Shape& l = in[0].shape;
  const ir::Shape& r = in[1].shape;
  if (l.empty() || r.empty()) refuse("scalar operands");
  const int64_t k = ta ? l.front() : l.back();
  const int64_t m = ta ? extent(l, 1, l.size()) : extent(l, 0, l.size() - 1);
  const int64_t nn = tb ? extent(r, 0, r.size() - 1) : extent(r, 1, r.size());
  return prepare_matmul(n, in, out, 1, m, k, nn, ta, tb, false);
}

// One matrix product per batch entry of (..., M, K) x (..., K, N).
Prepared prepare_batch_dot(const Node& n, Types in, Types out) {
  require_inputs(n, in, 2, 2);
  const ir::Shape& l = in[0].shape;
  const ir::Shape& o = out[0].shape;
  if (l.size() < 3 || l.size() != in[1].shape.size() || o.size() != l.size()) refuse("operands of rank {} and {}", l.size(), in[1].shape.size());
  const bool ta = n.attrs.get_bool("transpose_a"), tb = n.attrs.get_bool("transpose_b");
  const size_t rank = l.size();
  const int64_t m = o[rank - 2], nn = o[rank - 1], k = ta ? l[rank - 2] : l[rank - 1];
  return prepare_matmul(n, in, out, extent(l, 0, rank - 2), m, k, nn, ta, tb, false);
}

// ---- Pooling ------------------------------------------------------------------------------

// oneDNN 2.6 pools channels-first (NCHW) data with a plain loop ("simple_nchw:any", ~20x
// slower than its JIT kernels here) but has JIT kernels for the channel-blocked layout
// (nChw8c: channels in groups of 8, innermost). Pooling is per channel, so reordering the
// data into blocks, pooling and reordering back gives the same values (reorders are exact
// copies; the padding channels are zeros nothing reads back). nullopt when no block size
// gets a JIT kernel either. `pool_desc(src, dst)` describes the pooling for given layouts.
template <class PoolDesc>
std::optional<Prepared> pool_channel_blocked(const PoolDesc& pool_desc, const memory::desc& src, const memory::desc& dst) {
  const std::vector<ChannelBlocking> src_blockings = channel_blockings(src), dst_blockings = channel_blockings(dst);
  for (size_t b = 0; b < src_blockings.size(); ++b) {
    const memory::desc& bsrc = src_blockings[b].layout;
    const memory::desc& bdst = dst_blockings[b].layout;
    dnnl::pooling_forward::primitive_desc pd;
    try {
      pd = dnnl::pooling_forward::primitive_desc(pool_desc(bsrc, bdst), scratchpad_attr(), cpu_engine());
    } catch (const dnnl::error&) {
      continue;
    }
    if (onednn_impl_is_slow(pd.impl_info_str())) continue;
    const dnnl::pooling_forward prim(pd);
    const dnnl::reorder to_blocks(dnnl::reorder::primitive_desc(cpu_engine(), src, cpu_engine(), bsrc, scratchpad_attr()));
    const dnnl::reorder from_blocks(dnnl::reorder::primitive_desc(cpu_engine(), bdst, cpu_engine(), dst, scratchpad_attr()));
    const std::string impl = fmt::format("{} (via {})", pd.impl_info_str(), src_blockings[b].name);
    return Prepared{impl, [=](InPtrs ins, OutPtrs outs, WeightSlot) {
                      // Per call: a Prepared is shared by every thread that runs the node.
                      // (A thread-local scratch measured no faster: 0.55 ms either way for
                      // 1x64x112x112.)
                      const memory blocked_src(bsrc, cpu_engine()), blocked_dst(bdst, cpu_engine());
                      execute(to_blocks, {{DNNL_ARG_FROM, wrap(src, ins[0])}, {DNNL_ARG_TO, blocked_src}});
                      execute(prim, {{DNNL_ARG_SRC, blocked_src}, {DNNL_ARG_DST, blocked_dst}});
                      execute(from_blocks, {{DNNL_ARG_FROM, blocked_dst}, {DNNL_ARG_TO, wrap(dst, outs[0])}});
                    }};
  }
  return std::nullopt;
}

Prepared prepare_pooling(const Node& n, Types in, Types out) {
  require_inputs(n, in, 1, 1);
  const TensorType& x = in[0];
  if (x.dtype != out[0].dtype) refuse("output dtype differs from the data");
  const ir::nn::PoolGeometry geo = ir::nn::pool_geometry(n.attrs, x.shape);
  const PoolWindow w = pool_window(geo);
  const memory::desc src = channels_desc(x.shape, x.dtype, geo.channels_last);
  const memory::desc dst = channels_desc(out[0].shape, out[0].dtype, geo.channels_last);
  const auto pool_desc = [&](const memory::desc& s, const memory::desc& d) {
    return dnnl::pooling_forward::desc(dnnl::prop_kind::forward_inference, w.algorithm, s, d, w.stride, w.kernel,
                                       w.pad_left, w.pad_right);
  };
  dnnl::pooling_forward::primitive_desc pd(pool_desc(src, dst), scratchpad_attr(), cpu_engine());
  if (!geo.channels_last && onednn_impl_is_slow(pd.impl_info_str()))
    if (std::optional<Prepared> blocked = pool_channel_blocked(pool_desc, src, dst)) return std::move(*blocked);
  dnnl::pooling_forward prim(pd);
  return Prepared{pd.impl_info_str(), [=](InPtrs ins, OutPtrs outs, WeightSlot) {
                    execute(prim, {{DNNL_ARG_SRC, wrap(src, ins[0])}, {DNNL_ARG_DST, wrap(dst, outs[0])}});
                  }};
}

// ---- Softmax and LayerNorm ----------------------------------------------------------------

Prepared prepare_softmax(const Node& n, Types in, Types out) {
  require_inputs(n, in, 1, 1);
  const TensorType& x = in[0];
  if (x.dtype != out[0].dtype) refuse("output dtype differs from the data");
  if (x.shape.empty()) refuse("scalar data");
  if (!n.attrs.is_none("temperature") && n.attrs.get_float("temperature") != 1.0) refuse("oneDNN has no temperature");
  const int axis = static_cast<int>(ir::nn::normalize_axis(n.attrs.get_int("axis"), x.shape.size()));
  memory::desc md = dense_desc(x.shape, x.dtype);
  dnnl::softmax_forward::desc d(dnnl::prop_kind::forward_inference, md, axis);
  dnnl::softmax_forward::primitive_desc pd(d, scratchpad_attr(), cpu_engine());
  dnnl::softmax_forward prim(pd);
  return Prepared{pd.impl_info_str(), [=](InPtrs ins, OutPtrs outs, WeightSlot) {
                    execute(prim, {{DNNL_ARG_SRC, wrap(md, ins[0])}, {DNNL_ARG_DST, wrap(md, outs[0])}});
                  }};
}

Prepared prepare_layer_norm(const Node& n, Types in, Types outs) {
  require_inputs(n, in, 3, 3);
  const TensorType& x = in[0];
  if (outs.size() != 1) refuse("output_mean_var (MXNet's std output has no oneDNN counterpart)");
  if (x.dtype != outs[0].dtype) refuse("output dtype differs from the data");
  if (x.shape.size() < 2) refuse("data of rank {}", x.shape.size());
  if (ir::nn::normalize_axis(n.attrs.get_int("axis"), x.shape.size()) != static_cast<int64_t>(x.shape.size()) - 1)
    refuse("oneDNN normalizes over the last axis only");
  // oneDNN 2.6 takes scale and shift in f32 whatever the data type.
  if (in[1].dtype != DType::f32 || in[2].dtype != DType::f32) refuse("gamma and beta are not f32");
  memory::desc md = dense_desc(x.shape, x.dtype);
  memory::desc ss({x.shape.back()}, memory::data_type::f32, memory::format_tag::a);
  const float eps = static_cast<float>(n.attrs.get_float("eps"));
  dnnl::layer_normalization_forward::desc d(dnnl::prop_kind::forward_inference, md, eps,
                                            dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift);
  dnnl::layer_normalization_forward::primitive_desc pd(d, scratchpad_attr(), cpu_engine());
  dnnl::layer_normalization_forward prim(pd);
  return Prepared{pd.impl_info_str(), [=](InPtrs ins, OutPtrs o, WeightSlot) {
                    execute(prim, {{DNNL_ARG_SRC, wrap(md, ins[0])},
                                   {DNNL_ARG_SCALE, wrap(ss, ins[1])},
                                   {DNNL_ARG_SHIFT, wrap(ss, ins[2])},
                                   {DNNL_ARG_DST, wrap(md, o[0])}});
                  }};
}

using Builder = Prepared (*)(const Node&, Types, Types);

Builder builder_for(const std::string& op) {
  if (op == "Convolution")
    return [](const Node& n, Types in, Types out) { return prepare_convolution(n, in, out, false); };
  if (op == "Deconvolution")
    return [](const Node& n, Types in, Types out) { return prepare_convolution(n, in, out, true); };
  if (op == "_fused_conv")
    return [](const Node& n, Types in, Types out) { return prepare_convolution(n, in, out, false); };
  // Bilinear UpSampling is a depthwise Deconvolution (ir/ops/index_shapes.h); nearest runs on
  // its reference kernel.
  if (op == "UpSampling")
    return [](const Node& n, Types in, Types out) {
      if (!ir::is_bilinear_upsampling(n.attrs)) refuse("oneDNN runs bilinear UpSampling only");
      Node deconv = n;
      deconv.op = "Deconvolution";
      deconv.attrs = ir::bilinear_upsampling_deconv_attrs(n.attrs, in[0].shape.at(1));
      return prepare_convolution(deconv, in, out, true);
    };
  if (op == "_backward_Convolution_weight") return prepare_convolution_weight_gradient;
  if (op == "FullyConnected" || op == "_fused_fc") return prepare_fully_connected;
  if (op == "batch_dot") return prepare_batch_dot;
  if (op == "dot") return prepare_dot;
  if (op == "Pooling") return prepare_pooling;
  if (op == "softmax") return prepare_softmax;
  if (op == "LayerNorm") return prepare_layer_norm;
  if (op == "sum" || op == "mean") return prepare_reduction;
  if (op == "_BatchNorm_train") return prepare_batch_norm_train;
  if (op == "_backward_Pooling") return prepare_pooling_gradient;
  if (op == "_backward_softmax") return prepare_backward_softmax;
  if (op == "_backward_LayerNorm") return prepare_backward_layer_norm;
  return nullptr;
}

// ---- Low precision as f32 compute ---------------------------------------------------------

// Per-thread f32 buffers for widened operands, kept between runs (a fresh mapping per
// run costs a page fault per 4 KiB).
float* scratch(size_t slot, size_t elements) {
  struct Buffer {
    std::unique_ptr<float[]> data;
    size_t capacity = 0;
  };
  thread_local std::vector<Buffer> buffers;
  if (buffers.size() <= slot) buffers.resize(slot + 1);
  Buffer& b = buffers[slot];
  if (b.capacity < elements) {
    b.data = std::make_unique_for_overwrite<float[]>(elements);
    b.capacity = elements;
  }
  return b.data.get();
}

void widen(DType t, const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint16_t*>(src);
  ThreadPool::global().parallel_for(
      n,
      [&](int64_t lo, int64_t hi) {
        if (t == DType::bf16)
          for (int64_t i = lo; i < hi; ++i) dst[i] = ir::bf16_bits_to_f32(s[i]);
        else
          for (int64_t i = lo; i < hi; ++i) dst[i] = ir::f16_bits_to_f32(s[i]);
      },
      1 << 15, 64);
}

void narrow(DType t, const float* src, void* dst, int64_t n) {
  auto* d = static_cast<uint16_t*>(dst);
  ThreadPool::global().parallel_for(
      n,
      [&](int64_t lo, int64_t hi) {
        if (t == DType::bf16)
          for (int64_t i = lo; i < hi; ++i) d[i] = ir::f32_to_bf16_bits(src[i]);
        else
          for (int64_t i = lo; i < hi; ++i) d[i] = ir::f32_to_f16_bits(src[i]);
      },
      1 << 15, 64);
}

std::vector<TensorType> as_f32(Types types) {
  std::vector<TensorType> r(types.begin(), types.end());
  for (TensorType& t : r)
    if (ir::is_lowp(t.dtype)) t.dtype = DType::f32;
  return r;
}

// `inner`, an f32 primitive, run on bf16/f16 operands: widen the low-precision inputs,
// run, round the outputs to nearest even (ir/lowp.h, subnormals kept).
Prepared through_f32(Prepared inner, Types in, Types out) {
  std::vector<std::pair<DType, int64_t>> ins, outs;  // (dtype, elements) per operand
  std::string lowp;
  for (const TensorType& t : in) ins.emplace_back(t.dtype, ir::num_elements(t.shape));
  for (const TensorType& t : out) outs.emplace_back(t.dtype, ir::num_elements(t.shape));
  for (const auto* list : {&in, &out})
    for (const TensorType& t : *list)
      if (ir::is_lowp(t.dtype) && lowp.find(ir::dtype_name(t.dtype)) == std::string::npos)
        lowp += fmt::format("{}{}", lowp.empty() ? "" : "/", ir::dtype_name(t.dtype));
  // The inner primitive never keeps weights: they come from per-thread scratch buffers that
  // other nodes reuse.
  auto run = [inner = std::move(inner.run), ins, outs](InPtrs in_ptrs, OutPtrs out_ptrs, WeightSlot) {
    std::vector<const void*> in32(in_ptrs.begin(), in_ptrs.end());
    std::vector<void*> out32(out_ptrs.begin(), out_ptrs.end());
    size_t slot = 0;
    for (size_t i = 0; i < ins.size(); ++i) {
      if (!ir::is_lowp(ins[i].first)) continue;
      float* buf = scratch(slot++, static_cast<size_t>(ins[i].second));
      widen(ins[i].first, in_ptrs[i], buf, ins[i].second);
      in32[i] = buf;
    }
    for (size_t o = 0; o < outs.size(); ++o)
      if (ir::is_lowp(outs[o].first)) out32[o] = scratch(slot++, static_cast<size_t>(outs[o].second));
    inner(in32, out32, nullptr);
    for (size_t o = 0; o < outs.size(); ++o)
      if (ir::is_lowp(outs[o].first)) narrow(outs[o].first, static_cast<const float*>(out32[o]), out_ptrs[o], outs[o].second);
  };
  return Prepared{fmt::format("{} ({} as f32)", inner.impl, lowp), std::move(run), true};
}

// ---- The cache ----------------------------------------------------------------------------

struct Entry {
  std::optional<Prepared> prepared;
  std::string refusal;  // why not, when !prepared
  bool serial = false;  // created and run on one thread (small_op)
};

// Multiply-adds a node takes, roughly: what decides whether threads pay for it.
double estimated_macs(const Node& n, Types in, Types out) {
  const auto elements = [](const TensorType& t) { return static_cast<double>(ir::num_elements(t.shape)); };
  double largest = 0;
  for (const auto* list : {&in, &out})
    for (const TensorType& t : *list) largest = std::max(largest, elements(t));
  // A weight row per output element (Deconvolution: per input element).
  if ((n.op == "Convolution" || n.op == "_fused_conv" || n.op == "Deconvolution" || n.op == "FullyConnected" ||
       n.op == "_fused_fc") &&
      in.size() > 1 &&
      !in[1].shape.empty() && in[1].shape[0] > 0)
    return elements(n.op == "Deconvolution" ? in[0] : out[0]) * elements(in[1]) / static_cast<double>(in[1].shape[0]);
  // A weight-gradient row per output-gradient element.
  if (n.op == "_backward_Convolution_weight" && !out[0].shape.empty() && out[0].shape[0] > 0)
    return elements(in[1]) * elements(out[0]) / static_cast<double>(out[0].shape[0]);
  if ((n.op == "dot" || n.op == "batch_dot") && in.size() > 1 && !out[0].shape.empty()) {
    // (b, m, k) x (b, k, n): b m k * b k n * b m n = b^3 (m n k)^2.
    const double batch = n.op == "batch_dot" ? static_cast<double>(std::max<int64_t>(out[0].shape[0], 1)) : 1;
    return std::sqrt(elements(in[0]) * elements(in[1]) * elements(out[0]) / batch);
  }
  return largest * 4;  // pooling windows, softmax and LayerNorm's few passes
}

// Below this many multiply-adds a node runs on one thread: at 20-50 GMAC/s that is at most
// about a hundred microseconds, and on a machine busy with other processes a team of threads
// can wait a whole scheduler slice (milliseconds) for its last thread. A whole small model
// (the default one, whose largest op is a 4096x256 FullyConnected of 2^20 multiply-adds)
// then runs without a single parallel region: its latency on a loaded machine is the same
// whatever OMP_WAIT_POLICY says (bench/README.md, "Thread contention"), and on an idle one
// it was no slower on one thread (0.2-0.3 ms with OMP_NUM_THREADS=1 as with two).
constexpr double kSerialMacs = 1 << 21;

// Sets OpenMP's thread count for this thread while it lives (oneDNN reads it when it creates
// a primitive and when it runs one).
class OneThread {
 public:
  explicit OneThread(bool active) : saved_(active ? omp_get_max_threads() : 0) {
    if (saved_) omp_set_num_threads(1);
  }
  ~OneThread() {
    if (saved_) omp_set_num_threads(saved_);
  }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;

 private:
  int saved_;
};

// Builds with these types; a refusal or "unimplemented" leaves `why` and returns nothing,
// any other oneDNN failure is an error naming the node.
std::optional<Prepared> attempt(const Node& n, Builder build, Types in, Types out, std::string& why) {
  try {
    return build(n, in, out);
  } catch (const Refusal& r) {
    why = r.why;
  } catch (const dnnl::error& e) {
    if (e.status != dnnl_unimplemented)
      fail("node '{}' ({}): creating the oneDNN primitive failed: {} (status {})", n.name, n.op, e.what(),
           status_name(e.status));
    why = fmt::format("oneDNN has no implementation for {} here (status unimplemented)", n.op);
  }
  return std::nullopt;
}

// `solo`: made for one thread whatever its size, for runs that go solo.
Entry make_entry(const Node& n, Types in, bool solo) {
  Builder build = builder_for(n.op);
  if (!build) return {std::nullopt, fmt::format("oneDNN does not run {}", n.op)};
  Types out = n.outputs;
  bool lowp = false, has_f16 = false;
  for (const auto* list : {&in, &out})
    for (const TensorType& t : *list) {
      if (t.dtype != DType::f32 && !ir::is_lowp(t.dtype))
        return {std::nullopt, fmt::format("{} operand {}: oneDNN runs f32, bf16 and f16 (as f32) only",
                                          ir::dtype_name(t.dtype), ir::type_str(t))};
      if (ir::num_elements(t.shape) == 0) return {std::nullopt, fmt::format("empty operand {}", ir::type_str(t))};
      lowp |= ir::is_lowp(t.dtype);
      has_f16 |= t.dtype == DType::f16;
    }
  // oneDNN's batch normalization meets its threads at spinning barriers several times a run:
  // on a busy machine a descheduled thread stalls the others a scheduler slice at each (a
  // [32,16,32,32] f32 one took 20-60 ms on two threads under load, 0.3 ms on one thread).
  const bool serial = solo || estimated_macs(n, in, out) < kSerialMacs || n.op == "_BatchNorm_train";
  const OneThread one_thread(serial);
  std::string why;
  // Native first (f32, or bf16 where this CPU's oneDNN has a real kernel for it) ...
  std::optional<Prepared> native;
  if (!has_f16) native = attempt(n, build, in, out, why);
  if (native && (!lowp || !onednn_impl_is_slow(native->impl))) return {std::move(native), "", serial};
  // ... then low precision as f32 compute, unless that too is only a reference kernel.
  if (lowp) {
    const std::vector<TensorType> in32 = as_f32(in), out32 = as_f32(out);
    std::string why32;
    if (std::optional<Prepared> wide = attempt(n, build, in32, out32, why32)) {
      if (!native || !onednn_impl_is_slow(wide->impl)) return {through_f32(std::move(*wide), in, out), "", serial};
    } else if (!native) {
      why = why32;
    }
  }
  if (native) return {std::move(native), "", serial};
  return {std::nullopt, why, serial};
}

std::string cache_key(const Node& n, Types in) {
  // Appended piece by piece (no format call per piece): every compile looks up each
  // external node here twice.
  std::string key = n.op;
  for (const auto& [name, v] : n.attrs.values()) {
    key += ';';
    key += name;
    key += '=';
    key += ir::format_ir_attr(v);
  }
  for (const TensorType& t : in) {
    key += ';';
    key += ir::type_str(t);
  }
  for (const TensorType& t : n.outputs) {
    key += ";->";
    key += ir::type_str(t);
  }
  return key;
}

// One key's entry, made once by whichever thread asks first while the others that ask wait
// for it. The map's lock is not held while an entry is made, so entries of different keys
// are made at the same time (OnednnPrefetch). An entry whose making throws is not kept: the
// next one to ask tries again and meets the same error.
struct Slot {
  std::once_flag once;
  std::shared_ptr<const Entry> entry;
};

std::mutex g_mutex;
std::unordered_map<std::string, std::shared_ptr<Slot>> g_cache;
size_t g_created = 0;

// The entry of `key` (cache_key(n, in), with ";solo" when solo), made if needed.
std::shared_ptr<const Entry> entry_with_key(const std::string& key, const Node& n, Types in, bool solo) {
  std::shared_ptr<Slot> slot;
  {
    std::lock_guard lock(g_mutex);
    std::shared_ptr<Slot>& s = g_cache[key];
    if (!s) s = std::make_shared<Slot>();
    slot = s;
  }
  std::call_once(slot->once, [&] {
    slot->entry = std::make_shared<const Entry>(make_entry(n, in, solo));
    if (slot->entry->prepared) {
      std::lock_guard lock(g_mutex);
      ++g_created;
    }
  });
  return slot->entry;
}

std::shared_ptr<const Entry> entry_for(const Node& n, Types in, bool solo = false) {
  if (n.outputs.empty()) fail("node '{}' ({}) has no inferred types", n.name, n.op);
  return entry_with_key(cache_key(n, in) + (solo ? ";solo" : ""), n, in, solo);
}

}  // namespace

bool onednn_impl_is_slow(std::string_view impl) {
  return impl.starts_with("ref:") || impl.find("_ref:") != std::string_view::npos || impl.starts_with("simple");
}

bool onednn_supports(const Node& node, std::span<const TensorType> inputs) {
  return entry_for(node, inputs)->prepared.has_value();
}

std::string onednn_refusal(const Node& node, std::span<const TensorType> inputs) {
  return entry_for(node, inputs)->refusal;
}

bool onednn_computes_in_f32(const Node& node, std::span<const TensorType> inputs) {
  auto e = entry_for(node, inputs);
  return e->prepared && e->prepared->widened;
}

bool onednn_differs_on_nonfinite(const Node& node) {
  // (An absent pool_type is MXNet's default, max.) The gradient recomputes the forward to
  // find each window's maximum, and so routes a NaN window's gradient elsewhere.
  if (node.op == "Pooling" || node.op == "_backward_Pooling")
    return !node.attrs.has("pool_type") || node.attrs.get_string("pool_type") == "max";
  return node.op == "softmax";
}

struct OnednnPrimitive {
  std::shared_ptr<const Entry> entry;  // entry->prepared is set
  // For runs that go solo when `entry` is made for a team: the one-thread primitive, made on
  // first need (null when oneDNN refuses it or it computes other bits; the team one runs
  // then).
  mutable std::once_flag solo_once;
  mutable std::shared_ptr<const Entry> solo;
};

std::shared_ptr<const OnednnPrimitive> onednn_primitive(const Node& node, std::span<const TensorType> inputs) {
  auto e = entry_for(node, inputs);
  if (!e->prepared) return nullptr;
  // After the lookup, so that the fault strikes whether or not the primitive was cached, and
  // leaves the cache as it was.
  if (fault_strikes(Fault::primitive))
    fail("oneDNN: creating the {} primitive failed {}", node.op, injected_fault_note());
  auto primitive = std::make_shared<OnednnPrimitive>();
  primitive->entry = std::move(e);
  return primitive;
}

namespace {

// Operands above this size are not probed (below): their op keeps its team.
constexpr int64_t kProbeBytes = int64_t{256} << 20;

// Whether `solo` computes `team`'s bits for `node`: both run once on the same inputs, values
// spread over [-1, 1). oneDNN may pick another blocking or split a reduction differently
// for one thread (it does for some convolutions and inner products), and a run's results
// must not depend on whether it went solo. Two summation orders give other f32 bits on such
// inputs almost surely. A bf16 or f16 output hides them: its rounding absorbs all but about
// one difference in several hundred, so a probe of a few thousand outputs often shows none
// (a bf16 training step's convolution weight gradients did so on a Sapphire Rapids, then
// differed in real runs). Ops with such outputs are not probed and keep their teams.
bool same_bits(const Entry& team, const Entry& solo, const Node& node, Types in) {
  for (const TensorType& t : node.outputs)
    if (t.dtype == DType::bf16 || t.dtype == DType::f16) return false;
  int64_t bytes = 0;
  for (const Types list : {in, Types(node.outputs)})
    for (const TensorType& t : list) bytes += ir::num_elements(t.shape) * static_cast<int64_t>(ir::dtype_size(t.dtype));
  if (bytes > kProbeBytes) return false;
  std::vector<Tensor> inputs, team_out, solo_out;
  uint64_t state = 0x9E3779B97F4A7C15ull;
  for (const TensorType& t : in) {
    Tensor& x = inputs.emplace_back(t);
    for (int64_t i = 0; i < x.size(); ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      x.set_f64(i, static_cast<double>(state >> 11) * 0x1p-52 - 1.0);
    }
  }
  for (const TensorType& t : node.outputs) {
    team_out.emplace_back(t);
    solo_out.emplace_back(t);
  }
  std::vector<const void*> in_ptrs;
  for (const Tensor& x : inputs) in_ptrs.push_back(x.raw());
  const auto run = [&](const Entry& e, std::vector<Tensor>& out) {
    std::vector<void*> out_ptrs;
    for (Tensor& y : out) out_ptrs.push_back(y.raw());
    const OneThread one_thread(e.serial);
    e.prepared->run(in_ptrs, out_ptrs, nullptr);
  };
  run(team, team_out);
  run(solo, solo_out);
  for (size_t o = 0; o < team_out.size(); ++o)
    if (std::memcmp(team_out[o].raw(), solo_out[o].raw(), team_out[o].bytes()) != 0) return false;
  return true;
}

// Per cache key of a team primitive: its one-thread twin, or null where there is none that
// computes the same bits. Probed once per process.
std::mutex g_solo_mutex;
std::unordered_map<std::string, std::shared_ptr<const Entry>> g_solo;

std::shared_ptr<const Entry> solo_twin(const Node& node, Types in, const Entry& team) {
  const std::string key = cache_key(node, in);
  std::lock_guard lock(g_solo_mutex);
  if (auto it = g_solo.find(key); it != g_solo.end()) return it->second;
  std::shared_ptr<const Entry> solo = entry_for(node, in, /*solo=*/true);
  try {
    if (!solo->prepared || !same_bits(team, *solo, node, in)) solo = nullptr;
  } catch (const dnnl::error&) {
    solo = nullptr;  // the probe failed: keep the team primitive
  }
  g_solo.emplace(key, solo);
  return solo;
}

}  // namespace

// The entry a run uses: the team primitive, or in a solo run its one-thread twin when that
// gives the same bits (else the team one: such an op does not switch).
static const Entry& entry_to_run(const OnednnPrimitive& primitive, const Node& node, std::span<const Tensor> inputs) {
  const Entry& team = *primitive.entry;
  if (team.serial) return team;
  if (run_solo()) {
    std::call_once(primitive.solo_once, [&] {
      std::vector<TensorType> types;
      for (const Tensor& t : inputs) types.push_back(t.type());
      primitive.solo = solo_twin(node, types, team);
    });
    if (primitive.solo) return *primitive.solo;
  }
  team_starting();
  return team;
}

void onednn_execute(const OnednnPrimitive& primitive, const Node& node, std::span<const Tensor> inputs,
                    std::span<Tensor> outputs, OnednnWeightCache* weights) {
  const Entry& entry = entry_to_run(primitive, node, inputs);
  const Prepared& prepared = *entry.prepared;
  const int slot = &entry == primitive.entry.get() ? 0 : 1;  // the weight cache's copy for this primitive
  if (outputs.size() != node.outputs.size())
    fail("node '{}' ({}): {} outputs given, {} expected", node.name, node.op, outputs.size(), node.outputs.size());
  // Fixed-size pointer arrays: oneDNN's ops have at most 3 inputs and 3 outputs.
  constexpr size_t kMaxOperands = 8;
  if (inputs.size() > kMaxOperands || outputs.size() > kMaxOperands)
    fail("node '{}' ({}): too many operands for oneDNN", node.name, node.op);
  std::array<const void*, kMaxOperands> in_ptrs{};
  std::array<void*, kMaxOperands> out_ptrs{};
  for (size_t i = 0; i < inputs.size(); ++i) in_ptrs[i] = inputs[i].raw();
  for (size_t o = 0; o < outputs.size(); ++o) {
    if (outputs[o].type() != node.outputs[o])
      fail("node '{}' ({}): output {} is {}, expected {}", node.name, node.op, o, ir::type_str(outputs[o].type()),
           ir::type_str(node.outputs[o]));
    out_ptrs[o] = outputs[o].raw();
  }
  const InPtrs ins(in_ptrs.data(), inputs.size());
  const OutPtrs outs(out_ptrs.data(), outputs.size());
  const OneThread one_thread(entry.serial);
  try {
    // Weights the cache was not filled from run without it. The first run fills the cache
    // under its mutex; later ones (from any thread) only read it.
    if (!weights || inputs.size() < 2) {
      prepared.run(ins, outs, nullptr);
    } else if (weights->filled[slot].load(std::memory_order_acquire)) {
      prepared.run(ins, outs, weights->source.raw() == inputs[1].raw() ? &weights->reordered[slot] : nullptr);
    } else {
      std::lock_guard lock(weights->mutex);
      if (!weights->filled[0].load(std::memory_order_relaxed) && !weights->filled[1].load(std::memory_order_relaxed))
        weights->source = inputs[1];
      prepared.run(ins, outs, weights->source.raw() == inputs[1].raw() ? &weights->reordered[slot] : nullptr);
      weights->filled[slot].store(true, std::memory_order_release);
    }
  } catch (const dnnl::error& err) {
    fail("node '{}' ({}): oneDNN failed: {} (status {})", node.name, node.op, err.what(), status_name(err.status));
  }
}

void onednn_run(const Node& node, std::span<const Tensor> inputs, std::span<Tensor> outputs) {
  std::vector<TensorType> types;
  for (const Tensor& t : inputs) types.push_back(t.type());
  const auto primitive = onednn_primitive(node, types);
  if (!primitive) fail("node '{}' ({}): oneDNN cannot run it: {}", node.name, node.op, onednn_refusal(node, types));
  onednn_execute(*primitive, node, inputs, outputs, nullptr);
}

std::string onednn_impl_name(const Node& node, std::span<const TensorType> inputs) {
  auto e = entry_for(node, inputs);
  return e->prepared ? e->prepared->impl : "";
}

struct OnednnPrefetch::Work {
  std::vector<Item> items;
  std::vector<std::string> keys;  // items[i]'s cache_key, computed once
  std::atomic<size_t> next{0};
  int omp_threads = 1;

  void make_entries() {
    for (size_t i; (i = next.fetch_add(1)) < items.size();) try {
        entry_with_key(keys[i], *items[i].node, items[i].inputs, false);
      } catch (...) {
        // onednn_primitive meets it again, on the compiling thread, and reports it.
      }
  }
};

OnednnPrefetch::OnednnPrefetch(std::vector<Item> items) : work_(std::make_shared<Work>()) {
  // Each key once: a second thread asking for a key that is being made would only wait.
  std::unordered_set<std::string> seen;
  for (Item& item : items) {
    if (item.node->outputs.empty()) continue;  // onednn_primitive names the node
    std::string key = cache_key(*item.node, item.inputs);
    if (!seen.insert(key).second) continue;
    work_->keys.push_back(std::move(key));
    work_->items.push_back(std::move(item));
  }
  work_->omp_threads = omp_get_max_threads();
  const size_t cores = std::max(2u, std::thread::hardware_concurrency());
  const size_t helpers = std::min({work_->items.size() / 2, cores - 1, size_t{4}});
  for (size_t t = 0; t < helpers; ++t) try {
      threads_.emplace_back([work = work_] {
        // The thread count a primitive is made for is read from the making thread's OpenMP
        // settings: these threads take the constructing thread's.
        omp_set_num_threads(work->omp_threads);
        work->make_entries();
      });
    } catch (const std::system_error&) {
      break;  // no thread to be had: wait() makes the rest
    }
}

void OnednnPrefetch::wait() {
  work_->make_entries();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

OnednnPrefetch::~OnednnPrefetch() {
  work_->next = work_->items.size();  // what is not started is left for onednn_primitive
  for (std::thread& t : threads_) t.join();
}

size_t onednn_primitives_created() {
  std::lock_guard lock(g_mutex);
  return g_created;
}

}  // namespace ampfuse::runtime
