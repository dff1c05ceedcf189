#include "engine/passes/fold_batchnorm.h"

#include "engine/passes/graph_rebuilder.h"
#include "ir/op_registry.h"
#include "ir/ops/nn_params.h"
#include "ir/type_inference.h"

#include <fmt/format.h>

#include <map>

namespace ampfuse::engine {

namespace {

using ir::DType;
using ir::ValueRef;

// The Convolution node a BatchNorm at `bn` folds into, or -1 (the conditions in the header).
int32_t foldable_convolution(const ir::Graph& g, int32_t bn, const std::map<ValueRef, int>& uses,
                             const std::vector<bool>& from_params) {
  const ir::Node& n = g.nodes[bn];
  if (n.op != "BatchNorm" || n.outputs.size() != 1) return -1;
  const ValueRef data = n.inputs[0];
  const ir::Node& conv = g.node(data);
  if (conv.op != "Convolution" || data.index != 0) return -1;
  if (uses.at(data) != 1) return -1;  // read by the BatchNorm only (graph outputs count as reads)
  const ir::TensorType& in = g.type(conv.inputs[0]);
  if (!ir::is_float(in.dtype) || in.dtype == DType::f64) return -1;
  const ir::nn::ConvGeometry geo = ir::nn::conv_geometry(conv.attrs, in.shape, false);
  const int64_t rank = static_cast<int64_t>(in.shape.size());
  const int64_t channel_axis = geo.channels_last ? rank - 1 : 1;
  if (ir::nn::normalize_axis(n.attrs.get_int("axis"), in.shape.size()) != channel_axis) return -1;
  for (size_t i = 1; i < conv.inputs.size(); ++i)
    if (!from_params[conv.inputs[i].node]) return -1;
  for (size_t i = 1; i < n.inputs.size(); ++i)
    if (!from_params[n.inputs[i].node]) return -1;
  return data.node;
}

// Emits nodes into the rebuilt graph (types left for infer_types).
class Emitter {
 public:
  explicit Emitter(GraphRebuilder& rb) : rb_(rb) {}

  ValueRef op(const std::string& op, std::vector<ValueRef> inputs, ir::Attrs attrs, std::string name) {
    ir::Node n;
    n.op = op;
    n.name = std::move(name);
    n.inputs = std::move(inputs);
    n.attrs = ir::complete_attrs(ir::OpRegistry::global().get(op), std::move(attrs));
    return {rb_.emit(std::move(n)), 0};
  }
  // `v` (of dtype `from`) as `to`: itself when they agree, else an amp_cast.
  ValueRef cast(ValueRef v, DType from, DType to, std::string name) {
    if (from == to) return v;
    ir::Attrs a;
    a.set("dtype", to);
    return op("amp_cast", {v}, std::move(a), std::move(name));
  }

 private:
  GraphRebuilder& rb_;
};

}  // namespace

int fold_batchnorm(ir::Graph& g) {
  const std::map<ValueRef, int> uses = ir::use_counts(g);
  const std::vector<bool> from_params = ir::computed_from_params(g);
  std::map<int32_t, int32_t> conv_of_bn;  // BatchNorm node -> the Convolution it absorbs
  std::vector<bool> absorbed(g.nodes.size(), false);
  for (int32_t i = 0; i < static_cast<int32_t>(g.nodes.size()); ++i)
    if (const int32_t c = foldable_convolution(g, i, uses, from_params); c >= 0) {
      conv_of_bn[i] = c;
      absorbed[c] = true;
    }
  if (conv_of_bn.empty()) return 0;

  GraphRebuilder rb(g);
  Emitter e(rb);
  for (int32_t i = 0; i < static_cast<int32_t>(g.nodes.size()); ++i) {
    if (absorbed[i]) continue;  // emitted where its BatchNorm was: only the BatchNorm read it
    const auto found = conv_of_bn.find(i);
    if (found == conv_of_bn.end()) {
      rb.copy(i);
      continue;
    }
    const ir::Node& bn = g.nodes[i];
    const ir::Node& conv = g.nodes[found->second];
    const std::string& name = bn.name;
    const auto f32 = [&](ValueRef old, const std::string& suffix) {
      return e.cast(rb.map(old), g.type(old).dtype, DType::f32, fmt::format("{}_{}_f32", name, suffix));
    };
    // The per-channel map y = x * s + t is BatchNorm itself applied to per-channel vectors
    // [C] (axis 0), so its math stays in the op's recipe: s = BatchNorm(1) with mean and
    // beta 0, and the new bias BatchNorm(b) = s * b + t (BatchNorm(0) without a bias).
    const ValueRef gamma = f32(bn.inputs[1], "gamma"), beta = f32(bn.inputs[2], "beta"),
                   mean = f32(bn.inputs[3], "mean"), var = f32(bn.inputs[4], "var");
    ir::Attrs per_channel = bn.attrs;
    per_channel.set("axis", int64_t{0});
    const auto batchnorm = [&](ValueRef v, ValueRef b, ValueRef m, const std::string& suffix) {
      return e.op("BatchNorm", {v, gamma, b, m, var}, per_channel, name + suffix);
    };
    const ValueRef zeros = e.op("zeros_like", {mean}, {}, name + "_zeros");
    const ValueRef scale = batchnorm(e.op("ones_like", {mean}, {}, name + "_ones"), zeros, zeros, "_scale");
    // w' = w * s along the output channels (the weight's first axis in every layout).
    const ValueRef w = conv.inputs[1];
    std::vector<int64_t> per_filter(g.type(w).shape.size(), 1);
    per_filter[0] = g.type(w).shape[0];
    ir::Attrs reshape;
    reshape.set("shape", std::move(per_filter));
    const ValueRef scale_w = e.op("Reshape", {scale}, std::move(reshape), name + "_scale_per_filter");
    const ValueRef wide_w = e.op("broadcast_mul", {f32(w, "weight"), scale_w}, {}, name + "_folded_weight_f32");
    const ValueRef new_w = e.cast(wide_w, DType::f32, g.type(w).dtype, name + "_folded_weight");
    const ValueRef new_b = batchnorm(conv.inputs.size() > 2 ? f32(conv.inputs[2], "bias") : zeros, beta, mean, "_folded_bias");
    ir::Node folded = conv;
    folded.name = name;
    folded.inputs = {rb.map(conv.inputs[0]), new_w, new_b};
    folded.attrs.set("no_bias", false);
    folded.outputs.clear();
    rb.set({i, 0}, {rb.emit(std::move(folded)), 0});
  }
  g = rb.finish();
  ir::infer_types(g);
  return static_cast<int>(conv_of_bn.size());
}

}  // namespace ampfuse::engine
