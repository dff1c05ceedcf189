// _contrib_SyncBatchNorm at inference against MXNet 1.9.1's outputs
// (tests/data/sync_batch_norm/, written by make_cases.py there): the interpreter and the
// fused executor, bit for bit (its order of operations is not BatchNorm's); its refusals
// and AMP classes.
#include "engine/execution/executor.h"
#include "ir/builder.h"
#include "ir/op_registry.h"
#include "runtime/interpreter.h"
#include "runtime/tensor.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <functional>
#include <map>
#include <string>

namespace ampfuse {
namespace {

using ir::DType;
using ir::Shape;
using ir::TensorType;
using runtime::Tensor;

Tensor filled(const Shape& shape, const std::function<float(int64_t)>& fn) {
  Tensor t(TensorType{DType::f32, shape});
  for (int64_t i = 0; i < t.size(); ++i) t.data<float>()[i] = fn(i);
  return t;
}

ir::Graph sync_bn_graph(const Shape& shape, std::map<std::string, std::string> attrs) {
  ir::GraphBuilder b;
  const ir::ValueRef x = b.input("x", TensorType{DType::f32, shape});
  std::vector<ir::ValueRef> in = {x};
  for (const char* name : {"gamma", "beta", "moving_mean", "moving_var"}) in.push_back(b.param(name));
  b.output(b.op("_contrib_SyncBatchNorm", in, attrs, "bn"));
  return b.finish();
}

TEST(SyncBatchNorm, InterpreterAndFusedKernelGiveMxnetsBits) {
  std::ifstream f(std::string(AMPFUSE_TESTDATA_DIR) + "/sync_batch_norm/mxnet_cases.json");
  ASSERT_TRUE(f) << "missing tests/data/sync_batch_norm/mxnet_cases.json";
  const nlohmann::json cases = nlohmann::json::parse(f);
  ASSERT_EQ(cases.size(), 3u);
  for (const auto& c : cases) {
    const Shape shape = c.at("shape").get<Shape>();
    const int64_t channels = shape.at(1);
    const bool fix_gamma = c.at("fix_gamma");
    SCOPED_TRACE(fmt::format("{} fix_gamma={}", ir::shape_str(shape), fix_gamma));
    const ir::Graph g = sync_bn_graph(shape, {{"key", "k"},
                                              {"ndev", "2"},
                                              {"fix_gamma", fix_gamma ? "True" : "False"},
                                              {"eps", fmt::format("{}", c.at("eps").get<double>())}});
    const runtime::Bindings vars = {
        {"x", filled(shape, [](int64_t i) { return static_cast<float>((i * 37) % 101 - 50) / 7.0f; })},
        {"gamma", filled({channels}, [](int64_t i) { return static_cast<float>(i % 5 + 1) / 4.0f; })},
        {"beta", filled({channels}, [](int64_t i) { return static_cast<float>(i % 7 - 3) / 8.0f; })},
        {"moving_mean", filled({channels}, [](int64_t i) { return static_cast<float>(i % 11 - 5) / 3.0f; })},
        {"moving_var", filled({channels}, [](int64_t i) { return static_cast<float>(i % 13 + 1) / 9.0f; })}};
    const std::vector<float> want = c.at("out").get<std::vector<float>>();
    const Tensor interpreted = runtime::interpret(g, vars).at(0);
    const engine::Executable exe = engine::Executable::compile(g);
    EXPECT_EQ(exe.compile_stats().kernels, 1);  // one fused kernel, no reference kernel
    const Tensor executed = exe.run(vars).at(0);
    for (const Tensor* got : {&interpreted, &executed}) {
      ASSERT_EQ(got->shape(), shape);
      for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got->data<float>()[i], want[i]) << "element " << i;
    }
  }
}

TEST(SyncBatchNorm, RefusalsAndAmpClasses) {
  EXPECT_ERROR(sync_bn_graph({2, 3, 4}, {{"output_mean_var", "True"}}), "output_mean_var=True");
  EXPECT_ERROR(sync_bn_graph({6}, {}), "needs a channel axis");
  EXPECT_EQ(sync_bn_graph({2, 3, 4}, {}).nodes.at(1).outputs.at(0), (TensorType{DType::f32, {3}}));
  // MXNet 1.9.1's lists: FP32_FUNCS in both (BatchNorm is neutral).
  const ir::OpDef& d = ir::OpRegistry::global().get("_contrib_SyncBatchNorm");
  EXPECT_EQ(d.amp_fp16, ir::AmpClass::fp32);
  EXPECT_EQ(d.amp_bf16, ir::AmpClass::fp32);
}

}  // namespace
}  // namespace ampfuse
