#include "engine/planning/fusion_plan.h"

#include "ir/error.h"
#include "ir/op_registry.h"

#include <algorithm>
#include <map>
#include <optional>
#include <queue>
#include <set>

namespace ampfuse::engine {

using ir::Graph;
using ir::Node;
using ir::ValueRef;

AccessMap compose_maps(const AccessMap& inner, const AccessMap& outer) {
  AccessMap r;
  for (size_t k = 0; k < inner.iter_dim.size(); ++k) {
    const int32_t j = inner.iter_dim[k];
    if (j < 0) {
      r.iter_dim.push_back(-1), r.scale.push_back(0), r.offset.push_back(inner.offset[k]);
    } else if (outer.iter_dim[j] < 0) {
      r.iter_dim.push_back(-1), r.scale.push_back(0), r.offset.push_back(inner.offset[k] + inner.scale[k] * outer.offset[j]);
    } else {
      r.iter_dim.push_back(outer.iter_dim[j]);
      r.scale.push_back(inner.scale[k] * outer.scale[j]);
      r.offset.push_back(inner.offset[k] + inner.scale[k] * outer.offset[j]);
    }
  }
  return r;
}

bool is_permutation(const AccessMap& a, size_t out_rank) {
  if (a.iter_dim.size() != out_rank) return false;
  std::vector<bool> seen(out_rank, false);
  for (size_t k = 0; k < a.iter_dim.size(); ++k) {
    const int32_t j = a.iter_dim[k];
    if (j < 0 || static_cast<size_t>(j) >= out_rank || seen[j] || a.scale[k] != 1 || a.offset[k] != 0) return false;
    seen[j] = true;
  }
  return true;
}

ir::Shape operand_shape(const Graph& g, int32_t n, size_t i) {
  const Node& node = g.nodes[n];
  const ir::Shape& in = g.type(node.inputs[i]).shape;
  const ir::OpDef& def = ir::OpRegistry::global().get(node.op);
  // broadcast_view first: few ops have one, and fusion_role looks the op up again.
  if (def.broadcast_view && fusion_role(node) == FusionRole::elementwise)
    return def.broadcast_view(node.attrs, i, in, node.outputs[0].shape);
  return in;
}

bool keeps_row_major_order(const AccessMap& map, const ir::Shape& shape) {
  int32_t last = -1;
  for (size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] == 1) continue;  // extent-1 dims do not change row-major order
    if (map.iter_dim[k] <= last) return false;
    last = map.iter_dim[k];
  }
  return true;
}

namespace {

// No tensor dimension is walked backwards (every scale >= 0).
bool reads_forward(const AccessMap& map) {
  return std::none_of(map.scale.begin(), map.scale.end(), [](int64_t s) { return s < 0; });
}

}  // namespace

ir::DType node_compute_type(const Graph& g, int32_t n) {
  const Node& node = g.nodes[n];
  std::vector<ir::DType> dtypes;
  for (const ir::TensorType& t : node.outputs) dtypes.push_back(t.dtype);
  // A remap only moves values: its compute type just has to hold them exactly.
  if (fusion_role(node) != FusionRole::remap)
    for (ValueRef in : node.inputs) dtypes.push_back(g.type(in).dtype);
  return ir::compute_type(dtypes);
}

FusionRole fusion_role(const Node& n) {
  const ir::OpDef& def = ir::OpRegistry::global().get(n.op);
  if (def.kind == ir::OpKind::view) return FusionRole::view;
  if (!def.fusable) return FusionRole::external;
  if (def.has_recipe(n.attrs)) return FusionRole::elementwise;
  if (def.remap_access) return FusionRole::remap;
  return FusionRole::external;
}

AccessMap input_access(const Graph& g, int32_t n, size_t i) {
  const Node& node = g.nodes[n];
  const ir::Shape& out = node.outputs.at(0).shape;
  const ir::Shape& in = g.type(node.inputs.at(i)).shape;
  switch (fusion_role(node)) {
    case FusionRole::elementwise: return AccessMap::broadcast(operand_shape(g, n, i), out);
    case FusionRole::remap: return ir::OpRegistry::global().get(node.op).remap_access(node.attrs, in, out);
    default: fail("node '{}' ({}) is not fused, so it has no input access map", node.name, node.op);
  }
}

namespace {

// `values` without repeats, in order.
std::vector<ValueRef> sorted_unique(std::vector<ValueRef> values) {
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  return values;
}

// PlannerOptions::max_kernel_transcendental_cost's weights: tanh (a series and an expm1
// path), erf (eight series) and pow (in f64) cost LLVM two to three times what exp does.
int compile_cost_in_exps(ir::ScalarOp op) {
  return op == ir::ScalarOp::tanh || op == ir::ScalarOp::erf || op == ir::ScalarOp::pow ? 2 : 1;
}

// The work of fused node n as a kernel of its own, as lower_kernel emits it: its recipe's
// instructions, a rounding for each output stored in a type other than the compute type,
// and its inputs.
KernelWork node_work(const Graph& g, int32_t n) {
  const Node& node = g.nodes[n];
  KernelWork w;
  w.inputs = static_cast<int>(sorted_unique(node.inputs).size());
  if (fusion_role(node) == FusionRole::remap) return w;  // only the indexing changes
  if (fusion_role(node) == FusionRole::external) return w;  // a row kernel's centre (row_fusion.h): no recipe
  ir::ScalarBuilder b(static_cast<int>(node.inputs.size()));
  const ir::ScalarProgram p = b.finish(ir::OpRegistry::global().get(node.op).recipe(b, node.attrs));
  for (const ir::ScalarInstr& instr : p.instrs) {
    if (instr.op == ir::ScalarOp::input || instr.op == ir::ScalarOp::constant) continue;
    if (!ir::is_transcendental(instr.op)) ++w.instructions;
    else w.transcendental_cost += compile_cost_in_exps(instr.op);
  }
  const ir::DType compute = node_compute_type(g, n);
  for (const ir::TensorType& t : node.outputs) w.instructions += t.dtype != compute;
  return w;
}

}  // namespace

bool draws_random_bits(const Graph& g, int32_t n) {
  const Node& node = g.nodes[n];
  if (fusion_role(node) != FusionRole::elementwise) return false;
  ir::ScalarBuilder b(static_cast<int>(node.inputs.size()));
  return ir::uses_element_index(b.finish(ir::OpRegistry::global().get(node.op).recipe(b, node.attrs)));
}

KernelWork kernel_work(const Graph& g, const FusedKernel& k) {
  KernelWork w;
  for (int32_t n : k.nodes) {
    const KernelWork nw = node_work(g, n);
    w.transcendental_cost += nw.transcendental_cost, w.instructions += nw.instructions;
  }
  std::vector<ValueRef> loads;
  for (const KernelOperand& op : k.inputs) loads.push_back(op.value);
  w.inputs = static_cast<int>(sorted_unique(std::move(loads)).size());
  return w;
}

std::vector<KernelOperand> kernel_loads(const Graph& g, const std::vector<int32_t>& nodes,
                                        const std::vector<AccessMap>& node_maps) {
  std::vector<KernelOperand> loads;
  for (size_t idx = 0; idx < nodes.size(); ++idx) {
    const int32_t n = nodes[idx];
    const Node& node = g.nodes[n];
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (std::find(nodes.begin(), nodes.end(), node.inputs[i].node) != nodes.end()) continue;
      KernelOperand op{node.inputs[i], operand_shape(g, n, i), compose_maps(input_access(g, n, i), node_maps[idx])};
      if (std::find(loads.begin(), loads.end(), op) == loads.end()) loads.push_back(op);
    }
  }
  return loads;
}

namespace {

// Builds groups greedily in graph order. Each node lives in one step; a fusable node joins
// the group of one of its producers when the maps agree, the group stays within the caps of
// PlannerOptions and no cycle between steps appears.
//
// Steps form a graph (`deps`: the steps a step reads; `users`: the steps that read it) that
// the planner keeps acyclic. Joining and merging ask whether one step reaches another;
// path_exists answers that exactly while visiting only the neighbourhood of the two ends,
// so planning costs about linear time in the graph's size (bench/planner_bench.cpp).
class Planner {
 public:
  Planner(const Graph& g, const PlannerOptions& opts)
      : g_(g), opts_(opts), step_of_(g.nodes.size(), -1), node_map_(g.nodes.size()) {
    if (!opts.backward_nodes.empty() && opts.backward_nodes.size() != g.nodes.size())
      fail("internal: PlannerOptions::backward_nodes has {} entries for {} nodes", opts.backward_nodes.size(),
           g.nodes.size());
  }

  Plan run() {
    for (int32_t n = 0; n < static_cast<int32_t>(g_.nodes.size()); ++n) {
      const Node& node = g_.nodes[n];
      if (node.is_var()) continue;
      const FusionRole role = fusion_role(node);
      // A remap of 64-bit integers would pass through the f64 compute type and lose bits
      // above 2^53: such a node runs as an external op.
      const bool exact_remap = role != FusionRole::remap || node.outputs[0].dtype != ir::DType::i64;
      // A remap that reads backwards (a slice with a negative step) would be a negative stride,
      // which the kernel generators refuse (codegen/kernel_spec.cpp): external too.
      const bool forward_remap = role != FusionRole::remap || reads_forward(input_access(g_, n, 0));
      if ((role == FusionRole::elementwise || role == FusionRole::remap) && exact_remap && forward_remap) {
        const KernelWork work = node_work(g_, n);
        if (!opts_.fuse || !try_join(n, work)) start_group(n, work);
      } else {
        place(n, add_step(Step{role == FusionRole::view ? Kind::view : Kind::external}));
      }
    }
    return finish();
  }

 private:
  enum class Kind { fused, external, view };
  struct Step {
    Kind kind;
    ir::Shape iteration{};               // fused only
    ir::DType compute = ir::DType::f32;  // fused only
    std::vector<int32_t> nodes{};        // in joining order; make_kernel sorts them
    std::set<int32_t> deps{};            // steps whose values this step reads
    std::set<int32_t> users{};           // steps that read this step's values
    // Fused: the values it loads (sorted) and its work, kept within opts_'s caps.
    std::vector<ValueRef> loads{};
    KernelWork work{};
    bool merged_away = false;  // its nodes moved into another group
    bool backward = false;     // its nodes compute the backward pass (PlannerOptions::backward_nodes)
  };

  // One side of path_exists: a breadth-first walk along `deps` or `users` that crosses one
  // edge per call, so that both sides advance at the same pace.
  struct Frontier {
    std::set<int32_t> Step::*edges;
    std::vector<uint32_t> reached{};  // == the search's number once this side reached the step
    std::vector<int32_t> queue{};     // the steps reached, in order
    size_t expanded = 0;              // queue[0, expanded) have had their edges taken
    std::set<int32_t>::const_iterator edge{}, edge_end{};

    void restart() { queue.clear(), expanded = 0, edge = edge_end = {}; }
    // The step across the next edge not yet crossed, or nullopt when every step this side
    // reached has had all its edges crossed.
    std::optional<int32_t> cross_edge(const std::vector<Step>& steps) {
      while (edge == edge_end) {
        if (expanded == queue.size()) return std::nullopt;
        const std::set<int32_t>& adjacent = steps[queue[expanded++]].*edges;
        edge = adjacent.begin(), edge_end = adjacent.end();
      }
      return *edge++;
    }
  };

  bool is_backward(int32_t n) const { return !opts_.backward_nodes.empty() && opts_.backward_nodes[n]; }

  int32_t producer_step(ValueRef v) const { return g_.nodes[v.node].is_var() ? -1 : step_of_[v.node]; }

  int32_t add_step(Step step) {
    steps_.push_back(std::move(step));
    downstream_.reached.push_back(0);
    upstream_.reached.push_back(0);
    return static_cast<int32_t>(steps_.size() - 1);
  }

  // Puts node n into step s, with the edges its inputs add between steps.
  void place(int32_t n, int32_t s) {
    steps_[s].backward = is_backward(n);
    steps_[s].nodes.push_back(n);
    step_of_[n] = s;
    for (ValueRef in : g_.nodes[n].inputs) {
      const int32_t p = producer_step(in);
      if (p >= 0 && p != s) steps_[s].deps.insert(p), steps_[p].users.insert(s);
    }
  }

  void start_group(int32_t n, const KernelWork& work) {
    const ir::Shape& shape = g_.nodes[n].outputs.at(0).shape;
    node_map_[n] = AccessMap::identity(shape.size());
    Step group{Kind::fused, shape, node_compute_type(g_, n)};
    group.loads = sorted_unique(g_.nodes[n].inputs);
    group.work = work;
    place(n, add_step(std::move(group)));
  }

  // Whether parts of work `a` and `b` may become one kernel of work `both`: no count may
  // grow past its cap. A count that one part passes alone (a node can: Activation mish's
  // transcendental cost is 4) may stay where it is, so that such a node still takes in the
  // nodes that add nothing to it.
  bool may_combine(const KernelWork& a, const KernelWork& b, const KernelWork& both) const {
    const auto fits = [](int count, int cap, int a_count, int b_count) { return count <= std::max({cap, a_count, b_count}); };
    return fits(both.transcendental_cost, opts_.max_kernel_transcendental_cost, a.transcendental_cost,
                b.transcendental_cost) &&
           fits(both.instructions, opts_.max_kernel_instructions, a.instructions, b.instructions) &&
           fits(both.inputs, opts_.max_kernel_inputs, a.inputs, b.inputs);
  }

  // Whether a step of `sinks` reads, directly or through other steps, a step of `sources`
  // (a step in both counts), along paths that do not pass through `avoid`.
  //
  // Two breadth-first searches, down from the sources along `users` and up from the sinks
  // along `deps`, take one edge each in turn, and a path exists exactly when they meet.
  // When either side runs out of edges first, it has seen everything reachable from its
  // end without meeting the other, so there is no path. The search thus costs at most
  // about twice the edges of the smaller side: a step with a short past (few ancestors)
  // or a short future (few readers yet) answers at once, however large the graph. The
  // answer is exact, so plans do not depend on how far the search had to look.
  bool path_exists(std::initializer_list<int32_t> sources, const std::vector<int32_t>& sinks, int32_t avoid) {
    ++search_;
    downstream_.restart(), upstream_.restart();
    for (int32_t s : sources) downstream_.reached[s] = search_, downstream_.queue.push_back(s);
    for (int32_t s : sinks) {
      if (downstream_.reached[s] == search_) return true;
      upstream_.reached[s] = search_, upstream_.queue.push_back(s);
    }
    while (true) {
      for (Frontier* side : {&downstream_, &upstream_}) {
        const Frontier& other = side == &downstream_ ? upstream_ : downstream_;
        const std::optional<int32_t> s = side->cross_edge(steps_);
        if (!s) return false;
        if (*s == avoid || side->reached[*s] == search_) continue;
        if (other.reached[*s] == search_) return true;
        side->reached[*s] = search_, side->queue.push_back(*s);
      }
    }
  }

  // The map node n must be computed under to read its input i as that input's producer,
  // in the same kernel, computes it (under node_map_ of the producer), or nullopt when the
  // access is not a permutation (a broadcast or slice of an inner value).
  std::optional<AccessMap> map_reading(int32_t n, size_t i) const {
    const size_t out_rank = g_.nodes[n].outputs[0].shape.size();
    const AccessMap a = input_access(g_, n, i);
    if (!is_permutation(a, out_rank)) return std::nullopt;
    const AccessMap& mv = node_map_[g_.nodes[n].inputs[i].node];
    // a maps output dim a.iter_dim[k] to input dim k, so output dim a.iter_dim[k] runs
    // under the map of input dim k.
    AccessMap m = AccessMap::identity(out_rank);
    for (size_t k = 0; k < a.iter_dim.size(); ++k) m.iter_dim[a.iter_dim[k]] = mv.iter_dim[k];
    return m;
  }

  // The map node n must be computed under to read group `s`'s values consistently, or
  // nullopt when no such map exists.
  std::optional<AccessMap> required_map(int32_t n, int32_t s) const {
    const Node& node = g_.nodes[n];
    const size_t out_rank = node.outputs[0].shape.size();
    std::optional<AccessMap> result;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (producer_step(node.inputs[i]) != s) continue;
      const std::optional<AccessMap> m = map_reading(n, i);
      if (!m || (result && *result != *m)) return std::nullopt;
      result = m;
    }
    if (!result) return std::nullopt;
    // The node's output extents must be the iteration extents its map names.
    const ir::Shape& it = steps_[s].iteration;
    for (size_t j = 0; j < out_rank; ++j)
      if (node.outputs[0].shape[j] != it[result->iter_dim[j]]) return std::nullopt;
    for (const auto& t : node.outputs)
      if (t.shape != node.outputs[0].shape) return std::nullopt;
    return result;
  }

  bool try_join(int32_t n, const KernelWork& n_work) {
    const Node& node = g_.nodes[n];
    std::vector<int32_t> candidates, producers;
    for (ValueRef in : node.inputs) {
      const int32_t s = producer_step(in);
      if (s < 0 || std::find(producers.begin(), producers.end(), s) != producers.end()) continue;
      producers.push_back(s);
      if (steps_[s].kind == Kind::fused) candidates.push_back(s);
    }
    const ir::DType compute = node_compute_type(g_, n);
    const bool random = draws_random_bits(g_, n);
    for (int32_t s : candidates) {
      if (steps_[s].compute != compute || steps_[s].backward != is_backward(n)) continue;
      std::optional<AccessMap> m = required_map(n, s);
      if (!m || (random && !keeps_row_major_order(*m, node.outputs[0].shape))) continue;
      std::vector<ValueRef> loads = steps_[s].loads;
      for (ValueRef in : node.inputs)
        if (producer_step(in) != s) loads.push_back(in);
      loads = sorted_unique(std::move(loads));
      const KernelWork work{steps_[s].work.transcendental_cost + n_work.transcendental_cost,
                            steps_[s].work.instructions + n_work.instructions, static_cast<int>(loads.size())};
      if (!may_combine(steps_[s].work, n_work, work)) continue;
      // Inside s, n would close a cycle if another step it reads already reads s.
      std::vector<int32_t> others;
      for (int32_t p : producers)
        if (p != s) others.push_back(p);
      if (path_exists({s}, others, -1)) continue;
      node_map_[n] = *m;
      steps_[s].loads = std::move(loads);
      steps_[s].work = work;
      place(n, s);
      // n may also read other groups under the same map (two casts feeding one multiply):
      // fold them in, so that leaves started on their own do not stay separate kernels.
      for (int32_t other : candidates)
        if (other != s && steps_[other].iteration == steps_[s].iteration && steps_[other].compute == compute &&
            required_map(n, other) == m)
          try_merge(s, other);
      return true;
    }
    return false;
  }

  // Moves group `from` into group `into`, which reads it, unless that closes a cycle: a
  // path from -> X -> ... -> into through a third step X.
  //
  //     from ------------> into          merged, X would both read the group
  //       \               ^              and be read by it
  //        `-> X -> ... -'
  //
  // (A path the other way, into -> ... -> from, would already be a cycle with the edge
  // from -> into, and the step graph has none.) Paths through `into` itself need no look:
  // they would be such cycles too.
  void try_merge(int32_t into, int32_t from) {
    if (steps_[into].backward != steps_[from].backward) return;
    std::vector<ValueRef> loads;
    for (const std::vector<ValueRef>* group_loads : {&steps_[into].loads, &steps_[from].loads})
      for (ValueRef v : *group_loads)
        if (const int32_t p = producer_step(v); p != into && p != from) loads.push_back(v);
    loads = sorted_unique(std::move(loads));
    const KernelWork work{steps_[into].work.transcendental_cost + steps_[from].work.transcendental_cost,
                          steps_[into].work.instructions + steps_[from].work.instructions,
                          static_cast<int>(loads.size())};
    if (!may_combine(steps_[into].work, steps_[from].work, work)) return;
    // A value has one map in a kernel, so every read between the groups must find its value
    // computed under the map the reader needs. A node of `from` may read one value of
    // `into` as it is and another transposed (x <= transpose(x)): each group alone agrees,
    // the merge would not.
    for (const auto& [reader, producer] : {std::pair{into, from}, std::pair{from, into}})
      for (int32_t n : steps_[reader].nodes)
        for (size_t i = 0; i < g_.nodes[n].inputs.size(); ++i)
          if (producer_step(g_.nodes[n].inputs[i]) == producer && map_reading(n, i) != node_map_[n]) return;
    std::vector<int32_t> into_reads;
    for (int32_t d : steps_[into].deps)
      if (d != from) into_reads.push_back(d);
    if (path_exists({from}, into_reads, into)) return;
    Step& a = steps_[into];
    Step& b = steps_[from];
    a.loads = std::move(loads);
    a.work = work;
    for (int32_t n : b.nodes) step_of_[n] = into;
    a.nodes.insert(a.nodes.end(), b.nodes.begin(), b.nodes.end());
    for (int32_t d : b.deps) {
      steps_[d].users.erase(from);
      if (d != into) steps_[d].users.insert(into), a.deps.insert(d);
    }
    for (int32_t u : b.users) {
      steps_[u].deps.erase(from);
      if (u != into) steps_[u].deps.insert(into), a.users.insert(u);
    }
    b = Step{Kind::fused};
    b.merged_away = true;
  }

  // `escapes` (indexed by value_index): whether a value is read outside its producer's
  // step or by the graph. Those are the values a kernel stores.
  FusedKernel make_kernel(const Step& s, const std::vector<bool>& escapes) const {
    FusedKernel k;
    k.iteration = s.iteration;
    k.compute = s.compute;
    k.nodes = s.nodes;
    // Graph order inside the kernel: the lowering evaluates nodes in this order.
    std::sort(k.nodes.begin(), k.nodes.end());
    for (int32_t n : k.nodes) k.node_maps.push_back(node_map_[n]);
    k.inputs = kernel_loads(g_, k.nodes, k.node_maps);
    for (size_t idx = 0; idx < k.nodes.size(); ++idx) {
      const int32_t n = k.nodes[idx];
      for (size_t o = 0; o < g_.nodes[n].outputs.size(); ++o)
        if (escapes[value_index_[n] + o])
          k.outputs.push_back({{n, static_cast<int32_t>(o)}, g_.nodes[n].outputs[o].shape, k.node_maps[idx]});
    }
    return k;
  }

  // See make_kernel: one pass over the graph once every node has its final step.
  std::vector<bool> escaping_values() {
    value_index_.resize(g_.nodes.size());
    size_t values = 0;
    for (size_t n = 0; n < g_.nodes.size(); ++n) value_index_[n] = values, values += g_.nodes[n].outputs.size();
    std::vector<bool> escapes(values, false);
    for (ValueRef v : g_.outputs) escapes[value_index_[v.node] + v.index] = true;
    for (size_t m = 0; m < g_.nodes.size(); ++m)
      if (!g_.nodes[m].is_var())
        for (ValueRef in : g_.nodes[m].inputs)
          if (producer_step(in) != step_of_[m]) escapes[value_index_[in.node] + in.index] = true;
    return escapes;
  }

  Plan finish() {
    const std::vector<bool> escapes = escaping_values();
    // Steps in dependency order (Kahn's algorithm, lowest index first for stable output),
    // forward steps before backward ones (no forward step reads a backward one, so all of
    // them are ready before the first backward step has to run).
    std::vector<size_t> pending(steps_.size());
    const auto later = [&](int32_t a, int32_t b) {
      return std::pair(steps_[a].backward, a) > std::pair(steps_[b].backward, b);
    };
    std::priority_queue<int32_t, std::vector<int32_t>, decltype(later)> ready(later);
    size_t alive = 0;
    for (size_t s = 0; s < steps_.size(); ++s) {
      if (steps_[s].merged_away) continue;
      ++alive;
      pending[s] = steps_[s].deps.size();
      if (pending[s] == 0) ready.push(static_cast<int32_t>(s));
    }
    Plan plan;
    while (!ready.empty()) {
      const int32_t s = ready.top();
      ready.pop();
      const Step& step = steps_[s];
      switch (step.kind) {
        case Kind::fused: plan.steps.emplace_back(make_kernel(step, escapes)); break;
        case Kind::external: plan.steps.emplace_back(ExternalStep{step.nodes[0]}); break;
        case Kind::view: plan.steps.emplace_back(ViewStep{step.nodes[0]}); break;
      }
      for (int32_t u : step.users)
        if (--pending[u] == 0) ready.push(u);
    }
    if (plan.steps.size() != alive) fail("internal: the fusion plan has a cycle");
    return plan;
  }

  const Graph& g_;
  PlannerOptions opts_;
  std::vector<int32_t> step_of_;
  std::vector<AccessMap> node_map_;  // fused nodes: the map their outputs are computed under
  std::vector<size_t> value_index_;  // node -> index of its output 0 among all values
  std::vector<Step> steps_;
  Frontier downstream_{&Step::users}, upstream_{&Step::deps};  // path_exists's two sides
  uint32_t search_ = 0;                                         // path_exists calls so far
};

}  // namespace

std::string value_name(const Graph& g, ValueRef v) {
  const Node& n = g.nodes[v.node];
  return v.index == 0 ? "%" + n.name : fmt::format("%{}:{}", n.name, v.index);
}

Plan plan_fusion(const Graph& g, const PlannerOptions& opts) { return Planner(g, opts).run(); }

int32_t step_node(const PlanStep& step) {
  return std::holds_alternative<ExternalStep>(step) ? std::get<ExternalStep>(step).node : std::get<ViewStep>(step).node;
}

std::vector<ValueRef> step_reads(const ir::Graph& g, const PlanStep& step) {
  if (const auto* k = std::get_if<FusedKernel>(&step)) {
    std::vector<ValueRef> reads;
    for (const KernelOperand& op : k->inputs) reads.push_back(op.value);
    return reads;
  }
  return g.nodes[step_node(step)].inputs;
}

std::vector<ValueRef> step_writes(const ir::Graph& g, const PlanStep& step) {
  std::vector<ValueRef> writes;
  if (const auto* k = std::get_if<FusedKernel>(&step)) {
    for (const KernelOperand& op : k->outputs) writes.push_back(op.value);
    return writes;
  }
  const int32_t n = step_node(step);
  for (size_t o = 0; o < g.nodes[n].outputs.size(); ++o) writes.push_back({n, static_cast<int32_t>(o)});
  return writes;
}

std::vector<std::vector<ValueRef>> values_dead_after(const ir::Graph& g, const Plan& p) {
  const std::set<ValueRef> outputs(g.outputs.begin(), g.outputs.end());
  std::map<ValueRef, size_t> last_read;
  for (size_t s = 0; s < p.steps.size(); ++s) {
    for (ValueRef v : step_writes(g, p.steps[s])) last_read[v] = s;  // never read: dies at once
    for (ValueRef v : step_reads(g, p.steps[s])) last_read[v] = s;
  }
  std::vector<std::vector<ValueRef>> dead(p.steps.size());
  for (const auto& [v, s] : last_read)
    if (!outputs.count(v) && !g.nodes[v.node].is_var()) dead[s].push_back(v);
  return dead;
}

int64_t kernel_bytes(const Graph& g, const FusedKernel& k) {
  int64_t bytes = 0;
  for (const auto* list : {&k.inputs, &k.outputs})
    for (const KernelOperand& op : *list) {
      const ir::TensorType& t = g.type(op.value);
      bytes += ir::num_elements(t.shape) * static_cast<int64_t>(ir::dtype_size(t.dtype));
    }
  return bytes;
}

std::string print_plan(const Graph& g, const Plan& p) {
  std::string out;
  int kernel = 0;
  for (const PlanStep& step : p.steps) {
    if (const auto* k = std::get_if<FusedKernel>(&step)) {
      std::vector<std::string> nodes, ins, outs;
      for (int32_t n : k->nodes) nodes.push_back(fmt::format("%{}={}", g.nodes[n].name, g.nodes[n].op));
      for (const auto& op : k->inputs) ins.push_back(value_name(g, op.value) + (op.map.is_identity() ? "" : "(mapped)"));
      for (const auto& op : k->outputs) outs.push_back(value_name(g, op.value) + (op.map.is_identity() ? "" : "(permuted)"));
      std::vector<std::string> recomputed;
      for (int32_t n : k->recomputed) recomputed.push_back("%" + g.nodes[n].name);
      out += fmt::format("kernel {} {} nodes: {}  in: {}  out: {}  bytes: {}{}{}\n", kernel++, ir::shape_str(k->iteration),
                         fmt::join(nodes, " "), fmt::join(ins, " "), fmt::join(outs, " "), kernel_bytes(g, *k),
                         recomputed.empty() ? "" : "  recomputed: ", fmt::join(recomputed, " "));
    } else if (const auto* e = std::get_if<ExternalStep>(&step)) {
      out += fmt::format("external %{}={}\n", g.nodes[e->node].name, g.nodes[e->node].op);
    } else {
      const auto& v = std::get<ViewStep>(step);
      out += fmt::format("view %{}={}\n", g.nodes[v.node].name, g.nodes[v.node].op);
    }
  }
  return out;
}

}  // namespace ampfuse::engine
