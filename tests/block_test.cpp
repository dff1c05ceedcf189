// Blocks (engine/api/block.h): eager vs hybridized, traces and plans per signature and size,
// AMP from the environment, init and scopes at trace time, per-node disable, and the
// weight-cast cache over an unrolled recurrent cell.
#include "engine/api/amp_scope.h"
#include "engine/api/block.h"
#include "runtime/kernel_cache.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>

namespace ampfuse::engine {
namespace {

using ir::DType;
using runtime::Tensor;

Tensor random(DType dt, ir::Shape shape, uint64_t seed, double scale = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-scale, scale);
  Tensor t({dt, std::move(shape)});
  for (int64_t i = 0; i < t.size(); ++i) t.set_f64(i, u(rng));
  return t;
}

void expect_close(const Tensor& want, const Tensor& got, double atol, double rtol = 0) {
  ASSERT_EQ(want.type(), got.type());
  for (int64_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(want.get_f64(i), got.get_f64(i), atol + rtol * std::fabs(want.get_f64(i))) << "element " << i;
}

// Resets AMP state around each test.
class BlockTest : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override { clear(); }
  static void clear() {
    amp::reset();
    ::unsetenv("MXNET_AMP_FUSE");
    ::unsetenv("AMPFUSE_AMP_DTYPE");
  }
};

// Dense(16) -> relu -> Dense(8) -> tanh, with `dense1` optionally run in f32 under AMP.
std::unique_ptr<FunctionBlock> mlp(bool dense1_amp_off = false) {
  auto b = std::make_unique<FunctionBlock>("mlp", [dense1_amp_off](F& f, const std::vector<Sym>& in) {
    Sym h = f.fully_connected(in[0], f.param("w0"), f.param("b0"), 16, "dense0");
    h = f.activation(h, "relu");
    Sym y;
    if (dense1_amp_off) {
      F::AmpOff off(f);
      y = f.fully_connected(h, f.param("w1"), f.param("b1"), 8, "dense1");
    } else {
      y = f.fully_connected(h, f.param("w1"), f.param("b1"), 8, "dense1");
    }
    return std::vector<Sym>{f.tanh(y)};
  });
  b->add_param("w0", random(DType::f32, {16, 12}, 1, 0.3));
  b->add_param("b0", random(DType::f32, {16}, 2, 0.1));
  b->add_param("w1", random(DType::f32, {8, 16}, 3, 0.3));
  b->add_param("b1", random(DType::f32, {8}, 4, 0.1));
  return b;
}

// Whether any value of the graph has dtype `dt`.
bool has_dtype(const ir::Graph& g, DType dt) {
  for (const ir::Node& n : g.nodes)
    for (const ir::TensorType& t : n.outputs)
      if (t.dtype == dt) return true;
  return false;
}

const ir::Node& node_named(const ir::Graph& g, const std::string& name) {
  for (const ir::Node& n : g.nodes)
    if (n.name == name) return n;
  throw std::runtime_error("no node " + name);
}

TEST_F(BlockTest, EagerAndHybridizedAgree) {
  auto b = mlp();
  const Tensor x = random(DType::f32, {4, 12}, 9);
  const Tensor eager = (*b)({x}).at(0);
  EXPECT_EQ(b->stats().eager_calls, 1);
  EXPECT_EQ(b->last_executable(), nullptr);
  b->hybridize();
  const Tensor hybrid = (*b)({x}).at(0);
  ASSERT_NE(b->last_executable(), nullptr);
  EXPECT_FALSE(b->last_amp_stats().has_value());
  EXPECT_FALSE(has_dtype(b->last_executable()->graph(), DType::bf16));
  expect_close(eager, hybrid, 1e-5, 1e-5);
  EXPECT_EQ(b->stats().hybrid_calls, 1);
}

TEST_F(BlockTest, HybridizedTracesOnceAndReplays) {
  auto b = mlp();
  b->hybridize();
  const Tensor x = random(DType::f32, {4, 12}, 9);
  const Tensor first = (*b)({x}).at(0);
  for (int i = 0; i < 4; ++i) {
    const Tensor again = (*b)({x}).at(0);
    expect_close(first, again, 0);
  }
  EXPECT_EQ(b->stats().traces, 1);
  EXPECT_EQ(b->stats().plans, 1);
  EXPECT_EQ(b->stats().hybrid_calls, 5);
}

// tanh(x * w) + x with a broadcast weight: fused kernels only, so compilations count the
// signature exactly.
std::unique_ptr<FunctionBlock> pointwise() {
  auto b = std::make_unique<FunctionBlock>("pw", [](F& f, const std::vector<Sym>& in) {
    Sym y = f.tanh(f.broadcast_mul(in[0], f.param("w")));
    return std::vector<Sym>{f.broadcast_add(f.mul_scalar(y, 0.5), in[0])};
  });
  b->add_param("w", random(DType::f32, {8}, 5));
  return b;
}

TEST_F(BlockTest, NewSizeReplansWithoutCompilingNewSignatureCompiles) {
  runtime::KernelCache cache;  // private: other tests' kernels do not count (outlives the block)
  auto b = pointwise();
  HybridizeOptions ho;
  ho.exec.cache = &cache;
  b->hybridize(ho);

  (*b)({random(DType::f32, {4, 8}, 1)});
  EXPECT_EQ(b->stats().traces, 1);
  EXPECT_GT(b->last_executable()->compile_stats().compilations, 0);
  const int64_t compiled = b->stats().compilations;

  // A new batch size: a new plan, nothing compiled.
  const Tensor x16 = random(DType::f32, {16, 8}, 2);
  const Tensor y16 = (*b)({x16}).at(0);
  EXPECT_EQ(b->stats().traces, 1);
  EXPECT_EQ(b->stats().plans, 2);
  EXPECT_EQ(b->last_executable()->compile_stats().compilations, 0);
  EXPECT_GT(b->last_executable()->compile_stats().cache_hits, 0);
  EXPECT_EQ(b->stats().compilations, compiled);
  b->hybridize(ho);  // drop traces; the eager path is the reference
  auto eager = pointwise();
  expect_close((*eager)({x16}).at(0), y16, 2e-6, 2e-6);

  // Back to the first size: the plan is kept.
  (*b)({random(DType::f32, {4, 8}, 1)});
  const int64_t plans = b->stats().plans;
  (*b)({random(DType::f32, {4, 8}, 3)});
  EXPECT_EQ(b->stats().plans, plans);

  // A new rank: a new signature, traced again. Its kernels walk [2, 4, 8] as [8, 8]
  // (codegen::coalesce_dimensions merges dimensions every operand walks as one), so they
  // are the rank-2 plan's: found in the cache, not compiled.
  const int64_t traces = b->stats().traces;
  (*b)({random(DType::f32, {2, 4, 8}, 3)});
  EXPECT_EQ(b->stats().traces, traces + 1);
  EXPECT_EQ(b->last_executable()->compile_stats().compilations, 0);
  EXPECT_GT(b->last_executable()->compile_stats().cache_hits, 0);

  // A new dtype: likewise.
  const Tensor xb = random(DType::bf16, {4, 8}, 4);
  EXPECT_ERROR((*b)({xb}), "block 'pw'");  // bf16 data with an f32 weight does not type
  b->param("w").set_data(random(DType::bf16, {8}, 5));
  (*b)({xb});
  EXPECT_EQ(b->stats().traces, traces + 3);  // the failed call traced too (its plan failed)
  EXPECT_GT(b->last_executable()->compile_stats().compilations, 0);
}

TEST_F(BlockTest, EnvironmentSwitchGivesAmpWithNoCodeChange) {
  const Tensor x = random(DType::f32, {4, 12}, 9);
  auto reference = mlp();
  const Tensor want = (*reference)({x}).at(0);

  ::setenv("MXNET_AMP_FUSE", "1", 1);
  auto b = mlp();
  b->hybridize();
  const Tensor got = (*b)({x}).at(0);
  ASSERT_TRUE(b->last_amp_stats().has_value());
  EXPECT_TRUE(has_dtype(b->last_executable()->graph(), DType::bf16));
  EXPECT_FALSE(has_dtype(b->last_executable()->graph(), DType::f16));
  EXPECT_EQ(got.dtype(), DType::f32);  // outputs keep their type
  expect_close(want, got, 0.05);

  ::setenv("AMPFUSE_AMP_DTYPE", "fp16", 1);
  const Tensor got16 = (*b)({x}).at(0);
  EXPECT_TRUE(has_dtype(b->last_executable()->graph(), DType::f16));
  expect_close(want, got16, 0.01);
  EXPECT_EQ(b->stats().traces, 2);

  ::setenv("MXNET_AMP_FUSE", "0", 1);
  (*b)({x});
  EXPECT_FALSE(b->last_amp_stats().has_value());
  EXPECT_FALSE(has_dtype(b->last_executable()->graph(), DType::bf16));
}

TEST_F(BlockTest, InitAfterTheBlockWasCompiledTakesEffectAtTheNextCall) {
  auto b = mlp();
  b->hybridize();
  const Tensor x = random(DType::f32, {4, 12}, 9);
  (*b)({x});
  EXPECT_FALSE(has_dtype(b->last_executable()->graph(), DType::bf16));
  amp::init(DType::bf16);  // MXNet warns here (#18902); here the next call traces with AMP
  (*b)({x});
  EXPECT_EQ(b->stats().traces, 2);
  EXPECT_TRUE(has_dtype(b->last_executable()->graph(), DType::bf16));
  // A Scope turns it off for a region: the f32 trace is reused.
  {
    amp::Scope off(false);
    (*b)({x});
    EXPECT_FALSE(has_dtype(b->last_executable()->graph(), DType::bf16));
  }
  (*b)({x});
  EXPECT_TRUE(has_dtype(b->last_executable()->graph(), DType::bf16));
  EXPECT_EQ(b->stats().traces, 2);
  // Init with other overrides is another state.
  amp::Overrides ov;
  ov.fp32_ops = {"FullyConnected"};
  amp::init(DType::bf16, ov);
  (*b)({x});
  EXPECT_EQ(b->stats().traces, 3);
  EXPECT_EQ(node_named(b->last_executable()->graph(), "dense0").outputs[0].dtype, DType::f32);
}

TEST_F(BlockTest, ScopeOnWithoutInitOrEnvironment) {
  auto b = mlp();
  b->hybridize();
  const Tensor x = random(DType::f32, {4, 12}, 9);
  amp::Scope on(DType::f16);
  (*b)({x});
  EXPECT_TRUE(has_dtype(b->last_executable()->graph(), DType::f16));
}

TEST_F(BlockTest, PerNodeDisableWorksInTracedBlocks) {
  amp::init(DType::bf16);
  const Tensor x = random(DType::f32, {4, 12}, 9);
  auto b = mlp(/*dense1_amp_off=*/true);
  b->hybridize();
  (*b)({x});
  const ir::Graph& g = b->last_executable()->graph();
  EXPECT_EQ(node_named(g, "dense0").outputs[0].dtype, DType::bf16);
  EXPECT_EQ(node_named(g, "dense1").outputs[0].dtype, DType::f32);
  EXPECT_EQ(node_named(g, "dense1").hints.at("__amp_disable__"), "1");
  // The same by attribute, and by name through init's excluded_nodes.
  auto by_attr = std::make_unique<FunctionBlock>("attr", [](F& f, const std::vector<Sym>& in) {
    return std::vector<Sym>{f.op("FullyConnected", {in[0], f.param("w"), f.param("b")},
                                 {{"num_hidden", "4"}, {"__amp_disable__", "1"}}, "fc")};
  });
  by_attr->add_param("w", random(DType::f32, {4, 12}, 1));
  by_attr->add_param("b", random(DType::f32, {4}, 2));
  by_attr->hybridize();
  (*by_attr)({x});
  EXPECT_EQ(node_named(by_attr->last_executable()->graph(), "fc").outputs[0].dtype, DType::f32);
  amp::Overrides ov;
  ov.excluded_nodes = {"dense0"};
  amp::init(DType::bf16, ov);
  auto excluded = mlp();
  excluded->hybridize();
  (*excluded)({x});
  EXPECT_EQ(node_named(excluded->last_executable()->graph(), "dense0").outputs[0].dtype, DType::f32);
  EXPECT_EQ(node_named(excluded->last_executable()->graph(), "dense1").outputs[0].dtype, DType::bf16);
}

// An RNN-like cell unrolled over 100 steps, sharing its weights:
//   h_t = tanh(FC(x_t; Wi, bi) + FC(h_{t-1}; Wh, bh))
constexpr int kSteps = 100;
std::unique_ptr<FunctionBlock> unrolled_rnn() {
  auto b = std::make_unique<FunctionBlock>("rnn", [](F& f, const std::vector<Sym>& in) {
    Sym h = in[1];
    for (int t = 0; t < kSteps; ++t) {
      const Sym xt = f.slice_axis(in[0], 1, t, t + 1);
      const Sym i2h = f.fully_connected(xt, f.param("i2h_weight"), f.param("i2h_bias"), 8);
      const Sym h2h = f.fully_connected(h, f.param("h2h_weight"), f.param("h2h_bias"), 8);
      h = f.tanh(f.add(i2h, h2h));
    }
    return std::vector<Sym>{h};
  });
  b->add_param("i2h_weight", random(DType::f32, {8, 4}, 11, 0.3));
  b->add_param("i2h_bias", random(DType::f32, {8}, 12, 0.1));
  b->add_param("h2h_weight", random(DType::f32, {8, 8}, 13, 0.3));
  b->add_param("h2h_bias", random(DType::f32, {8}, 14, 0.1));
  return b;
}

TEST_F(BlockTest, WeightCastCacheCastsEachWeightOncePerVersion) {
  amp::init(DType::bf16);
  auto b = unrolled_rnn();
  HybridizeOptions ho;
  // 200 tiny FullyConnected nodes: oneDNN's per-call primitive setup (~0.15 ms each) would
  // dominate the test's time; the reference kernels run them in microseconds.
  ho.exec.use_onednn = false;
  b->hybridize(ho);
  const Tensor x = random(DType::f32, {2, kSteps, 4}, 21);
  const Tensor h0 = random(DType::f32, {2, 8}, 22);
  for (int call = 0; call < 10; ++call) (*b)({x, h0});
  EXPECT_EQ(b->stats().traces, 1);
  EXPECT_EQ(b->stats().weight_casts, 4);  // each weight once, over 10 calls x 100 steps
  EXPECT_EQ(b->stats().weight_cast_hits, 4 * 9);
  // The graph reads the weights as bf16 inputs: no cast of a parameter inside it.
  const ir::Graph& g = b->last_executable()->graph();
  int param_vars = 0;
  for (const ir::Node& n : g.nodes) {
    if (n.is_var() && n.role == ir::VarRole::param) {
      ++param_vars;
      EXPECT_EQ(n.outputs[0].dtype, DType::bf16) << n.name;
    }
    if (n.op == "amp_cast" || n.op == "Cast") {
      const ir::Node& src = g.nodes[n.inputs[0].node];
      EXPECT_FALSE(src.is_var() && src.role == ir::VarRole::param) << n.name << " casts " << src.name;
    }
  }
  EXPECT_EQ(param_vars, 4);
  const Tensor cached = *b->cached_cast("h2h_weight", DType::bf16);
  EXPECT_EQ(cached.dtype(), DType::bf16);

  // Results follow the f32 reference within bf16 accuracy.
  auto reference = unrolled_rnn();
  expect_close((*reference)({x, h0}).at(0), (*b)({x, h0}).at(0), 0.05);

  // Updating one weight casts it once more; the others stay cached.
  b->param("h2h_weight").set_data(random(DType::f32, {8, 8}, 31, 0.3));
  for (int call = 0; call < 10; ++call) (*b)({x, h0});
  EXPECT_EQ(b->stats().weight_casts, 5);
  EXPECT_NE(b->cached_cast("h2h_weight", DType::bf16)->raw(), cached.raw());
  reference->param("h2h_weight").set_data(b->param("h2h_weight").data());
  expect_close((*reference)({x, h0}).at(0), (*b)({x, h0}).at(0), 0.05);

  // An optimizer step in place on every weight: each once more.
  for (const std::string& name : b->param_names()) {
    Tensor& w = const_cast<Tensor&>(b->param(name).data());
    for (int64_t i = 0; i < w.size(); ++i) w.set_f64(i, w.get_f64(i) * 0.5);
    b->param(name).mark_updated();
  }
  for (int call = 0; call < 10; ++call) (*b)({x, h0});
  EXPECT_EQ(b->stats().weight_casts, 9);
  EXPECT_EQ(b->stats().traces, 1);
}

TEST_F(BlockTest, WithoutOfflineCastsTheGraphCastsItsWeights) {
  amp::init(DType::bf16);
  auto b = unrolled_rnn();
  HybridizeOptions ho;
  ho.cast_params_offline = false;
  ho.exec.use_onednn = false;
  b->hybridize(ho);
  (*b)({random(DType::f32, {2, kSteps, 4}, 21), random(DType::f32, {2, 8}, 22)});
  EXPECT_EQ(b->stats().weight_casts, 0);
  // Still one cast per weight inside the graph, not one per step.
  int param_casts = 0;
  const ir::Graph& g = b->last_executable()->graph();
  for (const ir::Node& n : g.nodes)
    if ((n.op == "amp_cast" || n.op == "Cast") && g.nodes[n.inputs[0].node].is_var() &&
        g.nodes[n.inputs[0].node].role == ir::VarRole::param)
      ++param_casts;
  EXPECT_EQ(param_casts, 4);
}

TEST_F(BlockTest, FusedNonFiniteFlagReachesTheCaller) {
  auto b = pointwise();
  HybridizeOptions ho;
  ho.exec.check_nonfinite = true;
  b->hybridize(ho);
  Tensor x = random(DType::f32, {4, 8}, 1);
  RunStats rs;
  (*b)({x}, &rs);
  EXPECT_FALSE(rs.nonfinite);
  x.data<float>()[5] = std::nanf("");
  (*b)({x}, &rs);
  EXPECT_TRUE(rs.nonfinite);
}

TEST_F(BlockTest, ErrorsNameTheBlockAndTheArgument) {
  auto b = mlp();
  EXPECT_ERROR(b->param("w9"), "block 'mlp': no parameter 'w9' (it has: b0, b1, w0, w1)");
  EXPECT_ERROR(b->add_param("w0", Tensor::zeros({DType::f32, {1}})), "parameter 'w0' exists already");
  EXPECT_ERROR(b->add_param("data1", Tensor::zeros({DType::f32, {1}})), "'data1' is the name of an input");
  EXPECT_ERROR((*b)({Tensor()}), "block 'mlp': input 0 (data) has no storage");
  // A shape error names the node, eager and traced.
  const Tensor bad = random(DType::f32, {4, 7}, 1);
  EXPECT_ERROR((*b)({bad}), "dense0");
  b->hybridize();
  EXPECT_ERROR((*b)({bad}), "dense0");
  auto typo = std::make_unique<FunctionBlock>("typo", [](F& f, const std::vector<Sym>& in) {
    return std::vector<Sym>{f.op("tanhh", {in[0]})};
  });
  EXPECT_ERROR((*typo)({random(DType::f32, {2}, 1)}), "block 'typo': unknown op 'tanhh'");
  auto wrong_arity = std::make_unique<FunctionBlock>("arity", [](F& f, const std::vector<Sym>& in) {
    return std::vector<Sym>{f.op("elemwise_add", {in[0]}, {}, "add")};
  });
  EXPECT_ERROR((*wrong_arity)({random(DType::f32, {2}, 1)}), "block 'arity': node 'add' (elemwise_add): 1 inputs given, 2 expected");
}

TEST_F(BlockTest, SliceConcatReshapeEagerAndTraced) {
  auto b = std::make_unique<FunctionBlock>("shapes", [](F& f, const std::vector<Sym>& in) {
    const Sym a = f.slice_axis(in[0], 1, 0, 2);
    const Sym c = f.slice_axis(in[0], 1, 2, 4);
    const Sym cat = f.concat({f.sigmoid(c), f.relu(a)}, 1);
    return std::vector<Sym>{f.reshape(f.mul(cat, cat), {8}), f.op_multi("SliceChannel", {in[0]}, {{"num_outputs", "2"}}).at(1)};
  });
  const Tensor x = random(DType::f32, {2, 4}, 3);
  const std::vector<Tensor> eager = (*b)({x});
  b->hybridize();
  const std::vector<Tensor> traced = (*b)({x});
  ASSERT_EQ(traced.size(), 2u);
  EXPECT_EQ(traced[0].shape(), (ir::Shape{8}));
  expect_close(eager[0], traced[0], 1e-6, 1e-6);
  expect_close(eager[1], traced[1], 0);
}

}  // namespace
}  // namespace ampfuse::engine
