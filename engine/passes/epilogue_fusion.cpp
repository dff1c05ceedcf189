#include "engine/passes/epilogue_fusion.h"

#include "engine/passes/graph_rebuilder.h"
#include "ir/op_registry.h"
#include "ir/type_inference.h"

#include <cmath>
#include <map>
#include <optional>
#include <string>

namespace ampfuse::engine {

namespace {

using ir::ValueRef;

bool is_relu(const ir::Node& n) {
  return n.op == "relu" || (n.op == "Activation" && n.attrs.get_string("act_type") == "relu");
}

// LeakyReLU's leaky form with a nonzero slope: oneDNN's relu post-op with that alpha
// computes it bit for bit, NaN included. (relu is taken only when asked and clip never:
// their post-ops turn NaN into 0, where the graph keeps it; bench/README.md, "NaN through
// the epilogues", says what a relu costs as a fused kernel after the op.)
bool is_leaky(const ir::Node& n) {
  if (n.op != "LeakyReLU" || n.attrs.get_string("act_type") != "leaky") return false;
  const double slope = n.attrs.get_float("slope");
  return slope != 0 && !std::isnan(slope);
}

bool is_add(const ir::Node& n) { return n.op == "elemwise_add" || n.op == "broadcast_add"; }

// The op with an epilogue that `op` becomes, or "" when it has none.
std::string fused_op(const std::string& op) {
  if (op == "Convolution") return "_fused_conv";
  if (op == "FullyConnected") return "_fused_fc";
  return "";
}

// One chain to fuse: the op, the nodes after it, and what the fused node reads.
struct Chain {
  int32_t op = -1;
  std::vector<int32_t> absorbed;  // the op and the links before the last
  int32_t last = -1;              // the node whose value the fused node computes
  std::optional<ValueRef> residual;
  bool relu = false;
  std::optional<double> leaky_slope;
};

class ChainFinder {
 public:
  ChainFinder(const ir::Graph& g, bool relu) : g_(g), relu_(relu), uses_(ir::use_counts(g)) {
    for (int32_t i = 0; i < static_cast<int32_t>(g.nodes.size()); ++i)
      for (ValueRef in : g.nodes[i].inputs) reader_[in] = i;  // meaningful where uses == 1
  }

  std::optional<Chain> from(int32_t op) const {
    const ir::Node& c = g_.nodes[op];
    if (fused_op(c.op).empty() || c.outputs.size() != 1) return std::nullopt;
    const ir::TensorType& type = c.outputs[0];
    if (type.dtype != ir::DType::f32 && !ir::is_lowp(type.dtype)) return std::nullopt;
    Chain chain;
    chain.op = chain.last = op;
    // The add, when the op's value goes to one.
    if (const int32_t next = sole_reader({op, 0}); next >= 0 && is_add(g_.nodes[next])) {
      const ir::Node& add = g_.nodes[next];
      const ValueRef other = add.inputs[add.inputs[0] == ValueRef{op, 0} ? 1 : 0];
      if (add.outputs.size() == 1 && add.outputs[0] == type && g_.type(other) == type && other != ValueRef{op, 0}) {
        chain.absorbed.push_back(chain.last);
        chain.last = next;
        chain.residual = other;
      }
    }
    if (const int32_t next = sole_reader({chain.last, 0}); next >= 0 && g_.nodes[next].outputs[0] == type) {
      const ir::Node& act = g_.nodes[next];
      if (is_leaky(act)) chain.leaky_slope = act.attrs.get_float("slope");
      chain.relu = relu_ && is_relu(act);
      if (chain.leaky_slope || chain.relu) chain.absorbed.push_back(chain.last), chain.last = next;
    }
    if (chain.last == op) return std::nullopt;
    return chain;
  }

 private:
  // The one node that reads `v` (once), or -1 when anything else does too or it is a graph
  // output (use_counts counts those as reads).
  int32_t sole_reader(ValueRef v) const {
    const auto u = uses_.find(v);
    if (u == uses_.end() || u->second != 1) return -1;
    const auto r = reader_.find(v);
    return r == reader_.end() ? -1 : r->second;
  }

  const ir::Graph& g_;
  bool relu_;
  std::map<ValueRef, int> uses_;
  std::map<ValueRef, int32_t> reader_;
};

// The fused node of a chain, its inputs still the old graph's values.
ir::Node fused_node(const ir::Graph& g, const Chain& chain) {
  const ir::Node& op = g.nodes[chain.op];
  ir::Node n;
  n.op = fused_op(op.op);
  n.name = g.nodes[chain.last].name;
  n.inputs = op.inputs;
  ir::Attrs attrs = op.attrs;
  attrs.set("with_residual", chain.residual.has_value());
  attrs.set("act_type", std::string(chain.leaky_slope ? "leaky" : chain.relu ? "relu" : "none"));
  if (chain.leaky_slope) attrs.set("slope", *chain.leaky_slope);
  if (chain.residual) n.inputs.push_back(*chain.residual);
  n.attrs = ir::complete_attrs(ir::OpRegistry::global().get(n.op), std::move(attrs));
  n.outputs = op.outputs;
  return n;
}

}  // namespace

int fuse_epilogues(ir::Graph& g, const RunsFusedEpilogue& runs_fused, bool relu) {
  const ChainFinder finder(g, relu);
  std::map<int32_t, ir::Node> fused_at;  // last node of a chain -> its fused node
  std::vector<bool> absorbed(g.nodes.size(), false);
  for (int32_t i = 0; i < static_cast<int32_t>(g.nodes.size()); ++i) {
    const std::optional<Chain> chain = finder.from(i);
    if (!chain) continue;
    ir::Node fused = fused_node(g, *chain);
    std::vector<ir::TensorType> types;
    for (ValueRef in : fused.inputs) types.push_back(g.type(in));
    // Two ops may meet at one add (a projection shortcut): the first chain takes it, and the
    // other op, its residual, stays.
    if (absorbed[chain->last] || fused_at.count(chain->last) || (chain->residual && absorbed[chain->residual->node]))
      continue;
    if (!runs_fused(fused, types)) continue;
    for (int32_t a : chain->absorbed) absorbed[a] = true;
    fused_at.emplace(chain->last, std::move(fused));
  }
  if (fused_at.empty()) return 0;

  GraphRebuilder rb(g);
  for (int32_t i = 0; i < static_cast<int32_t>(g.nodes.size()); ++i) {
    if (absorbed[i]) continue;  // only the chain read it
    const auto found = fused_at.find(i);
    if (found == fused_at.end()) {
      rb.copy(i);
      continue;
    }
    ir::Node n = std::move(found->second);
    for (ValueRef& in : n.inputs) in = rb.map(in);
    rb.set({i, 0}, {rb.emit(std::move(n)), 0});
  }
  g = rb.finish();
  ir::infer_types(g);
  return static_cast<int>(fused_at.size());
}

}  // namespace ampfuse::engine
