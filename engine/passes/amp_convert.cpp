#include "engine/passes/amp_convert.h"

#include "engine/passes/graph_rebuilder.h"
#include "engine/passes/typed_graph.h"
#include "ir/error.h"
#include "ir/op_registry.h"
#include "ir/type_inference.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

namespace ampfuse::engine {

namespace {

using ir::AmpClass;
using ir::DType;
using ir::ValueRef;

// amp_cast retypes only these (MXNet: "float32/16/bf16 only"); f64 and integers stay.
bool castable(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

// How one op node runs after conversion.
struct Plan {
  bool low = false;
  std::vector<DType> reads;          // the type each input is read in
  std::vector<ir::TensorType> outs;  // output types (only when low)
};

class Converter {
 public:
  Converter(const ir::Graph& g, const AmpOptions& opts)
      : g_(g), opts_(opts), policy_(opts), target_(opts.target), plans_(g.nodes.size()),
        tried_(g.nodes.size(), false), stored_low_(g.nodes.size(), false) {}

  ir::Graph run(int* inserted) {
    decide();
    decide_stored_low();
    return emit(inserted);
  }

 private:
  DType orig(ValueRef v) const { return g_.type(v).dtype; }

  // Whether input `k` of node `n` would be read in the target type if the node ran low.
  bool lowers_input(const ir::Node& n, const ir::OpDef& def, size_t k) const {
    return !policy_.keeps_input(def, n.attrs, k) && castable(orig(n.inputs[k]));
  }

  // The low-precision plan for node i, or nullopt when the op's own inference refuses it
  // or when nothing would change (no float input to lower).
  std::optional<Plan> low_plan(int32_t i) const {
    const ir::Node& n = g_.nodes[i];
    const ir::OpDef& def = ir::OpRegistry::global().get(n.op);
    Plan p;
    p.low = true;
    bool changes = false;
    ir::InferContext ctx{n.attrs, {}, {}};
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const ir::TensorType& t = g_.type(n.inputs[k]);
      const DType read = lowers_input(n, def, k) ? target_ : t.dtype;
      changes |= read != t.dtype;
      p.reads.push_back(read);
      ctx.inputs.push_back(ir::TensorType{read, t.shape});
    }
    if (!changes) return std::nullopt;
    ctx.outputs.resize(n.outputs.size());
    try {
      def.infer(ctx);
    } catch (const Error&) {
      return std::nullopt;  // the op does not run on these types: it keeps its own
    }
    for (const auto& o : ctx.outputs) {
      if (!o) return std::nullopt;
      p.outs.push_back(*o);
    }
    return p;
  }

  // Runs node i low if its plan works; records which values now exist in the target type.
  bool try_low(int32_t i) {
    if (tried_[i]) return false;
    tried_[i] = true;
    std::optional<Plan> p = low_plan(i);
    if (!p) return false;
    const ir::Node& n = g_.nodes[i];
    for (size_t k = 0; k < n.inputs.size(); ++k)
      if (p->reads[k] == target_) low_.insert(n.inputs[k]);
    for (size_t k = 0; k < p->outs.size(); ++k)
      if (p->outs[k].dtype == target_) low_.insert({i, static_cast<int32_t>(k)});
    plans_[i] = std::move(*p);
    return true;
  }

  // Lowerable inputs of node i that exist in the target type, and how many there are.
  std::pair<int, int> low_inputs(int32_t i) const {
    const ir::Node& n = g_.nodes[i];
    const ir::OpDef& def = ir::OpRegistry::global().get(n.op);
    int lowerable = 0, low = 0;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      if (!lowers_input(n, def, k)) continue;
      ++lowerable;
      low += low_.count(n.inputs[k]) ? 1 : 0;
    }
    return {lowerable, low};
  }

  bool is_multicast(int32_t i) const {
    const ir::Node& n = g_.nodes[i];
    return !n.is_var() && ir::OpRegistry::global().get(n.op).is_multicast;
  }

  // The type value v has after conversion, as far as the plans made so far say.
  DType planned_type(ValueRef v) const {
    return plans_[v.node].low ? plans_[v.node].outs[v.index].dtype : orig(v);
  }

  // amp_multicast reads its inputs in the types they have after conversion, without a cast
  // (MXNet leaves an amp_multicast it finds alone: casting an f32 input down would round a
  // value the graph keeps in f32). Its outputs are what its own inference makes of those
  // types; it "runs low" when that changes them. Monotone: a multicast's outputs only get
  // narrower as its inputs do, so it fits the fixed point of decide().
  bool plan_multicast(int32_t i) {
    const ir::Node& n = g_.nodes[i];
    Plan p;
    p.low = true;
    ir::InferContext ctx{n.attrs, {}, {}};
    for (ValueRef in : n.inputs) {
      p.reads.push_back(planned_type(in));
      ctx.inputs.push_back(ir::TensorType{p.reads.back(), g_.type(in).shape});
    }
    ctx.outputs.resize(n.outputs.size());
    try {
      ir::OpRegistry::global().get(n.op).infer(ctx);
    } catch (const Error&) {
      // The new types do not go together (bf16 from the graph meets the f16 target with no
      // f32 among them): the multicast reads what it read before, casting back to it.
      p.reads.clear();
      for (ValueRef in : n.inputs) p.reads.push_back(orig(in));
      p.outs = n.outputs;
      const bool different = !plans_[i].low || plans_[i].reads != p.reads;
      plans_[i] = std::move(p);
      return different;
    }
    bool changes = false;
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      p.outs.push_back(*ctx.outputs[k]);
      changes |= p.outs[k].dtype != n.outputs[k].dtype;
    }
    Plan next = changes ? std::move(p) : Plan{};
    const bool different = next.low != plans_[i].low || next.reads != plans_[i].reads;
    plans_[i] = std::move(next);
    for (size_t k = 0; k < plans_[i].outs.size(); ++k)
      if (plans_[i].outs[k].dtype == target_) low_.insert({i, static_cast<int32_t>(k)});
    return different;
  }

  // Low-precision ops first; then neutral and widest ops join wherever their inputs already
  // exist in low precision, repeated until nothing changes. The set of low values only
  // grows, so the fixed point is unique and does not depend on the order of the sweep.
  void decide() {
    for (int32_t i = 0; i < static_cast<int32_t>(g_.nodes.size()); ++i)
      for (size_t k = 0; k < g_.nodes[i].outputs.size(); ++k)
        if (g_.nodes[i].outputs[k].dtype == target_) low_.insert({i, static_cast<int32_t>(k)});
    std::vector<AmpClass> cls(g_.nodes.size(), AmpClass::fp32);
    for (int32_t i = 0; i < static_cast<int32_t>(g_.nodes.size()); ++i) {
      const ir::Node& n = g_.nodes[i];
      if (n.is_var() || ir::is_cast(n) || is_multicast(i)) continue;
      cls[i] = policy_.node_class(n);
      if (cls[i] == AmpClass::lowp) try_low(i);
    }
    for (bool changed = true; changed;) {
      changed = false;
      for (int32_t i = 0; i < static_cast<int32_t>(g_.nodes.size()); ++i) {
        if (is_multicast(i)) {
          changed |= plan_multicast(i);
          continue;
        }
        if (tried_[i] || (cls[i] != AmpClass::neutral && cls[i] != AmpClass::widest)) continue;
        const auto [lowerable, low] = low_inputs(i);
        const bool all_needed = cls[i] == AmpClass::widest && !opts_.cast_narrow;
        const bool joins = low > 0 && (!all_needed || low == lowerable);
        if (joins) changed |= try_low(i);
      }
    }
  }

  // The type node i reads input k in, for deciding whether a param can be stored low.
  DType read_type(int32_t i, size_t k) const {
    const ir::Node& n = g_.nodes[i];
    if (plans_[i].low) return plans_[i].reads[k];
    if (ir::is_cast(n) && n.outputs[0].dtype == target_) return target_;  // a cast to low: exact either way
    return orig(n.inputs[k]);
  }

  // A source op of the low-precision class (_zeros, _ones, _full moved there by the user:
  // MXNet's lists have them neutral for fp16 and fp32 for bf16, so by default they make f32
  // and are cast) has no inputs to read low, so running it low means making its value in
  // the type its readers want. Only exact values are made so (zeros, ones, f32-exact fills),
  // so that a reader in f32 and a reader in low precision see the same number.
  bool exact_source(int32_t i) const {
    const ir::Node& n = g_.nodes[i];
    if (n.is_var() || !n.inputs.empty() || !n.attrs.has("dtype") || !castable(n.outputs.at(0).dtype)) return false;
    if (ir::OpRegistry::global().get(n.op).kind != ir::OpKind::source) return false;
    if (policy_.node_class(n) != AmpClass::lowp) return false;
    if (!n.attrs.has("value")) return true;
    const double v = n.attrs.get_float("value");
    return static_cast<double>(static_cast<float>(v)) == v || std::isnan(v);
  }

  // Params (with cast_params_offline) and exact sources every reader reads in the target
  // type are stored or made in it.
  void decide_stored_low() {
    std::vector<int> low_reads(g_.nodes.size(), 0), other_reads(g_.nodes.size(), 0);
    for (int32_t i = 0; i < static_cast<int32_t>(g_.nodes.size()); ++i)
      for (size_t k = 0; k < g_.nodes[i].inputs.size(); ++k) {
        const ValueRef in = g_.nodes[i].inputs[k];
        (read_type(i, k) == target_ ? low_reads : other_reads)[in.node]++;
      }
    for (ValueRef o : g_.outputs) other_reads[o.node]++;
    for (int32_t i = 0; i < static_cast<int32_t>(g_.nodes.size()); ++i) {
      const ir::Node& n = g_.nodes[i];
      const bool offline_param = n.is_var() && n.role == ir::VarRole::param && opts_.cast_params_offline;
      const bool candidate = offline_param || exact_source(i);
      if (candidate && castable(n.outputs[0].dtype) && n.outputs[0].dtype != target_ && low_reads[i] > 0 &&
          other_reads[i] == 0)
        stored_low_[i] = true;
    }
  }

  // The type value v has after conversion.
  DType new_type(ValueRef v) const {
    if (plans_[v.node].low) return plans_[v.node].outs[v.index].dtype;
    if (stored_low_[v.node]) return target_;
    return orig(v);
  }

  static std::string cast_name(const ir::Node& producer, ValueRef v, DType to) {
    std::string base = producer.name;
    if (!producer.is_var()) base += producer.outputs.size() > 1 ? fmt::format("_output{}", v.index) : "_output";
    return fmt::format("{}_amp_cast_{}", base, ir::mxnet_dtype_name(to));
  }

  // A legacy source op (an RNN's begin state, _zeros shape=(2, 0, 200)) leaves extents of 0
  // to its consumer to decide; type inference fills them in from the consumer. A cast in
  // between would hide the consumer, so the source being cast gets the inferred shape
  // written into its `shape` attribute (the converted graph has fixed shapes anyway).
  static void write_in_inferred_shape(ir::Node& producer, const ir::Shape& inferred) {
    if (producer.is_var() || ir::OpRegistry::global().get(producer.op).kind != ir::OpKind::source) return;
    if (!producer.attrs.has("shape")) return;
    const auto& given = producer.attrs.get_ints("shape");
    if (given.empty() || std::find(given.begin(), given.end(), 0) != given.end()) producer.attrs.set("shape", inferred);
  }

  // Old value v in type `to` in the new graph: itself, or its one cast to that type.
  ValueRef in_type(GraphRebuilder& rb, ValueRef v, DType to, int* inserted) {
    const ValueRef now = rb.map(v);
    if (new_type(v) == to) return now;
    auto [it, fresh] = casts_.try_emplace({v, to});
    if (!fresh) return it->second;
    if (exact_source(v.node)) {
      ir::Node made = rb.out().node(now);
      made.name += fmt::format("_{}", ir::mxnet_dtype_name(to));
      made.attrs.set("dtype", to);
      made.outputs = {ir::TensorType{to, g_.type(v).shape}};
      it->second = {rb.emit(std::move(made)), 0};
      return it->second;
    }
    write_in_inferred_shape(rb.out().nodes[now.node], g_.type(v).shape);
    const ir::OpDef& def = ir::OpRegistry::global().get("amp_cast");
    ir::Node cast;
    cast.op = "amp_cast";
    cast.name = cast_name(g_.node(v), v, to);
    cast.inputs = {now};
    ir::Attrs attrs;
    attrs.set("dtype", to);
    cast.attrs = ir::complete_attrs(def, std::move(attrs));
    cast.hints[kAmpInsertedHint] = "1";
    cast.outputs = {ir::TensorType{to, g_.type(v).shape}};
    it->second = {rb.emit(std::move(cast)), 0};
    ++*inserted;
    return it->second;
  }

  ir::Graph emit(int* inserted) {
    GraphRebuilder rb(g_);
    for (int32_t i = 0; i < static_cast<int32_t>(g_.nodes.size()); ++i) {
      ir::Node n = g_.nodes[i];
      if (stored_low_[i]) {
        n.outputs[0].dtype = target_;
        if (!n.is_var()) n.attrs.set("dtype", target_);
      } else if (!n.is_var()) {
        for (size_t k = 0; k < n.inputs.size(); ++k) {
          const ValueRef in = n.inputs[k];
          // A cast's output type is its attribute, so it reads its input in whatever type
          // that has become instead of asking for the original one; so does a multicast
          // whose outputs keep their types (plan_multicast).
          const bool as_is = ir::is_cast(n) || is_multicast(i);
          const DType want = plans_[i].low ? plans_[i].reads[k] : as_is ? new_type(in) : orig(in);
          n.inputs[k] = in_type(rb, in, want, inserted);
        }
        if (plans_[i].low) n.outputs = plans_[i].outs;
      }
      const int32_t id = rb.emit(std::move(n));
      for (size_t k = 0; k < g_.nodes[i].outputs.size(); ++k)
        rb.set({i, static_cast<int32_t>(k)}, {id, static_cast<int32_t>(k)});
    }
    std::vector<ValueRef> outputs;
    for (ValueRef o : g_.outputs) outputs.push_back(in_type(rb, o, orig(o), inserted));
    ir::Graph out = rb.finish();
    out.outputs = std::move(outputs);
    return out;
  }

  const ir::Graph& g_;
  const AmpOptions& opts_;
  AmpPolicy policy_;
  DType target_;
  std::vector<Plan> plans_;
  std::vector<bool> tried_;
  std::vector<bool> stored_low_;  // offline params, and sources made in the target type
  std::set<ValueRef> low_;  // values that exist in the target type after conversion
  std::map<std::pair<ValueRef, DType>, ValueRef> casts_;
};

}  // namespace

int amp_convert(ir::Graph& g, const AmpOptions& opts) {
  infer_if_untyped(g);
  int inserted = 0;
  ir::Graph out = Converter(g, opts).run(&inserted);
  // The plans came from each op's own inference; running it over the whole graph again
  // checks that the pieces fit together.
  with_context("internal: amp_convert produced an inconsistent graph", [&] { ir::infer_types(out); });
  g = std::move(out);
  return inserted;
}

}  // namespace ampfuse::engine
