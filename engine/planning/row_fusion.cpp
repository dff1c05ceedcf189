#include "engine/planning/row_fusion.h"

#include "ir/ops/nn_params.h"
#include "ir/ops/tensor_shapes.h"

#include <algorithm>
#include <map>
#include <optional>

namespace ampfuse::engine {

namespace {

using ir::ValueRef;

bool is_f32_or_narrower(ir::DType t) { return t == ir::DType::f32 || t == ir::DType::f16 || t == ir::DType::bf16; }

// Whether kernel k may be merged into a row kernel at all.
bool joinable(const ir::Graph& g, const FusedKernel& k, const ir::Shape& shape) {
  if (k.iteration != shape || k.compute != ir::DType::f32 || !k.recomputed.empty()) return false;
  return std::none_of(k.nodes.begin(), k.nodes.end(), [&](int32_t n) {
    return fusion_role(g.nodes[n]) == FusionRole::external || draws_random_bits(g, n);
  });
}

// Whether every load of `v` by kernel k is element for element (the identity map).
bool reads_element_for_element(const FusedKernel& k, ValueRef v, const ir::Shape& shape) {
  bool any = false;
  for (const KernelOperand& op : k.inputs) {
    if (op.value != v) continue;
    if (op.shape != shape || !op.map.is_identity()) return false;
    any = true;
  }
  return any;
}

}  // namespace

size_t row_op_index(const ir::Graph& g, const FusedKernel& k) {
  const auto it = std::find_if(k.nodes.begin(), k.nodes.end(),
                               [&](int32_t n) { return fusion_role(g.nodes[n]) == FusionRole::external; });
  return static_cast<size_t>(it - k.nodes.begin());
}

AccessMap row_result_map(const ir::Shape& out, size_t rank) {
  AccessMap m;
  for (size_t d = 0; d < out.size(); ++d) {
    // keepdims (rank dims, the last of extent 1) or not (rank - 1 dims); a rank-1 input
    // reduces to [1], as MXNet 1.x does.
    const bool row_dim = d + 1 < rank && (out.size() == rank || out.size() == rank - 1);
    m.iter_dim.push_back(row_dim ? static_cast<int32_t>(d) : -1);
    m.scale.push_back(row_dim ? 1 : 0);
    m.offset.push_back(0);
  }
  return m;
}

namespace {

void add_operand(std::vector<KernelOperand>& list, const KernelOperand& op) {
  if (std::find(list.begin(), list.end(), op) == list.end()) list.push_back(op);
}

}  // namespace

bool is_row_reduction(const ir::Node& node) {
  return node.op == "sum" || node.op == "mean" || node.op == "max" || node.op == "min";
}

bool is_row_op(const ir::Graph& g, int32_t n) {
  const ir::Node& node = g.nodes[n];
  const bool softmax = node.op == "softmax" || node.op == "log_softmax";
  if ((!softmax && node.op != "LayerNorm" && !is_row_reduction(node)) || node.outputs.size() != 1) return false;
  const ir::Shape& shape = g.type(node.inputs[0]).shape;
  if (shape.empty()) return false;
  if (is_row_reduction(node)) {
    // The last axis alone, of at least one element (an empty row's identity would never be
    // stored: the kernel has no iterations).
    const std::vector<bool> reduced = ir::reduce_plan(shape, node.attrs).reduced;
    if (shape.back() == 0 || !reduced.back() || std::count(reduced.begin(), reduced.end(), true) != 1) return false;
  } else {
    if (node.outputs[0].shape != shape) return false;
    if (ir::nn::normalize_axis(node.attrs.get_int("axis"), shape.size()) != static_cast<int64_t>(shape.size()) - 1)
      return false;
  }
  if (softmax && node.inputs.size() != 1) return false;
  for (ValueRef in : node.inputs)
    if (!is_f32_or_narrower(g.type(in).dtype)) return false;
  return is_f32_or_narrower(node.outputs[0].dtype) && node_compute_type(g, n) == ir::DType::f32;
}

int fuse_row_kernels(const ir::Graph& g, Plan& plan) {
  std::vector<PlanStep>& steps = plan.steps;
  std::map<ValueRef, int> readers;  // steps reading each value, and one more for a graph output
  std::map<ValueRef, size_t> producer;
  for (size_t s = 0; s < steps.size(); ++s) {
    std::vector<ValueRef> reads = step_reads(g, steps[s]);
    std::sort(reads.begin(), reads.end());
    reads.erase(std::unique(reads.begin(), reads.end()), reads.end());
    for (ValueRef v : reads) ++readers[v];
    for (ValueRef v : step_writes(g, steps[s])) producer[v] = s;
  }
  for (ValueRef v : g.outputs) ++readers[v];

  // A merged kernel takes the place of its last part (all it reads is ready there, and
  // what it writes is read only later); the other parts go.
  std::vector<bool> removed(steps.size(), false);
  std::vector<std::optional<FusedKernel>> merged(steps.size());
  auto free_kernel = [&](size_t s) -> const FusedKernel* {
    return removed[s] || merged[s] ? nullptr : std::get_if<FusedKernel>(&steps[s]);
  };
  int count = 0;
  for (size_t s = 0; s < steps.size(); ++s) {
    const auto* external = std::get_if<ExternalStep>(&steps[s]);
    if (!external || !is_row_op(g, external->node)) continue;
    const int32_t n = external->node;
    const ir::Node& node = g.nodes[n];
    const ValueRef data = node.inputs[0], result{n, 0};
    const ir::Shape& shape = g.type(data).shape;  // the iteration space
    const size_t rank = shape.size();
    const AccessMap identity = AccessMap::identity(rank);
    const bool reduces = is_row_reduction(node);
    const AccessMap result_map = reduces ? row_result_map(node.outputs[0].shape, rank) : identity;

    // The data's kernel: its other outputs, and the data itself where other steps read it
    // too, the row kernel stores in the row's first pass.
    std::optional<size_t> prologue, epilogue;
    std::vector<KernelOperand> stored;
    if (const auto it = producer.find(data); it != producer.end())
      if (const FusedKernel* p = free_kernel(it->second);
          p && joinable(g, *p, shape) && (reduces || kernel_work(g, *p).transcendental_cost == 0) &&
          std::find(p->outputs.begin(), p->outputs.end(), KernelOperand{data, shape, identity}) != p->outputs.end()) {
        prologue = it->second;
        for (const KernelOperand& op : p->outputs)
          if (op.value != data || readers[data] > 1) stored.push_back(op);
      }
    if (readers[result] == 1 && !reduces)
      for (size_t e = s + 1; e < steps.size(); ++e) {
        const std::vector<ValueRef> reads = step_reads(g, steps[e]);
        if (std::find(reads.begin(), reads.end(), result) == reads.end()) continue;
        if (const FusedKernel* k = free_kernel(e); k && joinable(g, *k, shape) && reads_element_for_element(*k, result, shape))
          epilogue = e;
        break;
      }
    // What the prologue stores appears only where the merged kernel runs: no step before
    // that may read it, the merged kernel itself included (its passes read their inputs
    // again after the first pass stored over them).
    if (prologue && !stored.empty()) {
      const size_t place = epilogue.value_or(s);
      for (size_t between = *prologue + 1; between <= place && prologue; ++between) {
        // (A removed step's reads moved to where it was merged: a later step.)
        if (between == s || removed[between]) continue;
        const std::vector<ValueRef> reads =
            merged[between] ? step_reads(g, PlanStep(*merged[between])) : step_reads(g, steps[between]);
        for (const KernelOperand& op : stored)
          if (std::find(reads.begin(), reads.end(), op.value) != reads.end()) {
            prologue.reset();
            break;
          }
      }
      if (!prologue) stored.clear();
    }

    FusedKernel k;
    k.iteration = shape;
    k.compute = ir::DType::f32;
    if (prologue) {
      const FusedKernel& p = std::get<FusedKernel>(steps[*prologue]);
      k.nodes = p.nodes;
      k.node_maps = p.node_maps;
      k.inputs = p.inputs;
      removed[*prologue] = true;
    } else {
      k.inputs.push_back({data, shape, identity});
    }
    k.nodes.push_back(n);
    k.node_maps.push_back(result_map);
    // LayerNorm's gamma and beta: indexed by the column alone.
    const AccessMap by_column{{static_cast<int32_t>(rank - 1)}, {1}, {0}};
    for (size_t i = 1; i < node.inputs.size(); ++i) add_operand(k.inputs, {node.inputs[i], g.type(node.inputs[i]).shape, by_column});
    if (epilogue) {
      const FusedKernel& e = std::get<FusedKernel>(steps[*epilogue]);
      k.nodes.insert(k.nodes.end(), e.nodes.begin(), e.nodes.end());
      k.node_maps.insert(k.node_maps.end(), e.node_maps.begin(), e.node_maps.end());
      for (const KernelOperand& op : e.inputs)
        if (op.value != result) add_operand(k.inputs, op);
      k.outputs = e.outputs;
    } else {
      k.outputs.push_back({result, node.outputs[0].shape, result_map});
    }
    // The body's outputs first, then what the row's data program stores (lower_kernel).
    k.outputs.insert(k.outputs.end(), stored.begin(), stored.end());
    if (epilogue) {
      removed[s] = true;
      merged[*epilogue] = std::move(k);
    } else {
      merged[s] = std::move(k);
    }
    ++count;
  }

  std::vector<PlanStep> out;
  for (size_t s = 0; s < steps.size(); ++s) {
    if (removed[s]) continue;
    if (merged[s]) out.emplace_back(std::move(*merged[s]));
    else out.push_back(std::move(steps[s]));
  }
  steps = std::move(out);
  return count;
}

}  // namespace ampfuse::engine
