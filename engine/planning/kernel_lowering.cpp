#include "engine/planning/kernel_lowering.h"

#include "ir/error.h"
#include "ir/op_registry.h"

#include <algorithm>
#include <map>

namespace ampfuse::engine {

namespace {

using ir::ScalarBuilder;
using ir::ScalarOp;
using ir::ValueRef;

// Strides (per iteration dim, in elements) and the start offset of a tensor of `shape`
// read through `map`: tensor dim k moves scale[k] * row_stride[k] per step of iteration
// dim iter_dim[k] and starts at offset[k].
std::pair<std::vector<int64_t>, int64_t> operand_strides(const ir::Shape& shape, const AccessMap& map,
                                                         size_t iteration_rank) {
  const std::vector<int64_t> row = codegen::row_major_strides(shape);
  std::vector<int64_t> strides(iteration_rank, 0);
  int64_t offset = 0;
  for (size_t k = 0; k < shape.size(); ++k) {
    if (map.iter_dim[k] >= 0) strides[map.iter_dim[k]] += map.scale[k] * row[k];
    offset += map.offset[k] * row[k];
  }
  return {strides, offset};
}

// Appends `node`'s recipe to `b` with its inputs bound to `args`; returns its results.
std::vector<ScalarBuilder::Val> splice_recipe(ScalarBuilder& b, const ir::Node& node,
                                              const std::vector<ScalarBuilder::Val>& args) {
  const ir::OpDef& def = ir::OpRegistry::global().get(node.op);
  ScalarBuilder own(static_cast<int>(args.size()));
  const ir::ScalarProgram p = own.finish(def.recipe(own, node.attrs));
  if (p.results.size() != node.outputs.size())
    fail("the scalar recipe of {} gives {} results for {} outputs", node.op, p.results.size(), node.outputs.size());
  std::vector<ScalarBuilder::Val> at(p.instrs.size());
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const ir::ScalarInstr& s = p.instrs[i];
    switch (s.op) {
      case ScalarOp::input: at[i] = args.at(s.index); break;
      case ScalarOp::constant: at[i] = b.constant(s.value); break;
      case ScalarOp::round_to: at[i] = b.round_to(at[s.a], s.dtype); break;
      case ScalarOp::philox_bits24: at[i] = b.philox_bits24(s.seed, s.offset); break;
      case ScalarOp::philox_bits24_at: at[i] = b.philox_bits24_at(at[s.a], s.seed, s.offset, s.stride); break;
      case ScalarOp::select: at[i] = b.select(at[s.a], at[s.b], at[s.c]); break;
      default:
        at[i] = ir::scalar_op_arity(s.op) == 1 ? b.unary(s.op, at[s.a]) : b.binary(s.op, at[s.a], at[s.b]);
    }
  }
  std::vector<ScalarBuilder::Val> results;
  for (int32_t r : p.results) results.push_back(at[r]);
  return results;
}

}  // namespace

LoweredKernel lower_kernel(const ir::Graph& g, const FusedKernel& k, const std::string& name, bool flag_nonfinite) {
  const size_t rank = k.iteration.size();
  if (rank > static_cast<size_t>(codegen::kMaxRank))
    fail("kernel {}: iteration space {} has rank {}; generated kernels take at most {}", name,
         ir::shape_str(k.iteration), rank, codegen::kMaxRank);
  LoweredKernel out;
  codegen::KernelSpec& spec = out.spec;
  spec.name = name;
  spec.shape.assign(k.iteration.begin(), k.iteration.end());
  spec.compute = k.compute;

  for (const KernelOperand& op : k.inputs) {
    auto [strides, offset] = operand_strides(op.shape, op.map, rank);
    spec.inputs.push_back({value_name(g, op.value), g.type(op.value).dtype, std::move(strides)});
    out.input_offsets.push_back(offset);
  }
  for (const KernelOperand& op : k.outputs) {
    // An output is stored under its node's map, a permutation: tensor dim j is iteration
    // dim iter_dim[j].
    auto [strides, offset] = operand_strides(op.shape, op.map, rank);
    if (offset != 0) fail("internal: kernel {} stores {} at an offset", name, value_name(g, op.value));
    spec.outputs.push_back({value_name(g, op.value), g.type(op.value).dtype, std::move(strides)});
  }

  ScalarBuilder b(static_cast<int>(k.inputs.size()));
  std::map<ValueRef, ScalarBuilder::Val> inside;  // values computed by the kernel so far
  for (size_t idx = 0; idx < k.nodes.size(); ++idx) {
    const int32_t n = k.nodes[idx];
    const ir::Node& node = g.nodes[n];
    const ScalarBuilder::Val first_instr = b.size();
    std::vector<ScalarBuilder::Val> args;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (auto it = inside.find(node.inputs[i]); it != inside.end()) {
        args.push_back(it->second);
        continue;
      }
      // Read from outside: the operand the planner recorded for this (value, map).
      const KernelOperand want{node.inputs[i], operand_shape(g, n, i), compose_maps(input_access(g, n, i), k.node_maps[idx])};
      const auto it = std::find(k.inputs.begin(), k.inputs.end(), want);
      if (it == k.inputs.end())
        fail("internal: kernel {} has no operand for input {} of node '{}'", name, i, node.name);
      args.push_back(b.input(static_cast<int>(it - k.inputs.begin())));
    }
    std::vector<ScalarBuilder::Val> results;
    if (fusion_role(node) == FusionRole::remap) results = {args.at(0)};  // only the indexing changes
    else results = splice_recipe(b, node, args);
    // Random bits read the flat iteration index as the node's element index (see
    // keeps_row_major_order); the planner never fuses such a node otherwise.
    bool draws_bits = false;
    for (ScalarBuilder::Val v = first_instr; v < b.size(); ++v) draws_bits |= ir::reads_element_index(b.at(v).op);
    if (draws_bits && (!keeps_row_major_order(k.node_maps[idx], node.outputs[0].shape) ||
                       ir::num_elements(node.outputs[0].shape) != ir::num_elements(k.iteration)))
      fail("internal: kernel {} computes node '{}', which draws random bits, out of row-major order", name, node.name);
    for (size_t o = 0; o < results.size(); ++o) {
      // The interpreter stores every node output in its dtype; the kernel rounds there too.
      const ir::DType dt = node.outputs[o].dtype;
      const ScalarBuilder::Val v = dt == k.compute ? results[o] : b.round_to(results[o], dt);
      inside[{n, static_cast<int32_t>(o)}] = v;
    }
  }
  std::vector<ScalarBuilder::Val> stores;
  for (const KernelOperand& op : k.outputs) stores.push_back(inside.at(op.value));
  spec.body = b.finish(stores);

  if (flag_nonfinite) {
    codegen::FlagSpec flag{"nonfinite", {}};
    for (size_t i = 0; i < spec.inputs.size() + spec.outputs.size(); ++i) {
      const bool is_float = ir::is_float(i < spec.inputs.size() ? spec.inputs[i].dtype
                                                                 : spec.outputs[i - spec.inputs.size()].dtype);
      if (is_float) flag.operands.push_back(static_cast<int>(i));
    }
    if (!flag.operands.empty()) spec.flags.push_back(std::move(flag));
  }
  spec.validate();
  // Fewer, longer rows for the generated loops; a transpose's tiles span the whole plane.
  codegen::coalesce_dimensions(spec);
  return out;
}

}  // namespace ampfuse::engine
