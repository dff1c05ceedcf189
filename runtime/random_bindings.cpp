// Seeded random values for a graph's variables, shaped by what each variable feeds: weights
// scaled by their fan-in so activations stay O(1) through deep nets, BatchNorm variances
// positive, token ids below the vocabulary of the Embedding that reads them (also through
// reshapes and splits: Sockeye's `source` is split into a word id and two factor ids, each
// with its own vocabulary), and SoftmaxOutput's class labels below its class count.
#include "runtime/interpreter.h"

#include "ir/error.h"
#include "ir/op_registry.h"
#include "runtime/random.h"

#include <algorithm>
#include <cmath>
#include <optional>

namespace ampfuse::runtime {

namespace {

struct Use {
  int32_t node;
  size_t slot;
};
using Consumers = std::map<ir::ValueRef, std::vector<Use>>;

Consumers consumers_of(const ir::Graph& g) {
  Consumers c;
  for (int32_t i = 0; i < static_cast<int32_t>(g.nodes.size()); ++i)
    for (size_t k = 0; k < g.nodes[i].inputs.size(); ++k) c[g.nodes[i].inputs[k]].push_back({i, k});
  return c;
}

using Bound = std::optional<int64_t>;  // ids must be below it; nullopt: unconstrained

Bound tighter(Bound a, Bound b) {
  if (!a) return b;
  if (!b) return a;
  return std::min(*a, *b);
}

// The id bounds of one value: one for every element, and optionally one per equal part
// along `axis` when the value is split into parts that feed different embeddings.
struct IdBounds {
  Bound all;
  int64_t axis = -1;
  std::vector<Bound> parts;

  static IdBounds uniform(Bound b) {
    IdBounds r;
    r.all = b;
    return r;
  }
  Bound folded() const {
    Bound b = all;
    for (Bound p : parts) b = tighter(b, p);
    return b;
  }
  void merge(const IdBounds& o) {
    if (o.parts.empty()) {
      all = tighter(all, o.all);
    } else if (parts.empty()) {
      const Bound keep = all;
      *this = o;
      all = tighter(all, keep);
    } else if (axis == o.axis && parts.size() == o.parts.size()) {
      all = tighter(all, o.all);
      for (size_t k = 0; k < parts.size(); ++k) parts[k] = tighter(parts[k], o.parts[k]);
    } else {
      all = tighter(folded(), o.folded());
      parts.clear();
    }
  }
};

// Ops whose output holds the elements of their input, converted or rearranged: an id
// bound found downstream applies to the input too. Views and data movement pass on input
// 0, and every input of a variadic one (Concat's and stack's pieces: they all fill the
// one declared slot); a second declared slot only lends its shape (slice_like).
bool passes_ids_through(const ir::OpDef& def, size_t slot) {
  if (def.is_cast) return true;
  if (def.kind != ir::OpKind::view && def.kind != ir::OpKind::data_movement) return false;
  const bool variadic = def.num_inputs && def.inputs.size() == 1;
  return slot == 0 || variadic;
}

class IdBoundFinder {
 public:
  IdBoundFinder(const ir::Graph& g) : g_(g), consumers_(consumers_of(g)) {}

  IdBounds of(ir::ValueRef v) {
    if (auto it = memo_.find(v); it != memo_.end()) return it->second;
    IdBounds b;
    if (auto it = consumers_.find(v); it != consumers_.end())
      for (const Use& u : it->second) b.merge(through(v, u));
    memo_[v] = b;
    return b;
  }

  const std::vector<Use>& uses(ir::ValueRef v) const {
    static const std::vector<Use> none;
    auto it = consumers_.find(v);
    return it == consumers_.end() ? none : it->second;
  }

 private:
  IdBounds through(ir::ValueRef v, const Use& u) {
    const ir::Node& n = g_.nodes[u.node];
    const ir::OpDef* def = ir::OpRegistry::global().find(n.op);
    if (!def) return {};
    if (def->table_index && u.slot == def->table_index->slot)
      return IdBounds::uniform(n.attrs.get_int(def->table_index->size_attr));
    if (n.op == "SoftmaxOutput" && u.slot == 1) return IdBounds::uniform(softmax_output_classes(n));
    if (!passes_ids_through(*def, u.slot)) return {};
    // SliceChannel's outputs are equal parts along `axis` (its shape rule): each part's
    // bound holds for its share of the input.
    if (n.op == "SliceChannel" && n.outputs.size() > 1) return split_bounds(v, u);
    IdBounds b;
    for (size_t k = 0; k < n.outputs.size(); ++k) b.all = tighter(b.all, of({u.node, static_cast<int32_t>(k)}).folded());
    return b;
  }

  // SoftmaxOutput's class labels are below its class count (the softmax's width: axis 1
  // with multi_output, else the elements per label); a label of the data's shape holds
  // probabilities and is left unbounded.
  Bound softmax_output_classes(const ir::Node& n) const {
    if (n.inputs.size() < 2 || n.outputs.empty()) return std::nullopt;
    const ir::Shape& data = g_.type(n.inputs[0]).shape;
    const ir::Shape& label = g_.type(n.inputs[1]).shape;
    if (label == data) return std::nullopt;
    if (n.attrs.has("multi_output") && n.attrs.get_bool("multi_output")) return data.size() > 1 ? Bound(data[1]) : std::nullopt;
    const int64_t labels = ir::num_elements(label);
    return labels > 0 ? Bound(ir::num_elements(data) / labels) : std::nullopt;
  }

  IdBounds split_bounds(ir::ValueRef v, const Use& u) {
    const ir::Node& n = g_.nodes[u.node];
    IdBounds b;
    b.axis = n.attrs.has("axis") ? n.attrs.get_int("axis") : 1;
    const size_t rank = g_.nodes[v.node].outputs.size() > static_cast<size_t>(v.index) ? g_.type(v).shape.size() : 0;
    if (b.axis < 0) b.axis += static_cast<int64_t>(rank);
    for (size_t k = 0; k < n.outputs.size(); ++k) b.parts.push_back(of({u.node, static_cast<int32_t>(k)}).folded());
    if (b.axis < 0 || static_cast<size_t>(b.axis) >= rank) b = IdBounds::uniform(b.folded());
    return b;
  }

  const ir::Graph& g_;
  Consumers consumers_;
  std::map<ir::ValueRef, IdBounds> memo_;
};

// Integers nothing bounds: small non-negative values that fit every integer type.
constexpr int64_t kUnboundedIdLimit = 128;

void fill_ids(Tensor& t, const IdBounds& bounds, SplitMix64& rng) {
  const Shape& s = t.shape();
  int64_t inner = 1, extent = 1;
  bool per_part = !bounds.parts.empty();
  if (per_part) {
    extent = s[bounds.axis];
    for (size_t d = bounds.axis + 1; d < s.size(); ++d) inner *= s[d];
    per_part = extent % static_cast<int64_t>(bounds.parts.size()) == 0;
  }
  const int64_t part_len = per_part ? extent / static_cast<int64_t>(bounds.parts.size()) : 1;
  const int64_t type_limit = t.dtype() == DType::boolean ? 2 : kUnboundedIdLimit;
  for (int64_t i = 0; i < t.size(); ++i) {
    Bound b = per_part ? tighter(bounds.all, bounds.parts[(i / inner) % extent / part_len]) : bounds.folded();
    const int64_t limit = std::max<int64_t>(1, b.value_or(is_float(t.dtype()) ? kUnboundedIdLimit : type_limit));
    t.set_f64(i, static_cast<double>(rng.next_below(static_cast<uint64_t>(limit))));
  }
}

void fill_uniform(Tensor& t, double lo, double hi, SplitMix64& rng) {
  for (int64_t i = 0; i < t.size(); ++i) t.set_f64(i, lo + (hi - lo) * rng.next_unit());
}

// The number of inputs each output of the consuming op sums over, for weight scaling.
int64_t fan_in(const ir::Graph& g, const ir::Node& var, const std::vector<Use>& uses) {
  if (!uses.empty()) {
    const ir::Node& consumer = g.nodes[uses.front().node];
    // The fused RNN's weights are one flat vector; each gate sums over the state.
    if (consumer.op == "RNN" && consumer.attrs.has("state_size")) return consumer.attrs.get_int("state_size");
  }
  const Shape& s = var.outputs[0].shape;
  int64_t n = 1;
  for (size_t d = 1; d < s.size(); ++d) n *= s[d];
  return std::max<int64_t>(n, 1);
}

// The slots value v ends up in, looking through casts (amp_cast, Cast, amp_multicast): a
// converted model reads its weights and statistics through casts, and they are scaled as
// what the slot behind the cast takes.
std::vector<Use> slots_through_casts(const ir::Graph& g, const IdBoundFinder& ids, ir::ValueRef v) {
  std::vector<Use> out;
  for (const Use& u : ids.uses(v)) {
    const ir::OpDef* def = ir::OpRegistry::global().find(g.nodes[u.node].op);
    const bool cast = def && (def->is_cast || def->is_multicast);
    if (!cast) {
      out.push_back(u);
      continue;
    }
    const int32_t output = def->is_multicast ? static_cast<int32_t>(u.slot) : 0;
    for (const Use& w : slots_through_casts(g, ids, {u.node, output})) out.push_back(w);
  }
  return out;
}

bool feeds_slot(const ir::Graph& g, const std::vector<Use>& uses, std::string_view slot_name) {
  for (const Use& u : uses) {
    const ir::OpDef* def = ir::OpRegistry::global().find(g.nodes[u.node].op);
    if (def && !def->inputs.empty() && def->slot(u.slot, g.nodes[u.node].attrs).name == slot_name) return true;
  }
  return false;
}

}  // namespace

Bindings random_bindings(const ir::Graph& g, uint64_t seed, const Bindings& given) {
  Bindings out = given;
  IdBoundFinder ids(g);
  for (int32_t i = 0; i < static_cast<int32_t>(g.nodes.size()); ++i) {
    const ir::Node& n = g.nodes[i];
    if (!n.is_var() || given.count(n.name)) continue;
    if (n.outputs.empty()) fail("variable '{}' has no type: give its shape so it can be generated", n.name);
    SplitMix64 rng(SplitMix64::mix(seed ^ SplitMix64::mix(fnv1a64(n.name))));
    Tensor t(n.outputs[0]);
    const IdBounds bounds = ids.of({i, 0});
    const std::vector<Use> uses = slots_through_casts(g, ids, {i, 0});
    if (!is_float(t.dtype()) || bounds.folded()) {
      fill_ids(t, bounds, rng);
    } else if (n.role == ir::VarRole::input) {
      fill_uniform(t, -1.0, 1.0, rng);
    } else if (feeds_slot(g, uses, "moving_var")) {
      fill_uniform(t, 0.5, 1.5, rng);
    } else {
      const double scale = 1.0 / std::sqrt(static_cast<double>(fan_in(g, n, uses)));
      fill_uniform(t, -scale, scale, rng);
    }
    out.emplace(n.name, std::move(t));
  }
  return out;
}

}  // namespace ampfuse::runtime
