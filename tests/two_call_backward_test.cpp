// Training executables in two calls (Executable::run_forward / run_backward), as MXNet's
// autograd calls a region: the forward half keeps its values, the backward half runs on
// them, and together they give run()'s results bit for bit. The planner makes that possible
// by keeping forward and backward nodes in separate kernels, forward steps first
// (PlannerOptions::backward_nodes); the plan checks below are what it promises.
#include "engine/execution/executor.h"
#include "engine/passes/training_mode.h"
#include "ir/error.h"
#include "ir/mxnet_json.h"
#include "ir/text_format.h"
#include "ir/type_inference.h"
#include "runtime/interpreter.h"
#include "runtime/team_policy.h"

#include "tests/model_files.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

namespace ampfuse::engine {
namespace {

using ampfuse::testing::models_dir;
using ir::DType;

struct TwoCallCase {
  const char* file;
  std::map<std::string, ir::Shape> shapes;
  bool training_form;  // batch statistics and Dropout; moving statistics as extra forward outputs
  // The output is a loss layer (SoftmaxOutput), whose gradient needs no head gradient: the
  // whole plan is the forward half and the backward half runs nothing.
  bool loss_head;
};

const TwoCallCase kCases[] = {
    {"mlp_legacy_000800-test-symbol.json", {{"data", {4, 32}}}, false, true},
    {"lstm_ptb_fusedrnn-mms-symbol.json", {{"data", {5, 2}}, {"softmax_label", {10}}}, false, true},
    {"cifar_resnet20_v2-gluoncv-symbol.json", {{"data", {2, 3, 32, 32}}}, false, false},
    {"cifar_resnet20_v2-gluoncv-symbol.json", {{"data", {2, 3, 32, 32}}}, true, false},
    {"bench/transformer_encoder_layer-symbol.json", {{"data", {2, 8, 256}}}, true, true},
};

void PrintTo(const TwoCallCase& c, std::ostream* os) { *os << c.file << (c.training_form ? " (training form)" : ""); }

bool same_bits(const runtime::Tensor& a, const runtime::Tensor& b) {
  return a.type() == b.type() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}

// Random values for every variable of the compiled graph (head gradients included), in
// its types.
runtime::Bindings bindings_for(const Executable& exe, uint64_t seed) {
  runtime::Bindings vars = runtime::random_bindings(exe.graph(), seed);
  for (const ir::Node& n : exe.graph().nodes)
    if (n.is_var() && vars.count(n.name) && vars.at(n.name).dtype() != n.outputs[0].dtype)
      vars[n.name] = runtime::cast(vars.at(n.name), n.outputs[0].dtype);
  return vars;
}

// `vars` split into the forward's bindings and the head gradients.
std::pair<runtime::Bindings, runtime::Bindings> split_heads(const Executable& exe, runtime::Bindings vars) {
  runtime::Bindings heads;
  for (const std::string& name : exe.compile_stats().head_grads) heads[name] = vars.at(name), vars.erase(name);
  return {vars, heads};
}

std::vector<runtime::Tensor> forward_buffers(const Executable& exe) {
  std::vector<runtime::Tensor> out;
  for (size_t i = 0; i < exe.compile_stats().forward_outputs; ++i) out.emplace_back(exe.graph().type(exe.graph().outputs[i]));
  return out;
}

Executable compile_case(const TwoCallCase& c, const char* target) {
  ir::MxnetImportOptions io;
  io.input_shapes = c.shapes;
  ir::Graph g = ir::load_mxnet_json_file(models_dir() + "/" + c.file, io);
  ExecutorOptions eo;
  eo.backward = BackwardOptions{};
  eo.backward->with_inputs = true;  // a region inside a network: the data's gradient too
  if (c.training_form) eo.training = TrainingOptions{7, 0, ""};
  if (std::string(target) == "bf16") {
    eo.amp.emplace();
    eo.amp->target = DType::bf16;
  }
  return Executable::compile(std::move(g), eo);
}

class TwoCallBackward : public ::testing::TestWithParam<TwoCallCase> {};

// Every run with teams of threads, so that this test is about the two calls alone: whether
// a run that goes solo on a busy machine (runtime/team_policy.h) gives a team run's bits is
// TeamPolicy's tests' question (a bf16 training step's convolution weight gradients once
// did not, on a Sapphire Rapids: TeamPolicy.SoloRunsOfABf16TrainingStepGiveTheTeamRunsBits).
class AlwaysTeams {
 public:
  AlwaysTeams() : before_(runtime::set_team_choice(runtime::TeamChoice::always)) {}
  ~AlwaysTeams() { runtime::set_team_choice(before_); }

 private:
  runtime::TeamChoice before_;
};

TEST_P(TwoCallBackward, HalvesEqualOneRunBitForBit) {
  const TwoCallCase& c = GetParam();
  if (!std::filesystem::exists(models_dir() + "/" + c.file)) GTEST_SKIP() << "no model " << c.file;
  const AlwaysTeams teams;
  for (const char* target : {"off", "bf16"}) {
    SCOPED_TRACE(target);
    const Executable exe = compile_case(c, target);
    const CompileStats& st = exe.compile_stats();
    ASSERT_TRUE(exe.splits_at_head_grads());
    ASSERT_EQ(st.head_grads.empty(), c.loss_head);
    const runtime::Bindings all = bindings_for(exe, 11);
    const std::vector<runtime::Tensor> want = exe.run(all);
    auto [forward_vars, heads] = split_heads(exe, all);
    std::vector<runtime::Tensor> forward_out = forward_buffers(exe);
    ForwardPass pass = exe.run_forward(forward_vars, forward_out);
    ASSERT_TRUE(pass);
    for (size_t i = 0; i < forward_out.size(); ++i) EXPECT_TRUE(same_bits(forward_out[i], want[i])) << "forward output " << i;
    const std::vector<runtime::Tensor> grads = exe.run_backward(std::move(pass), heads);
    ASSERT_EQ(grads.size(), st.gradient_of.size());
    for (size_t j = 0; j < grads.size(); ++j)
      EXPECT_TRUE(same_bits(grads[j], want[st.forward_outputs + j])) << "gradient of " << st.gradient_of[j];
  }
}

// Two forwards in flight hold two memories: each backward gets its own forward's values.
TEST_P(TwoCallBackward, InterleavedPassesKeepTheirOwnValues) {
  const TwoCallCase& c = GetParam();
  if (!std::filesystem::exists(models_dir() + "/" + c.file)) GTEST_SKIP() << "no model " << c.file;
  const AlwaysTeams teams;
  const Executable exe = compile_case(c, "off");
  const CompileStats& st = exe.compile_stats();
  const runtime::Bindings a = bindings_for(exe, 1), b = bindings_for(exe, 2);
  const std::vector<runtime::Tensor> want_a = exe.run(a), want_b = exe.run(b);
  auto [fa, ha] = split_heads(exe, a);
  auto [fb, hb] = split_heads(exe, b);
  std::vector<runtime::Tensor> out_a = forward_buffers(exe), out_b = forward_buffers(exe);
  ForwardPass pass_a = exe.run_forward(fa, out_a);
  ForwardPass pass_b = exe.run_forward(fb, out_b);
  const std::vector<runtime::Tensor> grads_b = exe.run_backward(std::move(pass_b), hb);
  const std::vector<runtime::Tensor> grads_a = exe.run_backward(std::move(pass_a), ha);
  for (size_t j = 0; j < grads_a.size(); ++j) {
    EXPECT_TRUE(same_bits(grads_a[j], want_a[st.forward_outputs + j])) << "first pass, gradient of " << st.gradient_of[j];
    EXPECT_TRUE(same_bits(grads_b[j], want_b[st.forward_outputs + j])) << "second pass, gradient of " << st.gradient_of[j];
  }
}

// Fused kernels of `plan` that store both a value that depends on a head gradient of
// `heads` and one that does not, and those that store any dependent value.
struct KernelHalves {
  int mixed = 0, backward = 0;
};
KernelHalves kernel_halves(const ir::Graph& g, const Plan& plan, const std::vector<std::string>& heads) {
  std::vector<bool> late(g.nodes.size(), false);
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const ir::Node& node = g.nodes[n];
    late[n] = node.is_var() ? std::find(heads.begin(), heads.end(), node.name) != heads.end()
                            : std::any_of(node.inputs.begin(), node.inputs.end(), [&](ir::ValueRef v) { return late[v.node]; });
  }
  KernelHalves h;
  for (const PlanStep& step : plan.steps) {
    const auto* k = std::get_if<FusedKernel>(&step);
    if (!k) continue;
    bool any_late = false, any_early = false;
    for (const KernelOperand& o : k->outputs) (late[o.value.node] ? any_late : any_early) = true;
    h.mixed += any_late && any_early;
    h.backward += any_late;
  }
  return h;
}

// No fused kernel stores both halves' values.
TEST_P(TwoCallBackward, KernelsNeverMixTheHalves) {
  const TwoCallCase& c = GetParam();
  if (!std::filesystem::exists(models_dir() + "/" + c.file)) GTEST_SKIP() << "no model " << c.file;
  const Executable exe = compile_case(c, "bf16");
  const KernelHalves h = kernel_halves(exe.graph(), exe.plan(), exe.compile_stats().head_grads);
  EXPECT_EQ(h.mixed, 0);
  if (c.loss_head)
    EXPECT_EQ(h.backward, 0);  // no head gradient: nothing waits for the second call
  else
    EXPECT_GT(h.backward, 0);  // the check looked at backward kernels
}

std::string case_name(const ::testing::TestParamInfo<TwoCallCase>& info) {
  std::string s = info.param.file;
  s = s.substr(s.rfind('/') + 1);
  s = s.substr(0, s.find("-"));
  std::replace_if(s.begin(), s.end(), [](char ch) { return !std::isalnum(static_cast<unsigned char>(ch)); }, '_');
  return s + (info.param.training_form ? "_training" : "");
}

INSTANTIATE_TEST_SUITE_P(Models, TwoCallBackward, ::testing::ValuesIn(kCases), case_name);

// ---- misuse ---------------------------------------------------------------------------------

// An output without a loss head, so that backward takes a head gradient.
ir::Graph small_graph() {
  ir::Graph g = ir::parse_graph(R"(graph {
    %x = var input : f32[4, 8]
    %w = var param : f32[4, 8]
    %m = elemwise_mul(%x, %w)
    %t = relu(%m)
    return %t
  })");
  ir::infer_types(g);
  return g;
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// relu's derivative reads the forward's value and the head gradient under the same map:
// without PlannerOptions::backward_nodes it joins the forward kernel, which then stores the
// model's output only once the head gradient is there. lower() keeps it apart.
TEST(TwoCallBackwardPlan, ElementwiseDerivativeStaysOutOfTheForwardKernel) {
  ExecutorOptions eo;
  eo.backward = BackwardOptions{};
  const Executable exe = Executable::compile(small_graph(), eo);
  const std::vector<std::string>& heads = exe.compile_stats().head_grads;
  EXPECT_TRUE(exe.splits_at_head_grads());
  const KernelHalves apart = kernel_halves(exe.graph(), exe.plan(), heads);
  EXPECT_EQ(apart.mixed, 0);
  EXPECT_GT(apart.backward, 0);
  const KernelHalves joined = kernel_halves(exe.graph(), plan_fusion(exe.graph(), PlannerOptions{}), heads);
  EXPECT_GT(joined.mixed, 0) << "the graph no longer shows what the separation prevents";
}

TEST(TwoCallBackwardErrors, NeedsABackwardExecutable) {
  const Executable exe = Executable::compile(small_graph());
  EXPECT_FALSE(exe.splits_at_head_grads());
  std::vector<runtime::Tensor> none;
  EXPECT_NE(error_of([&] { exe.run_forward(runtime::random_bindings(exe.graph(), 1), none); })
                .find("compiled without backward"),
            std::string::npos);
}

TEST(TwoCallBackwardErrors, WrongBuffersPassesAndMissingHeadGradients) {
  ExecutorOptions eo;
  eo.backward = BackwardOptions{};
  const Executable exe = Executable::compile(small_graph(), eo);
  const Executable other = Executable::compile(small_graph(), eo);
  auto [vars, heads] = split_heads(exe, bindings_for(exe, 3));
  std::vector<runtime::Tensor> none;
  ASSERT_EQ(exe.compile_stats().head_grads.size(), 1u);
  EXPECT_NE(error_of([&] { exe.run_forward(vars, none); }).find("0 output buffers given for 1 forward outputs"),
            std::string::npos);
  std::vector<runtime::Tensor> wrong{runtime::Tensor(ir::TensorType{DType::f16, {4, 8}})};
  EXPECT_NE(error_of([&] { exe.run_forward(vars, wrong); }).find("its buffer is f16"), std::string::npos);
  std::vector<runtime::Tensor> out = forward_buffers(exe);
  EXPECT_NE(error_of([&] { exe.run_backward(ForwardPass(), heads); }).find("empty or from another executable"),
            std::string::npos);
  EXPECT_NE(error_of([&] { other.run_backward(exe.run_forward(vars, out), heads); }).find("from another executable"),
            std::string::npos);
  // A missing head gradient names the variable; the executable still serves later calls.
  const std::string missing = error_of([&] { exe.run_backward(exe.run_forward(vars, out), {}); });
  EXPECT_NE(missing.find(exe.compile_stats().head_grads[0]), std::string::npos) << missing;
  EXPECT_EQ(exe.run_backward(exe.run_forward(vars, out), heads).size(), exe.compile_stats().gradient_of.size());
}

}  // namespace
}  // namespace ampfuse::engine
