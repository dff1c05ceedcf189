// The CI subset of the GluonCV model-zoo corpus (tests/zoo/zoo.py, docs/model_zoo.md): small
// GluonCV architectures exported by MXNet 1.9.1 with random weights, and MXNet's own outputs
// for one input (tests/data/zoo/NAME, written by tests/zoo/make_fixtures.py). ampfuse runs
// them with MXNet's weights (the reference interpreter, the fused executor, and the fused
// executor under bf16 AMP) and must give MXNet's results: the oracle here is MXNet itself,
// not ampfuse's interpreter.
#include "engine/execution/executor.h"
#include "engine/lower.h"
#include "ir/mxnet_json.h"
#include "runtime/interpreter.h"
#include "runtime/npy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

namespace ampfuse::engine {
namespace {

namespace fs = std::filesystem;

// Tolerances relative to the largest |value| of each MXNet output (as tests/zoo/zoo.py):
// f32 differs by summation order only; bf16 is compared with MXNet's f32 output and may be
// off by 5% or twice MXNet's own bf16 error, whichever is larger.
constexpr double kF32Tol = 1e-4;
constexpr double kBf16Tol = 5e-2;

struct ZooModel {
  const char* name;
  size_t outputs;
};

const ZooModel kZoo[] = {{"cifar_resnet20_v1", 1}, {"mobilenet0.25", 1}};

void PrintTo(const ZooModel& m, std::ostream* os) { *os << m.name; }

fs::path fixture_dir(const ZooModel& m) { return fs::path(AMPFUSE_TESTDATA_DIR) / "zoo" / m.name; }

// Largest |got - want| relative to the largest |want| (non-finite differences count as inf).
double relative_error(const runtime::Tensor& got, const runtime::Tensor& want) {
  const std::vector<double> a = runtime::to_f64_vector(got), b = runtime::to_f64_vector(want);
  if (a.size() != b.size()) return INFINITY;
  double largest = 0, worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    largest = std::max(largest, std::fabs(b[i]));
    const double d = std::fabs(a[i] - b[i]);
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
  }
  return worst / std::max(largest, 1e-30);
}

// The exported graph, with its input's shape taken from the fixture's input.
ir::Graph load_graph(const fs::path& dir, const runtime::Tensor& data) {
  ir::MxnetImportOptions io;
  io.input_shapes["data"] = data.shape();
  return ir::load_mxnet_json_file((dir / "model-symbol.json").string(), io);
}

// MXNet's weights, one .npy a variable (named as in the symbol).
runtime::Bindings load_bindings(const fs::path& dir, const runtime::Tensor& data) {
  runtime::Bindings vars{{"data", data}};
  for (const auto& entry : fs::directory_iterator(dir / "weights"))
    vars.emplace(entry.path().stem().string(), runtime::read_npy(entry.path().string()));
  return vars;
}

std::vector<runtime::Tensor> load_outputs(const fs::path& dir, size_t n) {
  std::vector<runtime::Tensor> out;
  for (size_t k = 0; k < n; ++k) out.push_back(runtime::read_npy((dir / (std::to_string(k) + ".npy")).string()));
  return out;
}

class GluoncvModel : public testing::TestWithParam<ZooModel> {};

TEST_P(GluoncvModel, AmpfuseGivesMxnetsOutputs) {
  const ZooModel& m = GetParam();
  const fs::path dir = fixture_dir(m);
  ASSERT_TRUE(fs::exists(dir / "model-symbol.json")) << "missing fixture " << dir;
  const runtime::Tensor data = runtime::read_npy((dir / "data.npy").string());
  const ir::Graph g = load_graph(dir, data);
  const runtime::Bindings vars = load_bindings(dir, data);
  const std::vector<runtime::Tensor> mxnet_f32 = load_outputs(dir / "mxnet_f32", m.outputs);
  const std::vector<runtime::Tensor> mxnet_bf16 = load_outputs(dir / "mxnet_bf16", m.outputs);
  ASSERT_EQ(g.outputs.size(), m.outputs);

  const auto check = [&](const std::vector<runtime::Tensor>& got, bool bf16, const char* what) {
    ASSERT_EQ(got.size(), mxnet_f32.size()) << what;
    for (size_t o = 0; o < got.size(); ++o) {
      ASSERT_EQ(got[o].shape(), mxnet_f32[o].shape()) << what << ", output " << o;
      const double tol = bf16 ? std::max(kBf16Tol, 2 * relative_error(mxnet_bf16[o], mxnet_f32[o])) : kF32Tol;
      const double err = relative_error(got[o], mxnet_f32[o]);
      EXPECT_LE(err, tol) << what << ", output " << o << " (" << g.output_name(o) << ")";
      RecordProperty(std::string(what) + "_error", std::to_string(err));
    }
  };

  check(runtime::interpret(g, vars), false, "interpreter f32");
  ExecutorOptions eo;
  eo.constant_params = true;
  eo.fold_batchnorm = true;
  check(Executable::compile(g, eo).run(vars), false, "fused f32");
  AmpOptions amp;
  amp.target = ir::DType::bf16;
  check(Executable::compile(convert_for_amp(g, amp), eo).run(vars), true, "fused bf16");
}

// The comparison can fail: a changed weight moves the result outside the f32 tolerance.
TEST(ZooModelsCheck, AChangedWeightIsCaught) {
  const ZooModel& m = kZoo[0];
  const fs::path dir = fixture_dir(m);
  ASSERT_TRUE(fs::exists(dir / "model-symbol.json")) << "missing fixture " << dir;
  const runtime::Tensor data = runtime::read_npy((dir / "data.npy").string());
  const ir::Graph g = load_graph(dir, data);
  runtime::Bindings vars = load_bindings(dir, data);
  const std::vector<runtime::Tensor> mxnet_f32 = load_outputs(dir / "mxnet_f32", m.outputs);
  // The last layer's bias moves every logit of one class.
  auto bias = std::find_if(vars.begin(), vars.end(), [](const auto& kv) {
    return kv.first.find("dense") != std::string::npos && kv.first.ends_with("_bias");
  });
  ASSERT_NE(bias, vars.end());
  runtime::Tensor changed = bias->second.clone();
  changed.set_f64(0, changed.get_f64(0) + 0.05);
  bias->second = changed;
  EXPECT_GT(relative_error(runtime::interpret(g, vars)[0], mxnet_f32[0]), kF32Tol);
}

std::string case_name(const testing::TestParamInfo<ZooModel>& info) {
  std::string s = info.param.name;
  std::replace_if(s.begin(), s.end(), [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); }, '_');
  return s;
}

INSTANTIATE_TEST_SUITE_P(ZooModels, GluoncvModel, testing::ValuesIn(kZoo), case_name);

}  // namespace
}  // namespace ampfuse::engine
