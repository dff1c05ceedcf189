#include "runtime/onednn/onednn_ops.h"

#include "ir/error.h"
#include "ir/ops/nn_params.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace ampfuse::runtime {

namespace {

using dnnl::memory;
using Dims = memory::dims;
using ir::DType;
using ir::Node;

dnnl::engine& cpu_engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

std::optional<memory::data_type> dnnl_type(DType t) {
  switch (t) {
    case DType::f32: return memory::data_type::f32;
    case DType::bf16: return memory::data_type::bf16;
    default: return std::nullopt;  // f16 has no CPU compute in oneDNN 2.6
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
  if (!channels_last) return memory::desc(physical, *dnnl_type(t), strides);
  const size_t r = physical.size();
  Dims logical = {physical[0], physical[r - 1]};
  Dims lstrides = {strides[0], strides[r - 1]};
  for (size_t i = 1; i + 1 < r; ++i) logical.push_back(physical[i]), lstrides.push_back(strides[i]);
  return memory::desc(logical, *dnnl_type(t), lstrides);
}



// A created primitive with what running it needs.
struct Prepared {
  std::string impl;
  // Runs the primitive on the node's tensors.
  std::function<void(std::span<const Tensor>, std::span<Tensor>)> run;
};

memory wrap(const memory::desc& d, const Tensor& t) {
  return memory(d, cpu_engine(), const_cast<void*>(t.raw()));
}

dnnl::stream& thread_stream() {
  thread_local dnnl::stream s(cpu_engine());
  return s;
}

void execute(const dnnl::primitive& prim, std::unordered_map<int, memory> args) {
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

// ---- Convolution ------------------------------------------------------------------------

std::optional<Prepared> prepare_convolution(const Node& n, std::span<const TensorType> in, const TensorType& out) {
  const TensorType& x = in[0];
  if (!dnnl_type(x.dtype) || !dnnl_type(out.dtype) || in[1].dtype != x.dtype) return std::nullopt;
  const ir::nn::ConvGeometry geo = ir::nn::conv_geometry(n.attrs, x.shape, false);
  const size_t nd = geo.spatial();
  const bool cl = geo.channels_last;
  const int64_t groups = geo.groups;
  const bool has_bias = in.size() > 2;

  memory::desc src = channels_desc(x.shape, x.dtype, cl);
  memory::desc dst = channels_desc(out.shape, out.dtype, cl);
  // Weights: MXNet stores (O, I/g, k...) channels-first, (O, k..., I/g) channels-last.
  const ir::Shape& ws = in[1].shape;
  Dims wphys(ws.begin(), ws.end());
  Dims wstr = row_major_strides(wphys);
  const int64_t O = wphys[0];
  const int64_t I = cl ? wphys.back() : wphys[1];
  const int64_t sO = wstr[0], sI = cl ? wstr.back() : wstr[1];
  Dims wdims = groups > 1 ? Dims{groups, O / groups, I} : Dims{O, I};
  Dims wstrides = groups > 1 ? Dims{sO * (O / groups), sO, sI} : Dims{sO, sI};
  for (size_t i = 0; i < nd; ++i) {
    wdims.push_back(wphys[(cl ? 1 : 2) + i]);
    wstrides.push_back(wstr[(cl ? 1 : 2) + i]);
  }
  memory::desc wuser(wdims, *dnnl_type(in[1].dtype), wstrides);
  memory::desc wany(wdims, *dnnl_type(in[1].dtype), memory::format_tag::any);
  memory::desc bias_desc;
  if (has_bias) {
    if (!dnnl_type(in[2].dtype)) return std::nullopt;
    bias_desc = memory::desc({O}, *dnnl_type(in[2].dtype), memory::format_tag::a);
  }
  Dims strides(geo.stride.begin(), geo.stride.end()), dil, pl(geo.pad.begin(), geo.pad.end()), pr = pl;
  for (int64_t d : geo.dilate) dil.push_back(d - 1);  // oneDNN counts the gaps
  dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src, wany,
                                    bias_desc, dst, strides, dil, pl, pr);
  dnnl::convolution_forward::primitive_desc pd(d, cpu_engine());
  dnnl::convolution_forward prim(pd);
  const memory::desc wwant = pd.weights_desc();
  return Prepared{pd.impl_info_str(), [=](std::span<const Tensor> ins, std::span<Tensor> outs) {
                    memory w = maybe_reorder(wrap(wuser, ins[1]), wwant);
                    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, wrap(src, ins[0])},
                                                         {DNNL_ARG_WEIGHTS, w},
                                                         {DNNL_ARG_DST, wrap(dst, outs[0])}};
                    if (has_bias) args.emplace(DNNL_ARG_BIAS, wrap(bias_desc, ins[2]));
                    execute(prim, std::move(args));
                  }};
}

// ---- Matrix products ----------------------------------------------------------------------

// C[b] = A[b] x B[b] (+ bias) with A, B described by strides (so transposes are free).
struct MatmulShape {
  int64_t batch, m, k, n;
  Dims a_strides, b_strides;  // over (batch, m, k) / (batch, k, n)
};

std::optional<Prepared> prepare_matmul(const MatmulShape& s, DType a_t, DType b_t, std::optional<DType> bias_t,
                                       DType c_t) {
  if (!dnnl_type(a_t) || a_t != b_t || !dnnl_type(c_t)) return std::nullopt;
  if (bias_t && !dnnl_type(*bias_t)) return std::nullopt;
  memory::desc a({s.batch, s.m, s.k}, *dnnl_type(a_t), s.a_strides);
  memory::desc b({s.batch, s.k, s.n}, *dnnl_type(b_t), s.b_strides);
  memory::desc c({s.batch, s.m, s.n}, *dnnl_type(c_t), memory::format_tag::abc);
  memory::desc bias;
  if (bias_t) bias = memory::desc({1, 1, s.n}, *dnnl_type(*bias_t), memory::format_tag::abc);
  dnnl::matmul::desc d(a, b, bias, c);
  dnnl::matmul::primitive_desc pd(d, cpu_engine());
  dnnl::matmul prim(pd);
  const bool has_bias = bias_t.has_value();
  return Prepared{pd.impl_info_str(), [=](std::span<const Tensor> ins, std::span<Tensor> outs) {
                    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, wrap(a, ins[0])},
                                                         {DNNL_ARG_WEIGHTS, wrap(b, ins[1])},
                                                         {DNNL_ARG_DST, wrap(c, outs[0])}};
                    if (has_bias) args.emplace(DNNL_ARG_BIAS, wrap(bias, ins[2]));
                    execute(prim, std::move(args));
                  }};
}

std::optional<Prepared> prepare_fully_connected(const Node& n, std::span<const TensorType> in, const TensorType& out) {
  const ir::Shape& x = in[0].shape;
  const bool flatten = n.attrs.get_bool("flatten");
  const int64_t hidden = n.attrs.get_int("num_hidden");
  int64_t m = 1, k = 1;
  if (flatten) {
    m = x[0];
    for (size_t i = 1; i < x.size(); ++i) k *= x[i];
  } else {
    for (size_t i = 0; i + 1 < x.size(); ++i) m *= x[i];
    k = x.back();
  }
  // Weight (hidden, k) row-major read as B = W^T: (k, hidden) with strides (1, k).
  MatmulShape s{1, m, k, hidden, {m * k, k, 1}, {k * hidden, 1, k}};
  const bool has_bias = !n.attrs.get_bool("no_bias");
  return prepare_matmul(s, in[0].dtype, in[1].dtype, has_bias ? std::optional(in[2].dtype) : std::nullopt, out.dtype);
}

std::optional<Prepared> prepare_batch_dot(const Node& n, std::span<const TensorType> in, const TensorType& out) {
  const ir::Shape& a = in[0].shape;
  const ir::Shape& b = in[1].shape;
  if (a.size() < 3 || a.size() != b.size()) return std::nullopt;
  const bool ta = n.attrs.get_bool("transpose_a"), tb = n.attrs.get_bool("transpose_b");
  int64_t batch = 1;
  for (size_t i = 0; i + 2 < a.size(); ++i) batch *= a[i];
  const int64_t ar = a[a.size() - 2], ac = a.back(), br = b[b.size() - 2], bc = b.back();
  const int64_t m = ta ? ac : ar, k = ta ? ar : ac, nn = tb ? br : bc;
  Dims as = ta ? Dims{ar * ac, 1, ac} : Dims{ar * ac, ac, 1};
  Dims bs = tb ? Dims{br * bc, 1, bc} : Dims{br * bc, bc, 1};
  return prepare_matmul({batch, m, k, nn, as, bs}, in[0].dtype, in[1].dtype, std::nullopt, out.dtype);
}

std::optional<Prepared> prepare_dot(const Node& n, std::span<const TensorType> in, const TensorType& out) {
  const ir::Shape& a = in[0].shape;
  const ir::Shape& b = in[1].shape;
  if (a.size() != 2 || b.size() != 2) return std::nullopt;  // N-D dot: reference kernel
  const bool ta = n.attrs.get_bool("transpose_a"), tb = n.attrs.get_bool("transpose_b");
  const int64_t m = ta ? a[1] : a[0], k = ta ? a[0] : a[1], nn = tb ? b[0] : b[1];
  Dims as = ta ? Dims{a[0] * a[1], 1, a[1]} : Dims{a[0] * a[1], a[1], 1};
  Dims bs = tb ? Dims{b[0] * b[1], 1, b[1]} : Dims{b[0] * b[1], b[1], 1};
  return prepare_matmul({1, m, k, nn, as, bs}, in[0].dtype, in[1].dtype, std::nullopt, out.dtype);
}

// ---- Pooling ------------------------------------------------------------------------------

std::optional<Prepared> prepare_pooling(const Node& n, std::span<const TensorType> in, const TensorType& out) {
  const TensorType& x = in[0];
  if (!dnnl_type(x.dtype) || x.dtype != out.dtype) return std::nullopt;
  const ir::nn::PoolGeometry geo = ir::nn::pool_geometry(n.attrs, x.shape);
  if (geo.type != ir::nn::PoolType::max && geo.type != ir::nn::PoolType::avg) return std::nullopt;
  const size_t nd = geo.kernel.size();
  Dims kernel(geo.kernel.begin(), geo.kernel.end()), stride(geo.stride.begin(), geo.stride.end());
  Dims pl(geo.pad.begin(), geo.pad.end()), pr;
  for (size_t i = 0; i < nd; ++i) {
    // Right padding that yields exactly the output extent MXNet's convention asked for.
    const int64_t right = (geo.out_size[i] - 1) * stride[i] + kernel[i] - geo.in_size[i] - pl[i];
    pr.push_back(std::max<int64_t>(right, 0));
  }
  dnnl::algorithm alg = dnnl::algorithm::pooling_max;
  if (geo.type == ir::nn::PoolType::avg) {
    // MXNet's include-pad average divides by the window clipped to the padded input;
    // oneDNN divides by the whole kernel. They agree only without overhang past the pad.
    if (geo.count_include_pad && (pr != pl || Dims(geo.pad_end.begin(), geo.pad_end.end()) != pl)) return std::nullopt;
    alg = geo.count_include_pad ? dnnl::algorithm::pooling_avg_include_padding : dnnl::algorithm::pooling_avg_exclude_padding;
  }
  memory::desc src = channels_desc(x.shape, x.dtype, geo.channels_last);
  memory::desc dst = channels_desc(out.shape, out.dtype, geo.channels_last);
  dnnl::pooling_forward::desc d(dnnl::prop_kind::forward_inference, alg, src, dst, stride, kernel, pl, pr);
  dnnl::pooling_forward::primitive_desc pd(d, cpu_engine());
  dnnl::pooling_forward prim(pd);
  return Prepared{pd.impl_info_str(), [=](std::span<const Tensor> ins, std::span<Tensor> outs) {
                    execute(prim, {{DNNL_ARG_SRC, wrap(src, ins[0])}, {DNNL_ARG_DST, wrap(dst, outs[0])}});
                  }};
}

// ---- Softmax and LayerNorm ----------------------------------------------------------------

int normalize_axis(int64_t axis, size_t rank) { return static_cast<int>(axis < 0 ? axis + static_cast<int64_t>(rank) : axis); }

std::optional<Prepared> prepare_softmax(const Node& n, std::span<const TensorType> in, const TensorType& out) {
  const TensorType& x = in[0];
  if (!dnnl_type(x.dtype) || x.dtype != out.dtype || x.shape.empty()) return std::nullopt;
  if (n.attrs.has("temperature") && !n.attrs.is_none("temperature") && n.attrs.get_float("temperature") != 1.0)
    return std::nullopt;
  const int axis = normalize_axis(n.attrs.get_int("axis"), x.shape.size());
  Dims dims(x.shape.begin(), x.shape.end());
  memory::desc md(dims, *dnnl_type(x.dtype), row_major_strides(dims));
  dnnl::softmax_forward::desc d(dnnl::prop_kind::forward_inference, md, axis);
  dnnl::softmax_forward::primitive_desc pd(d, cpu_engine());
  dnnl::softmax_forward prim(pd);
  return Prepared{pd.impl_info_str(), [=](std::span<const Tensor> ins, std::span<Tensor> outs) {
                    execute(prim, {{DNNL_ARG_SRC, wrap(md, ins[0])}, {DNNL_ARG_DST, wrap(md, outs[0])}});
                  }};
}

std::optional<Prepared> prepare_layer_norm(const Node& n, std::span<const TensorType> in, std::span<const TensorType> outs) {
  const TensorType& x = in[0];
  if (outs.size() != 1 || !dnnl_type(x.dtype) || x.dtype != outs[0].dtype || x.shape.size() < 2) return std::nullopt;
  if (normalize_axis(n.attrs.get_int("axis"), x.shape.size()) != static_cast<int>(x.shape.size()) - 1) return std::nullopt;
  if (in[1].dtype != DType::f32 || in[2].dtype != DType::f32) return std::nullopt;
  Dims dims(x.shape.begin(), x.shape.end());
  memory::desc md(dims, *dnnl_type(x.dtype), row_major_strides(dims));
  memory::desc ss({x.shape.back()}, memory::data_type::f32, memory::format_tag::a);
  const float eps = static_cast<float>(n.attrs.get_float("eps"));
  dnnl::layer_normalization_forward::desc d(dnnl::prop_kind::forward_inference, md, eps,
                                            dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift);
  dnnl::layer_normalization_forward::primitive_desc pd(d, cpu_engine());
  dnnl::layer_normalization_forward prim(pd);
  return Prepared{pd.impl_info_str(), [=](std::span<const Tensor> ins, std::span<Tensor> o) {
                    execute(prim, {{DNNL_ARG_SRC, wrap(md, ins[0])},
                                   {DNNL_ARG_SCALE, wrap(ss, ins[1])},
                                   {DNNL_ARG_SHIFT, wrap(ss, ins[2])},
                                   {DNNL_ARG_DST, wrap(md, o[0])}});
                  }};
}

// ---- The cache ----------------------------------------------------------------------------

std::string cache_key(const Node& n, std::span<const TensorType> in) {
  std::string key = n.op;
  for (const auto& [name, v] : n.attrs.values()) key += fmt::format(";{}={}", name, ir::format_ir_attr(v));
  for (const TensorType& t : in) key += ";" + ir::type_str(t);
  for (const TensorType& t : n.outputs) key += ";->" + ir::type_str(t);
  return key;
}

std::mutex g_mutex;
std::unordered_map<std::string, std::shared_ptr<const std::optional<Prepared>>> g_cache;
size_t g_created = 0;

std::shared_ptr<const std::optional<Prepared>> prepared_for(const Node& n, std::span<const TensorType> in) {
  const std::string key = cache_key(n, in);
  std::lock_guard lock(g_mutex);
  if (auto it = g_cache.find(key); it != g_cache.end()) return it->second;
  std::optional<Prepared> p;
  if (n.outputs.empty()) fail("node '{}' ({}) has no inferred types", n.name, n.op);
  try {
    if (n.op == "Convolution") p = prepare_convolution(n, in, n.outputs[0]);
    else if (n.op == "FullyConnected") p = prepare_fully_connected(n, in, n.outputs[0]);
    else if (n.op == "batch_dot") p = prepare_batch_dot(n, in, n.outputs[0]);
    else if (n.op == "dot") p = prepare_dot(n, in, n.outputs[0]);
    else if (n.op == "Pooling") p = prepare_pooling(n, in, n.outputs[0]);
    else if (n.op == "softmax") p = prepare_softmax(n, in, n.outputs[0]);
    else if (n.op == "LayerNorm") p = prepare_layer_norm(n, in, n.outputs);
  } catch (const dnnl::error&) {
    p.reset();  // "unimplemented" for this combination: the caller uses the reference kernel
  }
  if (p) ++g_created;
  auto shared = std::make_shared<const std::optional<Prepared>>(std::move(p));
  g_cache.emplace(key, shared);
  return shared;
}

}  // namespace

bool onednn_supports(const Node& node, std::span<const TensorType> inputs) { return prepared_for(node, inputs)->has_value(); }

void onednn_run(const Node& node, std::span<const Tensor> inputs, std::span<Tensor> outputs) {
  std::vector<TensorType> types;
  for (const Tensor& t : inputs) types.push_back(t.type());
  auto p = prepared_for(node, types);
  if (!p->has_value()) fail("node '{}' ({}): oneDNN has no implementation for these types and attributes", node.name, node.op);
  try {
    (**p).run(inputs, outputs);
  } catch (const dnnl::error& e) {
    fail("node '{}' ({}): oneDNN failed: {}", node.name, node.op, e.what());
  }
}

std::string onednn_impl_name(const Node& node, std::span<const TensorType> inputs) {
  auto p = prepared_for(node, inputs);
  return p->has_value() ? (**p).impl : "";
}

size_t onednn_primitives_created() {
  std::lock_guard lock(g_mutex);
  return g_created;
}

}  // namespace ampfuse::runtime
