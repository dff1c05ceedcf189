#include "fuzz/random_graph.h"

#include "engine/passes/dce.h"
#include "ir/builder.h"
#include "ir/error.h"
#include "ir/op_registry.h"
#include "ir/scalar_program.h"
#include "ir/type_inference.h"
#include "runtime/random.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <map>
#include <string>
#include <vector>

namespace ampfuse::fuzz {

namespace {

using ir::DType;
using ir::Shape;
using ir::ValueRef;

// Attribute values by kind, for attributes the schema alone describes (no choices).
constexpr const char* kFloats[] = {"0.5", "2", "-1.5", "3", "0", "1e-3", "100", "-0.25", "65504", "1e30"};
constexpr const char* kInts[] = {"1", "2", "3", "0", "-1"};

// Whether the program holds an op that backends evaluate within a ULP bound or by a library
// call (exact on the CPU, within CUDA's bound on a GPU): such a node makes its graph
// "transcendental". `composite`: the program does more than that one call on its inputs
// (Activation mish, LeakyReLU gelu, a derivative), so its result may cancel and no
// per-element ULP bound holds.
struct RecipeClass {
  bool transcendental = false;
  bool composite = false;
};

RecipeClass classify(const ir::OpDef& def, const ir::Attrs& attrs, int num_inputs) {
  ir::ScalarBuilder b(num_inputs);
  (void)def.recipe(b, attrs);
  RecipeClass c;
  int calls = 0, arithmetic = 0;
  for (ir::ScalarBuilder::Val v = 0; v < b.size(); ++v) {
    const ir::ScalarOp op = b.at(v).op;
    if (ir::is_transcendental(op) || ir::is_library_call(op)) ++calls;
    else if (op != ir::ScalarOp::input && op != ir::ScalarOp::constant && op != ir::ScalarOp::round_to) ++arithmetic;
  }
  c.transcendental = calls > 0;
  c.composite = calls > 1 || (calls == 1 && arithmetic > 0);
  return c;
}

}  // namespace

std::vector<std::string> fuzzable_ops() {
  std::vector<std::string> out;
  const ir::OpRegistry& r = ir::OpRegistry::global();
  for (const std::string& name : r.names())
    if (r.find(name)->recipe) out.push_back(name);
  return out;
}

namespace {

class Generator {
 public:
  explicit Generator(uint64_t seed) : rng_(seed) {}

  RandomGraph run() {
    RandomGraph out;
    out.transcendental = pick(10) < 3;
    const Shape base = base_shape();
    const int inputs = 1 + pick(3);
    for (int i = 0; i < inputs; ++i) add_input(fmt::format("x{}", i), base, float_dtype());
    if (pick(2) == 0) add_input("b", broadcast_shape(base), float_dtype());
    if (pick(8) == 0) add_input("d", base, DType::f64);
    if (!base.empty() && base[0] > 1 && pick(4) == 0) add_slice_of_input(base);

    const int ops = 1 + pick(8);
    for (int k = 0; k < ops; ++k) exact_op();
    if (out.transcendental) {
      transcendental_op(out);
      for (int k = pick(3); k > 0; --k) stable_op();
    }
    // The last value and up to two other computed values are outputs.
    b_.output(values_.back().v);
    for (int k = pick(3); k > 0 && computed_.size() > 1; --k) {
      const ValueRef v = computed_[pick(static_cast<int>(computed_.size()))];
      if (std::find(outputs_.begin(), outputs_.end(), v) == outputs_.end() && v != values_.back().v) {
        outputs_.push_back(v);
        b_.output(v);
      }
    }
    out.graph = b_.finish(true);
    // The cancelling op's inputs, found again after dce renumbers the nodes by a hint.
    constexpr const char* kCancelling = "__fuzz_cancelling__";
    if (cancelling_node_) out.graph.nodes.at(static_cast<size_t>(*cancelling_node_)).hints[kCancelling] = "1";
    engine::dce(out.graph);  // values no output reads never become kernels
    for (ir::Node& n : out.graph.nodes)
      if (n.hints.erase(kCancelling)) out.cancel_terms = n.inputs;
    return out;
  }

 private:
  struct Value {
    ValueRef v;
    Shape shape;
    DType dtype;
  };

  int pick(int n) { return static_cast<int>(rng_.next() % static_cast<uint64_t>(n)); }
  double unit() { return rng_.next_unit(); }

  Shape base_shape() {
    if (pick(40) == 0) return {(int64_t{1} << 20) + 3};
    static constexpr int64_t kExtents[] = {1, 2, 3, 7, 31, 5, 13, 17, 64, 4};
    Shape s(1 + pick(4));
    for (int64_t& e : s) e = kExtents[pick(10)];
    if (pick(25) == 0) s[pick(static_cast<int>(s.size()))] = 0;
    return s;
  }

  // `base` with some extents 1 or with leading dims dropped: numpy-broadcasts to base.
  Shape broadcast_shape(const Shape& base) {
    Shape s = base;
    if (pick(3) == 0 && s.size() > 1) s.erase(s.begin(), s.begin() + 1 + pick(static_cast<int>(s.size()) - 1));
    for (int64_t& e : s)
      if (pick(2) == 0) e = 1;
    return s;
  }

  DType float_dtype() {
    const int r = pick(7);
    return r < 3 ? DType::f32 : r < 5 ? DType::f16 : DType::bf16;
  }

  void add_input(const std::string& name, const Shape& shape, DType dtype) {
    values_.push_back({b_.input(name, {dtype, shape}), shape, dtype});
  }

  // A slice along axis 0 of a larger input: kernels read it at an offset.
  void add_slice_of_input(const Shape& base) {
    Shape big = base;
    const int64_t begin = 1 + pick(3);
    big[0] = base[0] + begin + pick(3);
    const DType dt = float_dtype();
    const ValueRef x = b_.input("s", {dt, big});
    const ValueRef sl = b_.op("slice_axis", {x}, {{"axis", "0"}, {"begin", std::to_string(begin)},
                                                  {"end", std::to_string(begin + base[0])}});
    push(sl, base, dt);
  }

  void push(ValueRef v, Shape shape, DType dtype) {
    values_.push_back({v, std::move(shape), dtype});
    computed_.push_back(v);
  }

  const Value& any_value() { return values_[pick(static_cast<int>(values_.size()))]; }
  // Prefer recent values, so chains grow long.
  const Value& recent_value() {
    const int n = static_cast<int>(values_.size());
    return values_[std::max(0, n - 1 - pick(3))];
  }

  static bool broadcastable(const Shape& a, const Shape& b) {
    for (size_t k = 0; k < std::min(a.size(), b.size()); ++k) {
      const int64_t x = a[a.size() - 1 - k], y = b[b.size() - 1 - k];
      if (x != y && x != 1 && y != 1) return false;
    }
    return true;
  }
  static Shape broadcast_result(const Shape& a, const Shape& b) {
    Shape r(std::max(a.size(), b.size()));
    for (size_t k = 0; k < r.size(); ++k) {
      const int64_t x = k < a.size() ? a[a.size() - 1 - k] : 1, y = k < b.size() ? b[b.size() - 1 - k] : 1;
      r[r.size() - 1 - k] = x == 1 ? y : x;
    }
    return r;
  }

  // `v` in dtype `dt` (an amp_cast when it differs).
  ValueRef as_dtype(const Value& v, DType dt) {
    if (v.dtype == dt) return v.v;
    return b_.op("Cast", {v.v}, {{"dtype", std::string(ir::mxnet_dtype_name(dt))}});
  }

  std::string scalar() {
    static constexpr const char* kScalars[] = {"0.5", "2", "-1.5", "3", "0", "1e-3", "100", "-0.25", "65504", "1e30"};
    return kScalars[pick(10)];
  }

  void unary(const Value& x, const std::string& op, std::map<std::string, std::string> attrs = {}) {
    push(b_.op(op, {x.v}, std::move(attrs)), x.shape, x.dtype);
  }

  // An exact op (its fused result must equal the interpreter's bit for bit): a cast, a
  // transpose, or any op of the registry whose recipe holds no transcendental.
  void exact_op() {
    const Value x = recent_value();
    switch (pick(8)) {
      case 0: {  // a cast, now and then to or from f64
        const DType to = pick(6) == 0 ? DType::f64 : float_dtype();
        // amp_cast leaves f64 alone (MXNet's rule), so casts to and from f64 are Casts.
        const char* op = pick(2) && to != DType::f64 && x.dtype != DType::f64 ? "amp_cast" : "Cast";
        push(b_.op(op, {x.v}, {{"dtype", std::string(ir::mxnet_dtype_name(to))}}), x.shape, to);
        return;
      }
      case 1: {  // a transpose: kernels store it through permuted strides
        if (x.shape.size() < 2) return unary(x, "_mul_scalar", {{"scalar", "0.5"}});
        std::vector<int64_t> perm(x.shape.size());
        for (size_t k = 0; k < perm.size(); ++k) perm[k] = static_cast<int64_t>(k);
        for (size_t k = perm.size(); k > 1; --k) std::swap(perm[k - 1], perm[pick(static_cast<int>(k))]);
        Shape out(perm.size());
        for (size_t k = 0; k < perm.size(); ++k) out[k] = x.shape[perm[k]];
        push(b_.op("transpose", {x.v}, {{"axes", fmt::format("({})", fmt::join(perm, ","))}}), out, x.dtype);
        return;
      }
      default:
        if (!registry_op(x, /*transcendental=*/false)) unary(x, "negative");
        return;
    }
  }

  // The graph's one transcendental op: an op of the registry whose recipe holds one.
  void transcendental_op(RandomGraph& out) {
    if (!registry_op(values_.back(), /*transcendental=*/true, &out)) unary(values_.back(), "exp");
  }

  // The ops of the registry with a recipe (fuzzable_ops()), in name order: exact or not is
  // decided per draw, from the recipe's program for the drawn attributes.
  static const std::vector<const ir::OpDef*>& recipe_ops() {
    static const std::vector<const ir::OpDef*> ops = [] {
      std::vector<const ir::OpDef*> v;
      for (const std::string& name : fuzzable_ops()) v.push_back(ir::OpRegistry::global().find(name));
      return v;
    }();
    return ops;
  }
  // Unary recipe ops without required attributes: what _backward_elementwise differentiates.
  static const std::vector<std::string>& plain_unary_ops() {
    static const std::vector<std::string> ops = [] {
      std::vector<std::string> v;
      for (const ir::OpDef* d : recipe_ops()) {
        const bool required =
            std::any_of(d->attrs.begin(), d->attrs.end(), [](const ir::AttrSpec& a) { return !a.default_value; });
        if (d->kind == ir::OpKind::elementwise && !d->num_inputs && d->inputs.size() == 1 && !required && !d->loss_head)
          v.push_back(d->name);
      }
      return v;
    }();
    return ops;
  }

  // Attribute strings for `def`, derived from its schema: a choice of a closed set, a value
  // of the kind's pool, a float dtype; optional attributes keep their default half the
  // time. The few attributes whose meaning the schema cannot say are generated here.
  std::map<std::string, std::string> random_attrs(const ir::OpDef& def) {
    std::map<std::string, std::string> a;
    for (const ir::AttrSpec& spec : def.attrs) {
      if (spec.default_value && pick(2)) continue;
      if (def.name == "_backward_elementwise" && spec.name == "fwd_op") {
        a[spec.name] = plain_unary_ops()[pick(static_cast<int>(plain_unary_ops().size()))];
        continue;
      }
      if (def.name == "_backward_elementwise" && spec.name == "wrt") {
        a.emplace(spec.name, "0");  // (assigning a literal trips GCC 12 -Wrestrict, bug 105329)
        continue;
      }
      switch (spec.kind) {
        case ir::AttrKind::Bool: a[spec.name] = pick(2) ? "True" : "False"; break;
        case ir::AttrKind::Int: a[spec.name] = kInts[pick(std::size(kInts))]; break;
        case ir::AttrKind::Float: a[spec.name] = scalar(); break;
        case ir::AttrKind::DType: a[spec.name] = std::string(ir::mxnet_dtype_name(float_dtype())); break;
        case ir::AttrKind::String:
          if (!spec.choices.empty()) a[spec.name] = spec.choices[pick(static_cast<int>(spec.choices.size()))];
          break;
        default: break;  // lists keep their default
      }
    }
    return a;
  }

  // One op of the registry on `x` (exact or transcendental as asked): random attributes,
  // other data inputs from the values so far (cast to x's dtype), parameter inputs new
  // variables of the types the op's inference asks for. Tries a few draws; false when none
  // fits (the caller adds a simple op instead).
  // With `out`, a composite transcendental op drawn sets out->cancels (and is remembered,
  // for RandomGraph::cancel_terms).
  bool registry_op(const Value& x, bool transcendental, RandomGraph* out = nullptr) {
    const std::vector<const ir::OpDef*>& ops = recipe_ops();
    const ir::OpDef* drawn = ops[pick(static_cast<int>(ops.size()))];
    for (int attempt = 0; attempt < 24; ++attempt) {
      const ir::OpDef& def = *drawn;
      const std::map<std::string, std::string> raw = random_attrs(def);
      // Attributes the op refuses (parsing, or its input count: add_n's num_args < 1) are
      // another attempt.
      ir::Attrs attrs;
      int n = 0, outputs = 0;
      RecipeClass rc;
      try {
        attrs = ir::parse_attrs(def, raw);
        if (!def.has_recipe(attrs)) continue;
        n = def.input_count(attrs);
        outputs = def.output_count(attrs);
        rc = classify(def, attrs, n);
      } catch (const Error&) {
        continue;
      }
      if (outputs < 1) continue;
      if (rc.transcendental != transcendental) {  // an op of the other phase: draw another
        drawn = ops[pick(static_cast<int>(ops.size()))];
        continue;
      }
      // Input 0 is x; other data inputs a value so far (later attempts: x again).
      std::vector<std::optional<Value>> chosen(static_cast<size_t>(n));
      ir::InferContext ctx{attrs, {}, std::vector<std::optional<ir::TensorType>>(static_cast<size_t>(outputs))};
      for (int i = 0; i < n; ++i) {
        const ir::InputSlot& slot = def.slot(static_cast<size_t>(i), attrs);
        if (i > 0 && (slot.role != ir::SlotRole::data || slot.index)) {
          ctx.inputs.push_back(std::nullopt);  // the op's inference says what it needs
          continue;
        }
        const Value v = i == 0 || pick(3) == 0 ? x : any_value();
        chosen[static_cast<size_t>(i)] = v;
        ctx.inputs.push_back(ir::TensorType{x.dtype, v.shape});
      }
      try {
        def.infer(ctx);
      } catch (const Error&) {
        continue;
      }
      const std::optional<ir::TensorType>& result = ctx.outputs.at(0);
      if (!result || !ir::is_float(result->dtype)) continue;
      bool typed = true;
      for (const std::optional<ir::TensorType>& t : ctx.inputs) typed &= t.has_value();
      if (!typed) continue;
      std::vector<ValueRef> inputs;
      for (int i = 0; i < n; ++i) {
        if (const std::optional<Value>& v = chosen[static_cast<size_t>(i)]) {
          inputs.push_back(as_dtype(*v, x.dtype));
        } else {
          const Shape& shape = ctx.inputs[static_cast<size_t>(i)]->shape;
          inputs.push_back(b_.input(fmt::format("p{}", params_++), *ctx.inputs[static_cast<size_t>(i)]));
          values_.push_back({inputs.back(), shape, ctx.inputs[static_cast<size_t>(i)]->dtype});
        }
      }
      const ValueRef made = b_.op_multi(def.name, std::move(inputs), raw).at(0);
      if (out && rc.composite) {
        out->cancels = true;
        cancelling_node_ = made.node;
      }
      push(made, result->shape, result->dtype);
      return true;
    }
    return false;
  }

  // Ops after the transcendental one that keep its relative error bounded.
  void stable_op() {
    const Value x = values_.back();
    switch (pick(4)) {
      case 0: return unary(x, "Activation", {{"act_type", "relu"}});
      case 1: return unary(x, "_mul_scalar", {{"scalar", "2.5"}});
      case 2: return unary(x, "clip", {{"a_min", "-0.5"}, {"a_max", "0.75"}});
      default: {
        const DType to = float_dtype();
        push(b_.op("Cast", {x.v}, {{"dtype", std::string(ir::mxnet_dtype_name(to))}}), x.shape, to);
      }
    }
  }

  runtime::SplitMix64 rng_;
  ir::GraphBuilder b_;
  std::vector<Value> values_;
  std::vector<ValueRef> computed_;
  std::vector<ValueRef> outputs_;
  int params_ = 0;
  std::optional<int32_t> cancelling_node_;  // the composite transcendental op, if drawn
};

}  // namespace

RandomGraph random_fusable_graph(uint64_t seed) {
  return with_context(fmt::format("random graph {}", seed), [&] { return Generator(seed).run(); });
}

double row_rounding_tolerance(DType dtype) {
  return dtype == DType::bf16 ? 0x1p-7 : dtype == DType::f16 ? 0x1p-10 : 1e-5;
}

std::optional<RowGraph> random_row_graph(uint64_t seed) {
  RandomGraph rg = random_fusable_graph(seed);
  if (rg.transcendental) return std::nullopt;
  ir::Graph& g = rg.graph;
  const auto v = std::find_if(g.outputs.begin(), g.outputs.end(), [&](ValueRef o) {
    const ir::TensorType& t = g.type(o);
    return !t.shape.empty() && t.shape.back() > 0 &&
           (t.dtype == DType::f32 || t.dtype == DType::f16 || t.dtype == DType::bf16);
  });
  if (v == g.outputs.end()) return std::nullopt;
  static constexpr const char* kRowOps[] = {"softmax", "log_softmax", "LayerNorm", "sum", "max", "mean"};
  RowGraph r;
  r.row_op = kRowOps[seed % std::size(kRowOps)];
  r.row_input = g.type(*v);
  const int64_t n = r.row_input.shape.back();
  return with_context(fmt::format("random row graph {}", seed), [&] {
    const auto add_op = [&](const std::string& op, std::vector<ValueRef> inputs,
                            const std::map<std::string, std::string>& attrs, const std::string& name) {
      ir::Node node;
      node.op = op;
      node.name = name;
      node.inputs = std::move(inputs);
      node.attrs = ir::parse_attrs(ir::OpRegistry::global().get(op), attrs);
      return ValueRef{g.add(std::move(node)), 0};
    };
    const auto add_param = [&](const std::string& name) {
      ir::Node node;
      node.op = ir::kVarOp;
      node.name = name;
      node.role = ir::VarRole::param;
      node.outputs = {{r.row_input.dtype, {n}}};
      return ValueRef{g.add(std::move(node)), 0};
    };
    ValueRef row;
    if (r.row_op == "LayerNorm")
      row = add_op("LayerNorm", {*v, add_param("row_gamma"), add_param("row_beta")}, {{"eps", "0.01"}}, "row");
    else if (r.row_op == "softmax" || r.row_op == "log_softmax")
      row = add_op(r.row_op, {*v}, {{"temperature", "1.5"}}, "row");
    else
      row = add_op(r.row_op, {*v}, {{"axis", "(-1,)"}}, "row");
    g.outputs.insert(g.outputs.begin(), add_op("_mul_scalar", {row}, {{"scalar", "0.5"}}, "after"));
    ir::infer_types(g);
    const double reference_sum_error = r.row_op == "softmax" || r.row_op == "log_softmax" ? n * 0x1p-24 : 0;
    r.tolerance = std::max(row_rounding_tolerance(r.row_input.dtype), reference_sum_error);
    r.graph = std::move(g);
    return std::optional<RowGraph>(std::move(r));
  });
}

}  // namespace ampfuse::fuzz
