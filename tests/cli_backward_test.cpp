// `ampfuse run --backward`: gradients of a model's params (or chosen variables), reported,
// written as .npy, equal to the formula, on the fused path, the interpreter and under AMP.
#include "runtime/npy.h"
#include "tests/cli_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

namespace ampfuse {
namespace {

using runtime::Tensor;

// y = tanh(prelu(data, gamma)), gamma per channel (axis 1): a param by its slot.
constexpr const char* kModel = R"({"nodes": [
 {"op": "null", "name": "data", "inputs": []},
 {"op": "null", "name": "gamma", "inputs": []},
 {"op": "LeakyReLU", "name": "prelu", "attrs": {"act_type": "prelu"}, "inputs": [[0,0,0],[1,0,0]]},
 {"op": "tanh", "name": "t", "inputs": [[2,0,0]]}],
 "arg_nodes": [0,1], "heads": [[3,0,0]]})";

struct Files {
  testing::ScopedTempDir dir;
  std::string model = dir.file("prelu-symbol.json");
  std::string data = dir.file("data.npy");
  std::string gamma = dir.file("gamma.npy");
  Tensor x{ir::TensorType{ir::DType::f32, {3, 4, 5}}};
  Tensor g{ir::TensorType{ir::DType::f32, {4}}};
  Files() {
    std::ofstream(model) << kModel;
    for (int64_t i = 0; i < x.size(); ++i) x.data<float>()[i] = std::sin(static_cast<float>(i)) * 2;
    for (int64_t c = 0; c < g.size(); ++c) g.data<float>()[c] = 0.1f + 0.2f * static_cast<float>(c);
    runtime::write_npy(data, x);
    runtime::write_npy(gamma, g);
  }
  std::string inputs() const { return fmt::format("'{}' --inputs data='{}' --inputs gamma='{}'", model, data, gamma); }
};

// d/dgamma_c sum(tanh(prelu(x))) = sum over x < 0 in channel c of (1 - y^2) x.
std::vector<double> expected_gamma_gradient(const Files& f) {
  std::vector<double> want(4, 0.0);
  for (int64_t i = 0; i < f.x.size(); ++i) {
    const double x = f.x.data<float>()[i];
    const int64_t c = (i / 5) % 4;
    if (x > 0) continue;
    const double y = std::tanh(f.g.data<float>()[c] * x);
    want[c] += (1 - y * y) * x;
  }
  return want;
}

TEST(CliBackward, ParamGradientMatchesTheFormulaFusedAndInterpreted) {
  Files f;
  const std::vector<double> want = expected_gamma_gradient(f);
  for (const char* engine : {"", "--interpreter"}) {
    SCOPED_TRACE(engine);
    const std::string out = f.dir.file(std::string("grads") + engine);
    const CliResult r = run_cli(fmt::format("run {} --backward --save-gradients '{}' --repeat 1 --json {}", f.inputs(),
                                            out, engine));
    ASSERT_EQ(r.status, 0) << r.err;
    const nlohmann::json j = parse_json(r);
    ASSERT_EQ(j["backward"]["gradients"].size(), 1u) << "gamma is the only param";
    EXPECT_EQ(j["backward"]["gradients"][0]["name"], "gamma");
    EXPECT_EQ(j["backward"]["head_grads"], nlohmann::json::array({"t_output_head_grad"}));
    const Tensor got = runtime::read_npy(out + "/gamma.npy");
    ASSERT_EQ(got.size(), 4);
    for (int c = 0; c < 4; ++c) EXPECT_NEAR(got.get_f64(c), want[c], 1e-5 * (1 + std::fabs(want[c]))) << c;
  }
}

TEST(CliBackward, TextReportListsGradientsAndTheBackwardsShare) {
  Files f;
  const CliResult r = run_cli(fmt::format("run {} --backward --wrt data --wrt gamma --repeat 1", f.inputs()));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("gradients (2 variables; head gradients of ones: t_output_head_grad)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("backward: forward+backward"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  data   f32[3,4,5]"), std::string::npos) << r.out;
}

TEST(CliBackward, Bf16GradientOfAnF32ParamIsF32AndClose) {
  Files f;
  const CliResult r = run_cli(fmt::format("run {} --backward --amp bf16 --json --repeat 1", f.inputs()));
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = parse_json(r);
  EXPECT_EQ(j["backward"]["gradients"][0]["dtype"], "f32");
  EXPECT_LT(j["max_rel_error"].get<double>(), 0.02) << "bf16 forward and backward against the f32 baseline";
}

TEST(CliBackward, MisuseIsOneCleanError) {
  Files f;
  CliResult r = run_cli(fmt::format("run {} --save-gradients '{}'", f.inputs(), f.dir.file("g")));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("need --backward"), std::string::npos) << r.err;
  r = run_cli(fmt::format("run {} --backward --wrt nope", f.inputs()));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("'nope': the graph has no variable of that name"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace ampfuse
