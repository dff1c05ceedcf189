#include "engine/planning/recompute.h"

#include <algorithm>
#include <optional>
#include <set>

namespace ampfuse::engine {

namespace {

using ir::Graph;
using ir::ValueRef;

int64_t bytes_of(const Graph& g, ValueRef v) {
  const ir::TensorType& t = g.type(v);
  return ir::num_elements(t.shape) * static_cast<int64_t>(ir::dtype_size(t.dtype));
}

bool contains(const std::vector<int32_t>& nodes, int32_t n) { return std::find(nodes.begin(), nodes.end(), n) != nodes.end(); }

// Indices into k.nodes of the nodes that node n depends on inside k, n included.
std::vector<size_t> chain_of(const Graph& g, const FusedKernel& k, int32_t n) {
  std::set<int32_t> needed{n};
  std::vector<size_t> chain;
  for (size_t idx = k.nodes.size(); idx-- > 0;) {
    if (!needed.count(k.nodes[idx])) continue;
    chain.push_back(idx);
    for (ValueRef in : g.nodes[k.nodes[idx]].inputs)
      if (contains(k.nodes, in.node)) needed.insert(in.node);
  }
  std::reverse(chain.begin(), chain.end());
  return chain;
}

// The map chain node c runs under in a reader that reads V through permutation `read`,
// where P computes c under `c_map` and V under `v_map` (all permutations of P's iteration).
AccessMap map_in_reader(const AccessMap& c_map, const AccessMap& v_map, const AccessMap& read) {
  // P's iteration dim a is V's dim k where v_map.iter_dim[k] == a, which the reader
  // iterates as its dim read.iter_dim[k].
  std::vector<int32_t> v_dim_of(v_map.iter_dim.size());
  for (size_t k = 0; k < v_map.iter_dim.size(); ++k) v_dim_of[v_map.iter_dim[k]] = static_cast<int32_t>(k);
  AccessMap m = AccessMap::identity(c_map.iter_dim.size());
  for (size_t j = 0; j < c_map.iter_dim.size(); ++j) m.iter_dim[j] = read.iter_dim[v_dim_of[c_map.iter_dim[j]]];
  return m;
}

// Whether every node of `k` that reads a value computed inside `k` reads it at the point
// where `k` computes it (lower_kernel uses the value computed at the current iteration).
bool reads_are_consistent(const Graph& g, const FusedKernel& k) {
  for (size_t idx = 0; idx < k.nodes.size(); ++idx) {
    const ir::Node& node = g.nodes[k.nodes[idx]];
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const auto producer = std::find(k.nodes.begin(), k.nodes.end(), node.inputs[i].node);
      if (producer == k.nodes.end()) continue;
      const AccessMap& computed_under = k.node_maps[static_cast<size_t>(producer - k.nodes.begin())];
      if (compose_maps(input_access(g, k.nodes[idx], i), k.node_maps[idx]) != computed_under) return false;
    }
  }
  return true;
}

bool within_caps(const KernelWork& now, const KernelWork& before, const PlannerOptions& caps) {
  const auto fits = [](int count, int cap, int was) { return count <= std::max(cap, was); };
  return fits(now.transcendental_cost, caps.max_kernel_transcendental_cost, before.transcendental_cost) &&
         fits(now.instructions, caps.max_kernel_instructions, before.instructions) &&
         fits(now.inputs, caps.max_kernel_inputs, before.inputs);
}

// Kernel `k` keeping only the nodes its stored outputs need.
void drop_unneeded_nodes(const Graph& g, FusedKernel& k) {
  std::set<int32_t> needed;
  for (const KernelOperand& op : k.outputs) needed.insert(op.value.node);
  std::vector<int32_t> nodes;
  std::vector<AccessMap> maps;
  for (size_t idx = k.nodes.size(); idx-- > 0;) {
    if (!needed.count(k.nodes[idx])) continue;
    nodes.push_back(k.nodes[idx]), maps.push_back(k.node_maps[idx]);
    for (ValueRef in : g.nodes[k.nodes[idx]].inputs) needed.insert(in.node);
  }
  std::reverse(nodes.begin(), nodes.end());
  std::reverse(maps.begin(), maps.end());
  std::erase_if(k.recomputed, [&](int32_t n) { return !contains(nodes, n); });
  k.nodes = std::move(nodes);
  k.node_maps = std::move(maps);
  k.inputs = kernel_loads(g, k.nodes, k.node_maps);
}

// `reader` with P's chain nodes added (computed under the maps that reading V through
// `read` gives them), or nullopt when a node it has already runs under another map.
std::optional<FusedKernel> with_chain(const Graph& g, const FusedKernel& p, const std::vector<size_t>& chain,
                                      size_t v_idx, const FusedKernel& reader, const AccessMap& read) {
  FusedKernel r = reader;
  for (size_t idx : chain) {
    const int32_t n = p.nodes[idx];
    const AccessMap m = map_in_reader(p.node_maps[idx], p.node_maps[v_idx], read);
    const auto at = std::lower_bound(r.nodes.begin(), r.nodes.end(), n);
    const size_t pos = static_cast<size_t>(at - r.nodes.begin());
    if (at != r.nodes.end() && *at == n) {
      if (r.node_maps[pos] != m) return std::nullopt;
      continue;
    }
    r.nodes.insert(at, n);
    r.node_maps.insert(r.node_maps.begin() + static_cast<std::ptrdiff_t>(pos), m);
    r.recomputed.push_back(n);
  }
  std::sort(r.recomputed.begin(), r.recomputed.end());
  r.inputs = kernel_loads(g, r.nodes, r.node_maps);
  if (!reads_are_consistent(g, r)) return std::nullopt;
  return r;
}

int64_t added_load_bytes(const Graph& g, const FusedKernel& before, const FusedKernel& after) {
  int64_t bytes = 0;
  for (const KernelOperand& op : after.inputs)
    if (std::find(before.inputs.begin(), before.inputs.end(), op) == before.inputs.end()) bytes += bytes_of(g, op.value);
  return bytes;
}

class Recomputer {
 public:
  Recomputer(const Graph& g, Plan& plan, const PlannerOptions& caps)
      : g_(g), plan_(plan), caps_(caps), graph_outputs_(g.outputs.begin(), g.outputs.end()) {}

  RecomputeStats run() {
    for (size_t p = 0; p < plan_.steps.size(); ++p) {
      auto* producer = std::get_if<FusedKernel>(&plan_.steps[p]);
      if (!producer) continue;
      const std::vector<KernelOperand> stored = producer->outputs;
      for (const KernelOperand& v : stored) try_recompute(p, v.value);
    }
    std::erase_if(plan_.steps, [](const PlanStep& s) {
      const auto* k = std::get_if<FusedKernel>(&s);
      return k && k->nodes.empty();
    });
    return stats_;
  }

 private:
  void try_recompute(size_t p, ValueRef v) {
    if (graph_outputs_.count(v)) return;
    const FusedKernel& producer = std::get<FusedKernel>(plan_.steps[p]);
    const std::vector<size_t> chain = chain_of(g_, producer, v.node);
    const size_t v_idx = chain.back();
    if (!chain_is_cheap(producer, chain)) return;

    std::vector<std::pair<size_t, FusedKernel>> rewritten;  // (step, reader with the chain)
    int64_t stored_bytes = bytes_of(g_, v), added_bytes = 0;
    const size_t rank = producer.iteration.size();
    for (size_t s = p + 1; s < plan_.steps.size(); ++s) {
      const std::vector<ValueRef> reads = step_reads(g_, plan_.steps[s]);
      if (std::find(reads.begin(), reads.end(), v) == reads.end()) continue;
      const auto* reader = std::get_if<FusedKernel>(&plan_.steps[s]);
      if (!reader || reader->compute != producer.compute) return;
      std::optional<FusedKernel> updated;
      for (const KernelOperand& op : reader->inputs) {
        if (op.value != v) continue;
        if (updated || !reads_whole(*reader, op, v, rank)) return;
        updated = with_chain(g_, producer, chain, v_idx, *reader, op.map);
        if (!updated) return;
        stored_bytes += bytes_of(g_, v);
      }
      if (!within_caps(kernel_work(g_, *updated), kernel_work(g_, *reader), caps_)) return;
      added_bytes += added_load_bytes(g_, *reader, *updated);
      rewritten.emplace_back(s, std::move(*updated));
    }
    if (rewritten.empty() || added_bytes >= stored_bytes) return;

    for (auto& [s, reader] : rewritten) plan_.steps[s] = std::move(reader);
    auto& kept = std::get<FusedKernel>(plan_.steps[p]);
    std::erase_if(kept.outputs, [&](const KernelOperand& op) { return op.value == v; });
    drop_unneeded_nodes(g_, kept);
    ++stats_.values;
    stats_.bytes_not_moved += stored_bytes - added_bytes;
  }

  // Whether `op` reads all of v, each element once, under a permutation of the reader's
  // iteration (of v's rank), so that v's chain can run at the reader's iteration points.
  bool reads_whole(const FusedKernel& reader, const KernelOperand& op, ValueRef v, size_t rank) const {
    const ir::Shape& shape = g_.type(v).shape;
    if (reader.iteration.size() != rank || op.shape != shape || !is_permutation(op.map, rank)) return false;
    for (size_t k = 0; k < rank; ++k)
      if (reader.iteration[static_cast<size_t>(op.map.iter_dim[k])] != shape[k]) return false;
    return true;
  }

  // No transcendental instruction, no random bits (they follow the kernel's iteration
  // order, which a reader's may not keep: keeps_row_major_order), and at least one load
  // that is not a graph variable.
  bool chain_is_cheap(const FusedKernel& producer, const std::vector<size_t>& chain) const {
    FusedKernel c;
    for (size_t idx : chain) {
      if (draws_random_bits(g_, producer.nodes[idx])) return false;
      c.nodes.push_back(producer.nodes[idx]), c.node_maps.push_back(producer.node_maps[idx]);
    }
    c.inputs = kernel_loads(g_, c.nodes, c.node_maps);
    if (kernel_work(g_, c).transcendental_cost > 0) return false;
    return std::any_of(c.inputs.begin(), c.inputs.end(),
                       [&](const KernelOperand& op) { return !g_.nodes[op.value.node].is_var(); });
  }

  const Graph& g_;
  Plan& plan_;
  const PlannerOptions& caps_;
  const std::set<ValueRef> graph_outputs_;
  RecomputeStats stats_;
};

}  // namespace

RecomputeStats recompute_in_readers(const ir::Graph& g, Plan& plan, const PlannerOptions& caps) {
  return Recomputer(g, plan, caps).run();
}

}  // namespace ampfuse::engine
