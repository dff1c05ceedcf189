#include "engine/planning/kernel_lowering.h"

#include "engine/planning/row_fusion.h"
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

LoweredKernel lower_kernel(const ir::Graph& g, const FusedKernel& k, const std::string& name, bool flag_nonfinite,
                           const std::vector<int>& guarded_outputs) {
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

  // A row kernel (row_fusion.h): the nodes before its row op give the row's data, those
  // after it the body, which reads the row op's result as its input after the operands.
  const size_t centre = row_op_index(g, k);
  const bool row_kernel = centre < k.nodes.size();
  const int n_in = static_cast<int>(k.inputs.size());
  auto operand_of = [&](const KernelOperand& want, const ir::Node& node, size_t i) {
    const auto it = std::find(k.inputs.begin(), k.inputs.end(), want);
    if (it == k.inputs.end()) fail("internal: kernel {} has no operand for input {} of node '{}'", name, i, node.name);
    return static_cast<int>(it - k.inputs.begin());
  };
  // Splices nodes [from, to) into b; `inside` holds the values computed so far.
  auto splice_nodes = [&](ScalarBuilder& b, std::map<ValueRef, ScalarBuilder::Val>& inside, size_t from, size_t to) {
    for (size_t idx = from; idx < to; ++idx) {
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
        args.push_back(b.input(operand_of(
            {node.inputs[i], operand_shape(g, n, i), compose_maps(input_access(g, n, i), k.node_maps[idx])}, node, i)));
      }
      std::vector<ScalarBuilder::Val> results;
      if (fusion_role(node) == FusionRole::remap) results = {args.at(0)};  // only the indexing changes
      else results = splice_recipe(b, node, args);
      // Random bits read the flat iteration index as the node's element index (see
      // keeps_row_major_order); the planner never fuses such a node otherwise.
      bool draws_bits = false;
      for (ScalarBuilder::Val v = first_instr; v < b.size(); ++v) draws_bits |= ir::reads_element_index(b.at(v).op);
      if (draws_bits && (row_kernel || !keeps_row_major_order(k.node_maps[idx], node.outputs[0].shape) ||
                         ir::num_elements(node.outputs[0].shape) != ir::num_elements(k.iteration)))
        fail("internal: kernel {} computes node '{}', which draws random bits, out of row-major order", name, node.name);
      for (size_t o = 0; o < results.size(); ++o) {
        // The interpreter stores every node output in its dtype; the kernel rounds there too.
        const ir::DType dt = node.outputs[o].dtype;
        const ScalarBuilder::Val v = dt == k.compute ? results[o] : b.round_to(results[o], dt);
        inside[{n, static_cast<int32_t>(o)}] = v;
      }
    }
  };

  ScalarBuilder b(n_in + (row_kernel ? 1 : 0));
  size_t data_outputs = 0;  // a row kernel's outputs its data program stores
  std::map<ValueRef, ScalarBuilder::Val> inside;  // values the body computed so far
  if (row_kernel) {
    const size_t c = centre;
    const int32_t n = k.nodes[c];
    const ir::Node& node = g.nodes[n];
    const bool reduces = is_row_reduction(node);
    if (!is_row_op(g, n) || !(k.node_maps[c] == (reduces ? row_result_map(node.outputs[0].shape, k.iteration.size())
                                                          : AccessMap::identity(k.iteration.size()))))
      fail("internal: kernel {} computes node '{}' ({}), which is not a row op over its iteration space", name,
           node.name, node.op);
    ScalarBuilder data(n_in);
    std::map<ValueRef, ScalarBuilder::Val> before;
    splice_nodes(data, before, 0, c);
    for (const KernelOperand& op : k.outputs) data_outputs += before.count(op.value);
    for (size_t o = 0; o + data_outputs < k.outputs.size(); ++o)
      if (before.count(k.outputs[o].value))
        fail("internal: kernel {} stores {}, computed before its row op, before the body's outputs", name,
             value_name(g, k.outputs[o].value));
    const ValueRef x = node.inputs[0];
    const auto computed = before.find(x);
    const ScalarBuilder::Val x_val =
        computed != before.end() ? computed->second : data.input(operand_of({x, k.iteration, AccessMap::identity(k.iteration.size())}, node, 0));
    codegen::RowSpec row;
    // Outputs computed before the row op (the data kernel's, row_fusion.h) come last; the
    // data program gives them after x, stored in the row's first pass.
    std::vector<ScalarBuilder::Val> data_results = {x_val};
    for (size_t o = k.outputs.size() - data_outputs; o < k.outputs.size(); ++o)
      data_results.push_back(before.at(k.outputs[o].value));
    row.data = data.finish(data_results);
    row.data_dtype = g.type(x).dtype;
    row.result_dtype = node.outputs[0].dtype;
    if (node.op == "LayerNorm") {
      row.op = codegen::RowOp::layer_norm;
      row.constant = node.attrs.get_float("eps");
      const AccessMap by_column{{static_cast<int32_t>(k.iteration.size() - 1)}, {1}, {0}};
      row.gamma = operand_of({node.inputs[1], g.type(node.inputs[1]).shape, by_column}, node, 1);
      row.beta = operand_of({node.inputs[2], g.type(node.inputs[2]).shape, by_column}, node, 2);
    } else if (reduces) {
      row.op = node.op == "sum"    ? codegen::RowOp::sum
               : node.op == "mean" ? codegen::RowOp::mean
               : node.op == "max"  ? codegen::RowOp::max
                                   : codegen::RowOp::min;
    } else {
      row.op = node.op == "log_softmax" ? codegen::RowOp::log_softmax : codegen::RowOp::softmax;
      row.constant = node.attrs.is_none("temperature") ? 1.0 : node.attrs.get_float("temperature");
    }
    spec.row = std::move(row);
    inside[{n, 0}] = b.input(n_in);
    splice_nodes(b, inside, c + 1, k.nodes.size());
  } else {
    splice_nodes(b, inside, 0, k.nodes.size());
  }
  std::vector<ScalarBuilder::Val> stores;
  for (size_t o = 0; o + data_outputs < k.outputs.size(); ++o) {
    ScalarBuilder::Val v = inside.at(k.outputs[o].value);
    // A value rounded to the dtype it is stored in is stored unrounded: the store narrows it
    // to the same bits (narrowing an exactly representable value is exact), and the
    // rounding and widening back, about ten vector instructions for bf16, stay for the
    // readers inside the kernel, if any. (C8 through the executor, its last amp_cast rounded
    // twice, took 9.9-11.8 ms against the bench kernel's 8.4-8.7 ms; level since.)
    if (b.at(v).op == ir::ScalarOp::round_to && b.at(v).dtype == spec.outputs[o].dtype) v = b.at(v).a;
    stores.push_back(v);
  }
  spec.body = b.finish(stores);

  if ((flag_nonfinite || !guarded_outputs.empty()) && row_kernel)
    fail("kernel {}: row kernels carry no non-finite flag; plan the row op as an external step", name);
  if (flag_nonfinite) {
    codegen::FlagSpec flag{"nonfinite", {}};
    for (size_t i = 0; i < spec.inputs.size() + spec.outputs.size(); ++i) {
      const bool is_float = ir::is_float(i < spec.inputs.size() ? spec.inputs[i].dtype
                                                                 : spec.outputs[i - spec.inputs.size()].dtype);
      if (is_float) flag.operands.push_back(static_cast<int>(i));
    }
    if (!flag.operands.empty()) spec.flags.push_back(std::move(flag));
  }
  if (!guarded_outputs.empty()) {
    codegen::FlagSpec flag{"nonfinite_guarded", {}};
    for (int o : guarded_outputs) {
      if (o < 0 || o >= static_cast<int>(spec.outputs.size()))
        fail("internal: kernel {} has no output {} to guard", name, o);
      flag.operands.push_back(static_cast<int>(spec.inputs.size()) + o);
    }
    spec.flags.push_back(std::move(flag));
  }
  spec.validate();
  // Fewer, longer rows for the generated loops; a transpose's tiles span the whole plane.
  codegen::coalesce_dimensions(spec);
  return out;
}

}  // namespace ampfuse::engine
