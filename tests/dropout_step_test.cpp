// Dropout's step input: the counter offset of its Philox mask read at run time
// (philox_bits24_at, ir/scalar_program.h), so one compiled step draws a fresh mask every
// step. Fused kernels equal the interpreter bit for bit at every step; the mask at step s is
// the attribute form's mask at offset + s * stride; new steps compile nothing; the backward
// recomputes the step's mask; the trainer's masks change from step to step.
#include "engine/execution/executor.h"
#include "engine/passes/autodiff.h"
#include "engine/passes/training_mode.h"
#include "engine/training/trainer.h"
#include "ir/builder.h"
#include "ir/philox.h"
#include "ir/scalar_derivative.h"
#include "ir/text_format.h"
#include "ir/type_inference.h"
#include "runtime/interpreter.h"
#include "runtime/kernel_cache.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace ampfuse {
namespace {

using ir::DType;
using ir::Shape;
using ir::TensorType;
using runtime::Tensor;

std::map<std::string, std::string> attrs_of(double p, uint64_t offset, int64_t stride, const std::string& axes = "") {
  std::map<std::string, std::string> a = {
      {"p", std::to_string(p)}, {"seed", "5"}, {"offset", std::to_string(offset)}, {"step_stride", std::to_string(stride)}};
  if (!axes.empty()) a["axes"] = axes;
  return a;
}

Tensor step_tensor(double s) {
  Tensor t(TensorType{DType::f32, {}});
  t.set_f64(0, s);
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.type() == b.type() &&
         std::memcmp(a.raw(), b.raw(), static_cast<size_t>(a.size()) * ir::dtype_size(a.dtype())) == 0;
}

// y = dropout2(dropout1(relu(x)) * w): two Dropouts reading one step, offsets 2 and 3,
// stride 2 (what to_training_mode gives two Dropouts).
ir::Graph two_dropouts(DType dtype, const Shape& s) {
  ir::GraphBuilder b;
  const ir::ValueRef x = b.input("x", {dtype, s});
  const ir::ValueRef step = b.input("step", {DType::f32, {}});
  const ir::ValueRef w = b.param("w", TensorType{dtype, s});
  const ir::ValueRef d1 = b.op("_Dropout_train", {b.op("relu", {x}), step}, attrs_of(0.3, 2, 2), "d1");
  b.output(b.op("_Dropout_train", {b.op("elemwise_mul", {d1, w}), step}, attrs_of(0.5, 3, 2), "d2"));
  return b.finish();
}

// One Dropout of `x`: with the step input (offset, stride) or in the attribute form.
ir::Graph one_dropout(const Shape& s, uint64_t offset, int64_t stride, const std::string& axes = "") {
  ir::GraphBuilder b;
  std::vector<ir::ValueRef> ins = {b.input("x", {DType::f32, s})};
  if (stride > 0) ins.push_back(b.input("step", {DType::f32, {}}));
  b.output(b.op("_Dropout_train", ins, attrs_of(0.5, offset, stride, axes)));
  return b.finish();
}

runtime::Bindings ones(const Shape& s) {
  Tensor t(TensorType{DType::f32, s});
  for (int64_t i = 0; i < t.size(); ++i) t.set_f64(i, 1);
  return {{"x", t}};
}

// Fused (LLVM) == interpreter bit for bit at steps 0, 1 and 12345, in each compute type,
// and at steps the trainer never binds (a fraction, negative, NaN, huge), whose conversion
// every backend defines alike (ir::philox_step_count).
TEST(DropoutStep, FusedEqualsInterpreterAtEveryStep) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dtype : {DType::f32, DType::bf16, DType::f64}) {
    const ir::Graph g = two_dropouts(dtype, {37, 29});
    const engine::Executable exe = engine::Executable::compile(g);
    EXPECT_TRUE(exe.compile_stats().fallbacks.empty());
    EXPECT_EQ(exe.compile_stats().external_ops, 0);
    runtime::Bindings vars = runtime::random_bindings(g, 3);
    for (double s : {0.0, 1.0, 12345.0, 16777216.0, 2.75, -3.0, nan, 1e30}) {
      SCOPED_TRACE(fmt::format("{} step {}", ir::dtype_name(dtype), s));
      vars.insert_or_assign("step", step_tensor(s));
      EXPECT_TRUE(same_bytes(exe.run(vars)[0], runtime::interpret(g, vars)[0]));
    }
  }
}

TEST(DropoutStep, StepConversionIsDefinedForEveryFloat) {
  EXPECT_EQ(ir::philox_step_count(12345), 12345u);
  EXPECT_EQ(ir::philox_step_count(2.75), 2u);
  EXPECT_EQ(ir::philox_step_count(-3), 0u);
  EXPECT_EQ(ir::philox_step_count(std::numeric_limits<double>::quiet_NaN()), 0u);
  EXPECT_EQ(ir::philox_step_count(1e30), uint64_t{1} << 53);
  EXPECT_EQ(ir::philox_step_offset(4, 3, 12345), 4u + 12345u * 3u);
}

// The step form at step s is the attribute form at offset + s * stride: the new primitive
// is the old one with its offset moved, on the recipe (fused and interpreted) and on the
// reference kernel of variational dropout (axes) alike.
TEST(DropoutStep, MaskAtStepSIsTheAttributeMaskAtOffsetPlusSTimesStride) {
  const Shape s = {33, 65};
  for (const std::string axes : {"", "(1,)"}) {
    const ir::Graph stepped = one_dropout(s, 4, 3, axes);
    const engine::Executable exe = engine::Executable::compile(stepped);
    for (uint64_t k : {0u, 1u, 12345u}) {
      SCOPED_TRACE(fmt::format("axes '{}' step {}", axes, k));
      runtime::Bindings vars = ones(s);
      const ir::Graph fixed = one_dropout(s, 4 + k * 3, 0, axes);
      const Tensor want = runtime::interpret(fixed, vars)[0];
      vars.emplace("step", step_tensor(static_cast<double>(k)));
      EXPECT_TRUE(same_bytes(runtime::interpret(stepped, vars)[0], want));
      EXPECT_TRUE(same_bytes(exe.run(vars)[0], want));
    }
  }
}

// The step is a value: one executable, no compilation per step, a different mask each step.
TEST(DropoutStep, NewStepsDrawNewMasksAndCompileNothing) {
  const Shape s = {40, 50};
  const ir::Graph g = one_dropout(s, 0, 1);
  const engine::Executable exe = engine::Executable::compile(g);
  const int64_t compiled = runtime::KernelCache::global().stats().compilations;
  runtime::Bindings vars = ones(s);
  std::vector<std::vector<double>> masks;
  for (double k : {0.0, 1.0, 2.0, 12345.0}) {
    vars.insert_or_assign("step", step_tensor(k));
    masks.push_back(runtime::to_f64_vector(exe.run(vars)[0]));
  }
  for (size_t i = 0; i < masks.size(); ++i)
    for (size_t j = i + 1; j < masks.size(); ++j) EXPECT_NE(masks[i], masks[j]) << i << " " << j;
  EXPECT_EQ(runtime::KernelCache::global().stats().compilations, compiled);
  // A second executable of the same graph finds every kernel in the cache.
  EXPECT_EQ(engine::Executable::compile(g).compile_stats().compilations, 0);
}

TEST(DropoutStep, TrainingModeAddsOneStepInputReadByEveryDropout) {
  ir::GraphBuilder b;
  const ir::ValueRef x = b.input("x", {DType::f32, {40, 40}});
  b.output(b.op("Dropout", {x}, {{"p", "0.5"}}, "first"));
  b.output(b.op("Dropout", {b.op("relu", {x})}, {{"p", "0.5"}}, "second"));
  ir::Graph g = b.finish();
  ASSERT_EQ(engine::to_training_mode(g, {.seed = 1, .offset = 10, .step_input = "step"}), 2);
  const std::optional<int32_t> step = g.find_var("step");
  ASSERT_TRUE(step);
  EXPECT_EQ(*step, 0);
  EXPECT_EQ(g.nodes[0].outputs.at(0), (TensorType{DType::f32, {}}));
  for (int k : {0, 1}) {
    const ir::Node& d = g.node(g.outputs[k]);
    EXPECT_EQ(d.op, "_Dropout_train");
    ASSERT_EQ(d.inputs.size(), 2u);
    EXPECT_EQ(d.inputs[1], (ir::ValueRef{0, 0}));
    EXPECT_EQ(d.attrs.get_int("offset"), 10 + k);
    EXPECT_EQ(d.attrs.get_int("step_stride"), 2);
  }
  // Step 0 is the attribute form: the masks of a pass without step input.
  ir::GraphBuilder c;
  const ir::ValueRef cx = c.input("x", {DType::f32, {40, 40}});
  c.output(c.op("Dropout", {cx}, {{"p", "0.5"}}, "first"));
  ir::Graph fixed = c.finish();
  engine::to_training_mode(fixed, {.seed = 1, .offset = 10});
  runtime::Bindings vars = ones({40, 40});
  const Tensor want = runtime::interpret(fixed, vars)[0];
  vars.emplace("step", step_tensor(0));
  EXPECT_TRUE(same_bytes(runtime::interpret(g, vars)[0], want));
  // No Dropout, no variable; a name already taken is refused.
  ir::GraphBuilder n;
  n.output(n.op("relu", {n.input("x", {DType::f32, {4}})}));
  ir::Graph none = n.finish();
  EXPECT_EQ(engine::to_training_mode(none, {.step_input = "step"}), 0);
  EXPECT_FALSE(none.find_var("step"));
  EXPECT_ERROR(engine::to_training_mode(g, {.step_input = "step"}), "a variable of that name exists");
}

// The backward's Dropout reads the same step: dx = dy * mask(step), at every step.
TEST(DropoutStep, BackwardRecomputesTheStepsMask) {
  const Shape s = {9, 31};
  ir::GraphBuilder b;
  const ir::ValueRef x = b.input("x", {DType::f32, s});
  b.output(b.op("Dropout", {b.op("elemwise_mul", {x, b.param("w", TensorType{DType::f32, s})})}, {{"p", "0.3"}}, "drop"));
  engine::ExecutorOptions eo;
  eo.training = engine::TrainingOptions{.seed = 5, .offset = 2, .step_input = "step"};
  eo.backward = engine::BackwardOptions{.wrt = {"w"}};
  const engine::Executable exe = engine::Executable::compile(b.finish(), eo);
  EXPECT_TRUE(exe.compile_stats().fallbacks.empty());
  ASSERT_EQ(exe.compile_stats().gradient_of, (std::vector<std::string>{"w"}));
  ASSERT_EQ(exe.compile_stats().head_grads.size(), 1u);
  runtime::Bindings vars = runtime::random_bindings(exe.graph(), 9);
  Tensor one(TensorType{DType::f32, s});
  for (int64_t i = 0; i < one.size(); ++i) one.set_f64(i, 1);
  vars.insert_or_assign("x", one);
  vars.insert_or_assign("w", one);  // y = mask (times the scale), dw = dy * mask
  const std::vector<double> dy = runtime::to_f64_vector(vars.at(exe.compile_stats().head_grads[0]));
  std::vector<double> previous;
  for (double k : {0.0, 1.0, 12345.0}) {
    SCOPED_TRACE(k);
    vars.insert_or_assign("step", step_tensor(k));
    const std::vector<Tensor> out = exe.run(vars);
    const std::vector<Tensor> want = runtime::interpret(exe.graph(), vars);
    for (size_t i = 0; i < out.size(); ++i) EXPECT_TRUE(same_bytes(out[i], want[i])) << "output " << i;
    const std::vector<double> mask = runtime::to_f64_vector(out.at(0));
    const std::vector<double> dw = runtime::to_f64_vector(out.at(exe.compile_stats().forward_outputs));
    size_t kept = 0;
    for (size_t i = 0; i < dw.size(); ++i) {
      kept += mask[i] != 0;
      EXPECT_EQ(dw[i], static_cast<double>(static_cast<float>(dy[i]) * static_cast<float>(mask[i]))) << i;
    }
    EXPECT_GT(kept, 0u);
    EXPECT_LT(kept, dw.size());
    EXPECT_NE(mask, previous);
    previous = mask;
  }
}

TEST(DropoutStep, StepRecipeHasNoDerivativeAndReadsTheElementIndex) {
  ir::ScalarBuilder b(1);
  const auto bits = b.philox_bits24_at(b.input(0), 1, 2, 3);
  EXPECT_FALSE(ir::scalar_tangent(b, bits, bits, 0));
  EXPECT_TRUE(ir::uses_element_index(b.finish({bits})));
  ir::ScalarBuilder u(1);
  EXPECT_ERROR(u.unary(ir::ScalarOp::philox_bits24_at, u.input(0)), "not a unary scalar op");
  ir::ScalarBuilder p(1);
  p.philox_bits24_at(p.input(0), 7, 8, 9);
  EXPECT_NE(ir::print_scalar_program(p.finish({1})).find("philox_bits24_at %0 seed 7 offset 8 stride 9"),
            std::string::npos);
}

TEST(DropoutStep, StepMustBeAnF32Scalar) {
  ir::GraphBuilder b;
  b.output(b.op("_Dropout_train", {b.input("x", {DType::f32, {4}}), b.input("step", {DType::f16, {}})},
                attrs_of(0.5, 0, 1)));
  EXPECT_ERROR(b.finish(), "f32 scalar");
  ir::GraphBuilder c;
  c.output(c.op("_Dropout_train", {c.input("x", {DType::f32, {4}}), c.input("step", {DType::f32, {1}})},
                attrs_of(0.5, 0, 1)));
  EXPECT_ERROR(c.finish(), "f32 scalar");
}

// The trainer binds its step count: with the weights held still (lr 0), the same batch
// gives a different loss each step because the mask changed; nothing compiles after the
// first step (which compiles the optimizer's update), and two trainers with one seed agree
// step for step.
TEST(Trainer, DropoutMasksChangeEveryStepWithoutRecompiling) {
  const ir::Graph model = ir::parse_graph(R"(graph {
  %x = var input : f32[16,12]
  %label = var input : f32[16]
  %w = var param : f32[10,12]
  %b = var param : f32[10]
  %fc = FullyConnected(%x, %w, %b) {num_hidden=10}
  %d = Dropout(%fc) {p=0.5}
  %p = SoftmaxOutput(%d, %label)
  return %p
})");
  engine::TrainerOptions o;
  o.optimizer.lr = 0;
  o.seed = 3;
  engine::Trainer t(model, o), twin(model, o);
  const ir::Graph& tg = t.training_executable().graph();
  ASSERT_TRUE(tg.find_var("__dropout_step__"));
  runtime::Bindings data = runtime::random_bindings(model, 11);
  Tensor labels(TensorType{DType::f32, {16}});
  for (int64_t i = 0; i < 16; ++i) labels.set_f64(i, static_cast<double>(i % 10));
  const int kernels = t.training_executable().compile_stats().kernels;
  int64_t compiled = 0;
  std::vector<double> losses;
  for (int k = 0; k < 3; ++k) {
    if (k == 1) compiled = runtime::KernelCache::global().stats().compilations;
    EXPECT_EQ(t.steps(), k);
    const engine::StepResult r = t.step(data.at("x"), labels);
    ASSERT_TRUE(r.applied);
    EXPECT_EQ(twin.step(data.at("x"), labels).loss, r.loss);
    for (double l : losses) EXPECT_NE(l, r.loss) << "step " << k;
    losses.push_back(r.loss);
  }
  EXPECT_EQ(t.steps(), 3);
  EXPECT_EQ(runtime::KernelCache::global().stats().compilations, compiled);
  EXPECT_EQ(t.training_executable().compile_stats().kernels, kernels);
}

}  // namespace
}  // namespace ampfuse
