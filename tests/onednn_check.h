// Checking oneDNN external ops against their reference kernels (the semantic definition):
// deterministic inputs, an element-wise comparison, the implementation oneDNN chose.
#pragma once

#include "ir/builder.h"
#include "runtime/onednn/onednn_ops.h"
#include "runtime/reference/reference_kernels.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <map>
#include <string>
#include <vector>

namespace ampfuse::runtime::onednn_check {

inline Tensor filled(TensorType t, uint64_t seed) {
  Tensor x(std::move(t));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < x.size(); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x.set_f64(i, static_cast<double>(static_cast<int64_t>(s >> 40) % 2001 - 1000) / 1000.0);
  }
  return x;
}

// Runs `node` on `inputs` through oneDNN and the reference kernel and compares every output
// element: NaN where the reference has NaN, else |got - want| / (1 + |want|) <= tol.
// Returns the implementation oneDNN chose.
// `hot`: the implementation must not be one of oneDNN's slow reference ones.
inline std::string compare_node(const ir::Node& node, const std::vector<Tensor>& inputs, double tol, bool hot = true) {
  std::vector<TensorType> in_types;
  for (const Tensor& t : inputs) in_types.push_back(t.type());
  const std::string label = fmt::format("{} '{}' {}", node.op, node.name, ir::type_str(in_types[0]));
  EXPECT_TRUE(onednn_supports(node, in_types)) << label << ": " << onednn_refusal(node, in_types);
  if (!onednn_supports(node, in_types)) return "";
  const std::string op = node.op;
  std::vector<Tensor> got, want;
  for (const auto& t : node.outputs) got.emplace_back(t), want.emplace_back(t);
  onednn_run(node, inputs, got);
  const ReferenceKernel* ref = find_reference_kernel(op);
  EXPECT_NE(ref, nullptr) << op;
  if (!ref) return "";
  (*ref)(node, inputs, want);
  for (size_t o = 0; o < got.size(); ++o) {
    double worst = 0;
    int64_t nan_differs = 0;
    for (int64_t i = 0; i < got[o].size(); ++i) {
      const double a = got[o].get_f64(i), e = want[o].get_f64(i);
      if (std::isnan(a) || std::isnan(e)) {
        nan_differs += std::isnan(a) != std::isnan(e);
        continue;
      }
      worst = std::max(worst, std::fabs(a - e) / (1.0 + std::fabs(e)));
    }
    EXPECT_LE(worst, tol) << label << " output " << o;
    EXPECT_EQ(nan_differs, 0) << label << " output " << o << ": elements NaN on one side only";
  }
  const std::string impl = onednn_impl_name(node, in_types);
  if (hot) {
    EXPECT_FALSE(onednn_impl_is_slow(impl)) << label << ": " << impl;
  }
  return impl;
}

// Builds `op` over inputs of the given types, runs it through oneDNN and the reference
// kernel, and compares. Returns the implementation oneDNN chose (printed for the record).
inline std::string check_against_reference(const std::string& op, std::vector<TensorType> in_types,
                                    std::map<std::string, std::string> attrs, double tol, bool hot = true) {
  ir::GraphBuilder b;
  std::vector<ir::ValueRef> ins;
  for (size_t i = 0; i < in_types.size(); ++i) ins.push_back(b.input("in" + std::to_string(i), in_types[i]));
  b.output(b.op(op, ins, attrs, "node"));
  ir::Graph g = b.finish();
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < in_types.size(); ++i) inputs.push_back(filled(in_types[i], i + 1));
  const std::string impl = compare_node(g.nodes.back(), inputs, tol, hot);
  const auto layout = attrs.find("layout");
  std::cout << "[   impl   ] " << op << " " << ir::type_str(in_types[0]) << (layout != attrs.end() ? " " + layout->second : "")
            << ": " << impl << "\n";
  return impl;
}

// bf16 and f16 outputs round once more than the f32 reference arithmetic can explain:
// one unit in the last place (2^-8 bf16, 2^-11 f16) where oneDNN's summation order puts
// the f32 result on the other side of a rounding boundary.
inline double tolerance(ir::DType t) { return t == ir::DType::f32 ? 1e-5 : t == ir::DType::bf16 ? 2e-2 : 4e-3; }

}  // namespace ampfuse::runtime::onednn_check
