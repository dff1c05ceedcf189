// Every non-INT8 model of models/ runs end to end through the executor (fused
// kernels, oneDNN and reference external ops) under --amp off, bf16 and fp16, and agrees
// with the f32 reference interpreter within the tolerance stated per model.
#include "engine/lower.h"
#include "engine/execution/executor.h"
#include "ir/mxnet_json.h"

#include "tests/model_files.h"

#include <gtest/gtest.h>

#include <cstring>

#include <algorithm>
#include <cmath>
#include <filesystem>

namespace ampfuse::engine {
namespace {

using ampfuse::testing::models_dir;
using ampfuse::testing::relative_error;

using ir::DType;

struct ModelCase {
  const char* file;
  std::map<std::string, ir::Shape> shapes;
  // Largest |difference| over an output as a fraction of its largest |f32 value|:
  // f32 fused (only transcendental ULPs and oneDNN's summation order differ), bf16 (8
  // significant bits, 2^-9 per rounding) and fp16 (11 bits).
  double f32_tol, bf16_tol, fp16_tol;
  bool big;  // too slow for the sanitizer build
  // Ops kept in f32 for this model (AmpOptions::fp32_ops).
  std::vector<std::string> fp32_ops = {};
};

const ModelCase kModels[] = {
    {"mlp_legacy_000800-test-symbol.json", {{"data", {4, 32}}}, 1e-4, 0.02, 0.005, false},
    {"lstm_ptb_fusedrnn-mms-symbol.json", {{"data", {35, 1}}, {"softmax_label", {35}}}, 1e-4, 0.02, 0.005, false},
    {"cifar_resnet20_v2-gluoncv-symbol.json", {{"data", {1, 3, 32, 32}}}, 1e-4, 0.02, 0.005, false},
    {"squeezenet_v1.1-mms-legacy-symbol.json", {{"data", {1, 3, 64, 64}}}, 1e-4, 0.02, 0.005, false},
    {"vgg_small-mkldnn-test-symbol.json", {{"data", {1, 3, 32, 32}}}, 1e-4, 0.02, 0.005, false},
    {"resnet152-mxnet-symbolic-symbol.json", {{"data", {1, 3, 224, 224}}}, 1e-4, 0.03, 0.01, true},
    {"densenet169-imagenet-legacy-symbol.json", {{"data", {1, 3, 224, 224}}}, 1e-4, 0.03, 0.01, true},
    {"sockeye_transformer-parabank2-symbol.json",
     {{"source", {1, 100, 3}}, {"target", {1, 100}}, {"target_label", {1, 100}}},  // its length is fixed
     1e-4, 0.03, 0.01, true,
     // Seeded random embeddings are ~1/sqrt(32k) = 0.006, added to positional encodings of
     // magnitude 1: in bf16 (steps of 2^-8 there) and even fp16 the token signal rounds
     // away and the outputs differ by 25-30%. With Embedding in f32 the sum is f32 (a
     // widest op) and the error is 0.1% (fp16) to 0.5% (bf16).
     {"Embedding"}},
};

void PrintTo(const ModelCase& m, std::ostream* os) { *os << m.file; }

class ModelRun : public ::testing::TestWithParam<ModelCase> {};

TEST_P(ModelRun, FusedAmpRunsAgreeWithTheF32Interpreter) {
  const ModelCase& m = GetParam();
#if defined(__SANITIZE_ADDRESS__)
  if (m.big) GTEST_SKIP() << m.file << " takes minutes under ASan; the release build runs it";
#endif
  const std::string path = models_dir() + "/" + m.file;
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no model at " << path;
  ir::MxnetImportOptions io;
  io.input_shapes = m.shapes;
  ir::Graph g = ir::load_mxnet_json_file(path, io);
  // A softmax over many random-weight classes is nearly flat and hides errors; compare the
  // logits too.
  for (size_t o = 0, n = g.outputs.size(); o < n; ++o)
    if (g.node(g.outputs[o]).op == "SoftmaxOutput") g.outputs.push_back(g.node(g.outputs[o]).inputs[0]);
  const runtime::Bindings vars = runtime::random_bindings(g, 2024);
  const std::vector<runtime::Tensor> want = runtime::interpret(g, vars);

  for (const char* target : {"off", "bf16", "fp16"}) {
    SCOPED_TRACE(target);
    ir::Graph run_graph = g;
    double tol = m.f32_tol;
    if (std::string(target) != "off") {
      AmpOptions o;
      o.target = std::string(target) == "bf16" ? DType::bf16 : DType::f16;
      o.fp32_ops = m.fp32_ops;
      tol = o.target == DType::bf16 ? m.bf16_tol : m.fp16_tol;
      run_graph = convert_for_amp(g, o);
    }
    // Weights stay bound and BatchNorms after convolutions are folded, as in `ampfuse run`:
    // the second run reuses what was computed from the weights alone (folded, widened and
    // reordered weights) and must give the same bits.
    ExecutorOptions eo;
    eo.constant_params = true;
    eo.fold_batchnorm = true;
    const Executable exe = Executable::compile(run_graph, eo);
    EXPECT_TRUE(exe.compile_stats().fallbacks.empty()) << exe.compile_stats().fallbacks[0];
    const std::vector<runtime::Tensor> got = exe.run(vars);
    RunStats again;
    const std::vector<runtime::Tensor> second = exe.run(vars, &again);
    EXPECT_TRUE(again.reused_constants);
    ASSERT_EQ(got.size(), want.size());
    for (size_t o = 0; o < got.size(); ++o)
      EXPECT_EQ(0, std::memcmp(got[o].raw(), second[o].raw(), got[o].bytes())) << "second run, output " << o;
    for (size_t o = 0; o < want.size(); ++o) {
      ASSERT_EQ(got[o].type(), want[o].type()) << "output " << o;
      const double err = relative_error(got[o], want[o]);
      EXPECT_LE(err, tol) << "output " << o << " (" << g.output_name(o) << ")";
      RecordProperty(std::string(target) + "_output" + std::to_string(o) + "_error", std::to_string(err));
    }
  }
}

std::string case_name(const ::testing::TestParamInfo<ModelCase>& info) {
  std::string s = info.param.file;
  s = s.substr(0, s.find("-"));
  std::replace_if(s.begin(), s.end(), [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); }, '_');
  return s;
}

INSTANTIATE_TEST_SUITE_P(Models, ModelRun, ::testing::ValuesIn(kModels), case_name);

}  // namespace
}  // namespace ampfuse::engine
