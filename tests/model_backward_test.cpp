// Every non-INT8 model of models/ differentiates (labels are random class ids, so that the
// loss heads give gradients): the backward graph builds (gradients of
// every param, head gradients of ones or the loss's own), runs fused in f32 and in bf16
// AMP, and equals the reference interpreter running the same graph: with the external ops
// on the interpreter too, f32 within 1e-5 of the largest |gradient| of each output and bf16
// within a few bf16 steps of it. With oneDNN the forward values differ by its summation
// order, and where that turns a near-tie of a max-pooling window (relu zeros against
// values of 1e-8) the whole gradient of the window goes to another element: exact for the
// values each path computed, but not within 1e-5 of the other path upstream of the pool
// (squeezenet: 90 of 36864 elements of the last pooled layer's weight gradient, then
// spreading). Models with max pooling get `onednn_tol` there.
#include "engine/execution/executor.h"
#include "engine/lower.h"
#include "ir/mxnet_json.h"
#include "runtime/interpreter.h"

#include "tests/model_files.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

namespace ampfuse::engine {
namespace {

using ampfuse::testing::models_dir;
using ampfuse::testing::relative_error;

using ir::DType;

struct BackwardCase {
  const char* file;
  std::map<std::string, ir::Shape> shapes;  // small spatial sizes: the interpreter is the oracle
  double f32_tol, bf16_tol;
  double onednn_tol;  // with oneDNN, f32 and bf16 (see the top of the file)
  bool big;  // too slow for the sanitizer build
  // The layout of the bf16 run with oneDNN (ExecutorOptions::layout): "auto" (channels-last
  // here) but where the case says why not.
  const char* bf16_onednn_layout = "auto";
};

const BackwardCase kModels[] = {
    {"mlp_legacy_000800-test-symbol.json", {{"data", {4, 32}}}, 1e-5, 0.02, 0.02, false},
    {"cifar_resnet20_v2-gluoncv-symbol.json", {{"data", {2, 3, 32, 32}}}, 1e-5, 0.02, 0.02, false},
    {"squeezenet_v1.1-mms-legacy-symbol.json", {{"data", {1, 3, 64, 64}}}, 1e-5, 0.02, 0.1, false},
    // bf16 rounds many pooled values to exact ties, so more windows route differently
    // (0.305 where oneDNN's bf16 convolutions run on AMX, Sapphire Rapids). Under ASan on
    // that CPU it took 279 s, most of CI's sanitizer run: the release build runs it.
    {"vgg_small-mkldnn-test-symbol.json", {{"data", {2, 3, 32, 32}}}, 1e-5, 0.02, 0.35, true},
    // Channels-last, oneDNN's bf16 convolutions run natively (AMX, AVX512-BF16) and round
    // otherwise than the reference's f32-computed ones; over 150 layers that flips ReLU masks
    // in stage 4 (1x1 maps at this size) and gradients there end up 0.67 away from the
    // reference's, as far as bf16 itself is from f32 on this input (`run --backward
    // --save-gradients`, bf16 against f32: 0.669 in either layout). In the model's layout
    // (oneDNN's NCHW gemm convolutions) it stays within 0.1; f32 covers channels-last (4e-6).
    {"resnet152-mxnet-symbolic-symbol.json", {{"data", {1, 3, 32, 32}}}, 1e-5, 0.03, 0.1, true, "keep"},
    {"densenet169-imagenet-legacy-symbol.json", {{"data", {1, 3, 32, 32}}}, 1e-5, 0.03, 0.1, true},
    // The feed-forward layers' relu: a pre-activation oneDNN's product puts on the other
    // side of 0 than the reference's passes or stops its whole gradient, as a pooling tie
    // does (bf16: up to 12% of the largest i2h weight gradient element).
    {"sockeye_transformer-parabank2-symbol.json",
     {{"source", {1, 100, 3}}, {"target", {1, 100}}, {"target_label", {1, 100}}}, 1e-5, 0.05, 0.15, true},
    // Embedding -> 2-layer LSTM -> FullyConnected -> SoftmaxOutput over 10 positions.
    {"lstm_ptb_fusedrnn-mms-symbol.json", {{"data", {5, 2}}, {"softmax_label", {10}}}, 1e-5, 0.02, 0.02, false},
};

void PrintTo(const BackwardCase& m, std::ostream* os) { *os << m.file; }

runtime::Bindings with_head_grads(const ir::Graph& g, const std::vector<std::string>& heads, runtime::Bindings vars) {
  for (const std::string& name : heads) {
    const ir::TensorType t = g.nodes.at(*g.find_var(name)).outputs.at(0);
    runtime::Tensor ones(ir::TensorType{DType::f64, t.shape});
    for (int64_t i = 0; i < ones.size(); ++i) ones.data<double>()[i] = 1;
    vars[name] = runtime::cast(ones, t.dtype);
  }
  return vars;
}

class ModelBackward : public ::testing::TestWithParam<BackwardCase> {};

TEST_P(ModelBackward, FusedGradientsEqualTheInterpreter) {
  const BackwardCase& m = GetParam();
#if defined(__SANITIZE_ADDRESS__)
  if (m.big) GTEST_SKIP() << m.file << " takes minutes under ASan; the release build runs it";
#endif
  const std::string path = models_dir() + "/" + m.file;
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no model at " << path;
  ir::MxnetImportOptions io;
  io.input_shapes = m.shapes;
  const ir::Graph g = ir::load_mxnet_json_file(path, io);
  const runtime::Bindings f32_vars = runtime::random_bindings(g, 2024);

  for (const bool onednn : {false, true})
  for (const char* target : {"off", "bf16"}) {
    SCOPED_TRACE(std::string(target) + (onednn ? " with oneDNN" : " on the interpreter's external kernels"));
    ExecutorOptions eo;
    eo.backward = BackwardOptions{};
    eo.use_onednn = onednn;
    if (std::string(target) == "bf16") {
      eo.amp.emplace();
      eo.amp->target = DType::bf16;
      if (onednn) eo.layout = m.bf16_onednn_layout;
    }
    const Executable exe = Executable::compile(g, eo);
    const CompileStats& st = exe.compile_stats();
    EXPECT_TRUE(st.fallbacks.empty()) << st.fallbacks[0];
    ASSERT_FALSE(st.gradient_of.empty());
    // The graph the executable runs (converted, differentiated) on the interpreter.
    runtime::Bindings vars;
    for (const ir::Node& n : exe.graph().nodes)
      if (n.is_var() && f32_vars.count(n.name))
        vars[n.name] = f32_vars.at(n.name).dtype() == n.outputs[0].dtype ? f32_vars.at(n.name)
                                                                          : runtime::cast(f32_vars.at(n.name), n.outputs[0].dtype);
    vars = with_head_grads(exe.graph(), st.head_grads, vars);
    const std::vector<runtime::Tensor> want = runtime::interpret(exe.graph(), vars);
    const std::vector<runtime::Tensor> got = exe.run(vars);
    ASSERT_EQ(got.size(), st.forward_outputs + st.gradient_of.size());
    double tol = std::string(target) == "off" ? m.f32_tol : m.bf16_tol;
    if (onednn) tol = std::max(tol, m.onednn_tol);
    double worst = 0;
    for (size_t v = 0; v < st.gradient_of.size(); ++v) {
      const size_t o = st.forward_outputs + v;
      ASSERT_EQ(got[o].type(), want[o].type()) << st.gradient_of[v];
      const double err = relative_error(got[o], want[o]);
      worst = std::max(worst, err);
      EXPECT_LE(err, tol) << "gradient of " << st.gradient_of[v];
    }
    RecordProperty(std::string(target) + (onednn ? "_onednn" : "") + "_worst_gradient_error", std::to_string(worst));
  }
}

std::string case_name(const ::testing::TestParamInfo<BackwardCase>& info) {
  std::string s = info.param.file;
  s = s.substr(0, s.find("-"));
  std::replace_if(s.begin(), s.end(), [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); }, '_');
  return s;
}

INSTANTIATE_TEST_SUITE_P(Models, ModelBackward, ::testing::ValuesIn(kModels), case_name);

}  // namespace
}  // namespace ampfuse::engine
