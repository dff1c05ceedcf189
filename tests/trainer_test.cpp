// engine::Trainer (engine/training/trainer.h) on the real handwritten-digit data
// (data/digits/): the MLP and the CNN (models/digits/) train to the stated accuracies in
// f32, bf16 and fp16 AMP from the same initial weights; loss scaling is exact; an injected
// overflow skips exactly its step and changes no weight; a new loss scale or learning rate
// compiles nothing.
#include "engine/passes/remove_unused.h"
#include "engine/training/trainer.h"
#include "ir/mxnet_json.h"
#include "ir/text_format.h"
#include "runtime/kernel_cache.h"
#include "runtime/mxnet_params.h"
#include "runtime/npy.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <random>

namespace ampfuse {
namespace {

using engine::Trainer;
using engine::TrainerOptions;
using runtime::Tensor;

std::string digits_file(const std::string& name) { return std::string(AMPFUSE_DATA_DIR) + "/digits/" + name; }

ir::Graph digits_model(const std::string& which, int64_t batch) {
  ir::MxnetImportOptions io;
  io.input_shapes = {{"data", {batch, 1, 8, 8}}, {"softmax_label", {batch}}};
  return ir::load_mxnet_json_file(std::string(AMPFUSE_MODELS_DIR) + "/digits/digits_" + which + "-symbol.json", io);
}

struct Digits {
  Tensor train_x = runtime::read_npy(digits_file("train_images.npy"));
  Tensor train_y = runtime::read_npy(digits_file("train_labels.npy"));
  Tensor test_x = runtime::read_npy(digits_file("test_images.npy"));
  Tensor test_y = runtime::read_npy(digits_file("test_labels.npy"));
};

const Digits& digits() {
  static const Digits d;
  return d;
}

// `epochs` passes over the training set in a seeded order (the last partial batch dropped).
void train_epochs(Trainer& t, int epochs, uint64_t seed = 1) {
  const Digits& d = digits();
  const int64_t n = d.train_x.shape()[0], b = t.batch();
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::mt19937_64 rng(seed);
  for (int e = 0; e < epochs; ++e) {
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    for (int64_t s = 0; s + b <= n; s += b) {
      const std::vector<int64_t> rows(order.begin() + s, order.begin() + s + b);
      t.step(engine::take_rows(d.train_x, rows), engine::take_rows(d.train_y, rows));
    }
  }
}

TrainerOptions options(const char* amp, engine::OptimizerKind kind = engine::OptimizerKind::sgd) {
  TrainerOptions o;
  if (std::string(amp) != "off") {
    o.amp = engine::AmpOptions{};
    o.amp->target = std::string(amp) == "bf16" ? ir::DType::bf16 : ir::DType::f16;
    o.loss_scaling = engine::LossScalerOptions{};
  }
  o.optimizer.kind = kind;
  if (kind == engine::OptimizerKind::sgd) {
    o.optimizer.lr = 0.1;
    o.optimizer.momentum = 0.9;
  } else {
    o.optimizer.lr = 0.003;
  }
  o.seed = 7;
  return o;
}

std::vector<uint8_t> bytes_of(const std::map<std::string, Tensor>& params) {
  std::vector<uint8_t> out;
  for (const auto& [name, t] : params) {
    const auto* p = static_cast<const uint8_t*>(t.raw());
    out.insert(out.end(), p, p + t.bytes());
  }
  return out;
}

// The issue's bar: each model reaches a good test accuracy in f32, and bf16 and fp16 AMP
// (dynamic loss scaling) from the same initial weights land within 1 point of it. 20
// epochs, where the accuracy has settled: after 8, the three precisions' trajectories can
// still be a point and a half apart on the 360 test images (seen with other seeds), so a
// CPU that sums in another order could fail a shorter run; after 20 they were within 0.6
// points for five seeds.
TEST(Trainer, DigitsModelsTrainToAccuracyInF32Bf16AndFp16) {
  struct Case {
    const char* model;
    engine::OptimizerKind kind;
    int epochs;
    double min_accuracy;
  };
  for (const Case& c : {Case{"mlp", engine::OptimizerKind::sgd, 20, 0.95}, Case{"cnn", engine::OptimizerKind::adam, 20, 0.95}}) {
    double f32_accuracy = 0;
    for (const char* amp : {"off", "bf16", "fp16"}) {
      SCOPED_TRACE(std::string(c.model) + " " + amp);
      Trainer t(digits_model(c.model, 32), options(amp, c.kind));
      const engine::Evaluation before = t.evaluate(digits().test_x, digits().test_y);
      train_epochs(t, c.epochs);
      const engine::Evaluation after = t.evaluate(digits().test_x, digits().test_y);
      EXPECT_EQ(after.rows, 360);
      EXPECT_LT(before.accuracy, 0.5);
      EXPECT_LT(after.loss, before.loss / 4);
      EXPECT_GE(after.accuracy, c.min_accuracy);
      std::printf("digits %s %s: test accuracy %.4f, loss %.4f (at first %.4f, %.4f), %lld steps skipped\n", c.model,
                  amp, after.accuracy, after.loss, before.accuracy, before.loss, static_cast<long long>(t.skipped_steps()));
      if (std::string(amp) == "off")
        f32_accuracy = after.accuracy;
      else
        EXPECT_NEAR(after.accuracy, f32_accuracy, 0.01);
      // fp16 starts at a scale of 2^16, which overflows the first steps' gradients (a
      // loss gradient near 1 times 2^16 is above fp16's 65504) until it has halved enough.
      EXPECT_LE(t.skipped_steps(), std::string(amp) == "fp16" ? 8 : 0);
      EXPECT_TRUE(t.training_executable().compile_stats().fallbacks.empty());
    }
  }
}

// A power-of-two loss scale multiplies the head gradient and 1/scale the update: every
// product in between is exact, so f32 training with a static scale of 2^10 gives the
// weights of training without one, bit for bit.
TEST(Trainer, StaticPowerOfTwoLossScaleIsExactInF32) {
  TrainerOptions plain = options("off");
  TrainerOptions scaled = plain;
  scaled.loss_scaling = engine::LossScalerOptions{.dynamic = false, .init_scale = 1024};
  Trainer a(digits_model("cnn", 16), plain), b(digits_model("cnn", 16), scaled);
  const Digits& d = digits();
  for (int64_t s = 0; s < 5; ++s) {
    std::vector<int64_t> rows(16);
    std::iota(rows.begin(), rows.end(), s * 16);
    const Tensor x = engine::take_rows(d.train_x, rows), y = engine::take_rows(d.train_y, rows);
    const engine::StepResult ra = a.step(x, y), rb = b.step(x, y);
    EXPECT_EQ(rb.scale, 1024);
    EXPECT_EQ(ra.loss, rb.loss);
  }
  EXPECT_EQ(bytes_of(a.arg_params()), bytes_of(b.arg_params()));
  EXPECT_EQ(bytes_of(a.aux_params()), bytes_of(b.aux_params()));
  EXPECT_NE(bytes_of(a.arg_params()), bytes_of(Trainer(digits_model("cnn", 16), plain).arg_params()));
}

// An overflow at step k (an infinite loss scale bound for that step) skips exactly that
// step: weights, moving statistics and optimizer state stay as they were, the scale
// halves, and the steps after it train on as if step k had not been there.
TEST(Trainer, InjectedOverflowSkipsExactlyItsStepAndChangesNoWeight) {
  for (const char* amp : {"fp16", "bf16"}) {
    SCOPED_TRACE(amp);
    TrainerOptions o = options(amp, engine::OptimizerKind::adam);
    Trainer t(digits_model("cnn", 16), o), reference(digits_model("cnn", 16), o);
    const Digits& d = digits();
    auto batch = [&](int64_t s, Tensor& x, Tensor& y) {
      std::vector<int64_t> rows(16);
      std::iota(rows.begin(), rows.end(), s * 16);
      x = engine::take_rows(d.train_x, rows), y = engine::take_rows(d.train_y, rows);
    };
    Tensor x, y;
    for (int64_t s = 0; s < 3; ++s) batch(s, x, y), t.step(x, y), reference.step(x, y);
    const std::vector<uint8_t> args = bytes_of(t.arg_params()), aux = bytes_of(t.aux_params());
    const double scale = t.scaler()->scale();
    const int64_t skipped_before = t.skipped_steps();
    batch(3, x, y);
    const engine::StepResult skipped = t.step(x, y, /*inject_overflow=*/true);
    EXPECT_FALSE(skipped.applied);
    EXPECT_TRUE(skipped.overflow);
    EXPECT_EQ(bytes_of(t.arg_params()), args);
    EXPECT_EQ(bytes_of(t.aux_params()), aux);
    EXPECT_EQ(t.scaler()->scale(), scale / 2);
    EXPECT_EQ(t.skipped_steps(), skipped_before + 1);
    // The next steps apply. In bf16 they match a run that never saw the skipped step: the
    // halved scale is a power of two and bf16 has f32's range, so every scaled gradient is
    // the unscaled one times the scale exactly. (In fp16 the scale moves gradients in and
    // out of the subnormal range, so the runs may differ in the last bits.)
    for (int64_t s = 3; s < 6; ++s) {
      batch(s, x, y);
      EXPECT_TRUE(t.step(x, y).applied);
      reference.step(x, y);
    }
    if (std::string(amp) == "bf16") {
      EXPECT_EQ(bytes_of(t.arg_params()), bytes_of(reference.arg_params()));
      EXPECT_EQ(bytes_of(t.aux_params()), bytes_of(reference.aux_params()));
    }
  }
}

// The loss scale and the learning rate are run-time values: changing them compiles nothing.
TEST(Trainer, NewLossScaleOrLearningRateCompilesNothing) {
  Trainer t(digits_model("mlp", 32), options("fp16"));
  const Digits& d = digits();
  std::vector<int64_t> rows(32);
  std::iota(rows.begin(), rows.end(), 0);
  const Tensor x = engine::take_rows(d.train_x, rows), y = engine::take_rows(d.train_y, rows);
  // fp16's first steps overflow at the initial scale of 2^16 and launch no update, so the
  // update kernel compiles with the first applied step: take that one first.
  int tries = 0;
  while (!t.step(x, y).applied) ASSERT_LT(++tries, 20);
  t.step(x, y, /*inject_overflow=*/true);  // halves the scale
  const int64_t compiled = runtime::KernelCache::global().stats().compilations;
  for (int k = 0; k < 6; ++k) {
    t.optimizer_options().lr *= 0.5;
    const double scale = t.scaler()->scale();
    const engine::StepResult r = t.step(x, y);
    EXPECT_EQ(r.scale, scale);
    EXPECT_EQ(t.scaler()->scale(), r.applied ? scale : scale / 2);
  }
  EXPECT_EQ(runtime::KernelCache::global().stats().compilations, compiled);
}

TEST(Trainer, SavesParamsMxnetLoads) {
  Trainer t(digits_model("cnn", 8), options("bf16"));
  testing::ScopedTempDir dir;
  t.save_params(dir.file("cnn.params"));
  const runtime::NDArrayList list = runtime::read_mxnet_params(dir.file("cnn.params"));
  std::vector<std::string> names = list.names;
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"arg:bn1_beta", "arg:bn1_gamma", "arg:conv1_bias", "arg:conv1_weight",
                                             "arg:conv2_bias", "arg:conv2_weight", "arg:fc_bias", "arg:fc_weight",
                                             "aux:bn1_moving_mean", "aux:bn1_moving_var"}));
  for (const Tensor& a : list.arrays) EXPECT_EQ(a.dtype(), ir::DType::f32);
  // Training starts from MXNet's constants: gamma and moving variance 1, the rest 0.
  const auto by_name = runtime::params_by_name(list, "cnn.params");
  EXPECT_EQ(by_name.at("bn1_gamma").get_f64(3), 1);
  EXPECT_EQ(by_name.at("bn1_moving_var").get_f64(3), 1);
  EXPECT_EQ(by_name.at("conv1_bias").get_f64(3), 0);
  EXPECT_NE(by_name.at("conv1_weight").get_f64(3), 0);
}

// A Gluon export ends in its logits: the trainer puts MXNet's softmax cross-entropy on
// them (a SoftmaxOutput head and a "softmax_label" input), and the model trains.
TEST(Trainer, GraphWithoutLossHeadGetsSoftmaxOutput) {
  ir::Graph logits = digits_model("mlp", 32);
  logits.outputs[0] = logits.nodes[logits.outputs[0].node].inputs[0];  // fc2's output
  engine::remove_unused(logits, [](int32_t) { return true; });  // the old head and its label
  Trainer t(logits, options("bf16"));
  EXPECT_EQ(t.label_name(), "softmax_label");
  EXPECT_EQ(t.num_classes(), 10);
  train_epochs(t, 3);
  EXPECT_GE(t.evaluate(digits().test_x, digits().test_y).accuracy, 0.9);
}

TEST(Trainer, ErrorsNameWhatIsMissing) {
  ir::Graph not_2d = ir::parse_graph(R"(graph {
  %x = var input : f32[4,5,2]
  %w = var param : f32[3,2]
  %y = FullyConnected(%x, %w) {num_hidden=3, no_bias=true, flatten=false}
  return %y
})");
  EXPECT_ERROR(Trainer(not_2d, options("off")), "a SoftmaxOutput head needs (batch, classes)");
  Trainer t(digits_model("mlp", 8), options("off"));
  std::vector<int64_t> rows(8, 0);
  EXPECT_ERROR(t.step(engine::take_rows(digits().train_x, rows), engine::take_rows(digits().train_y, rows), true),
               "loss scaling");
  EXPECT_ERROR(t.evaluate(digits().test_x, digits().train_y), "labels");
}

}  // namespace
}  // namespace ampfuse
