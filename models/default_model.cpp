// The demo network: small enough for the reference interpreter to run in well under a
// second, yet made of the op families AMP and fusion care about (a convolution block with
// inference BatchNorm, a GELU MLP with a residual add, LayerNorm and a softmax head).
#include "models/default_model.h"

#include "ir/builder.h"
#include "ir/error.h"

#include <string>

namespace ampfuse::models {

namespace {

// A CIFAR-sized image: 3x32x32.
constexpr int64_t kChannels = 3, kImageSize = 32;
constexpr const char* kConvFilters = "16";
constexpr const char* kHidden = "256";
constexpr const char* kClasses = "10";

ir::ValueRef fully_connected(ir::GraphBuilder& b, ir::ValueRef x, const std::string& name, const char* units) {
  return b.op("FullyConnected", {x, b.param(name + "_weight"), b.param(name + "_bias")}, {{"num_hidden", units}},
              name);
}

// Convolution 3x3 (same padding) -> BatchNorm -> relu -> max pooling 2x2: [N,3,32,32] -> [N,16,16,16].
ir::ValueRef conv_block(ir::GraphBuilder& b, ir::ValueRef x) {
  x = b.op("Convolution", {x, b.param("conv0_weight"), b.param("conv0_bias")},
           {{"kernel", "(3, 3)"}, {"pad", "(1, 1)"}, {"num_filter", kConvFilters}}, "conv0");
  // fix_gamma=False: MXNet's default (True) would ignore gamma, hiding a real parameter.
  x = b.op("BatchNorm", {x, b.param("bn0_gamma"), b.param("bn0_beta"), b.aux("bn0_moving_mean"), b.aux("bn0_moving_var")},
           {{"fix_gamma", "False"}, {"eps", "1e-05"}}, "bn0");
  x = b.op("Activation", {x}, {{"act_type", "relu"}}, "relu0");
  return b.op("Pooling", {x}, {{"kernel", "(2, 2)"}, {"stride", "(2, 2)"}, {"pool_type", "max"}}, "pool0");
}

// Transformer-style feed-forward block with a residual connection and LayerNorm.
ir::ValueRef mlp_block(ir::GraphBuilder& b, ir::ValueRef x) {
  const ir::ValueRef h = fully_connected(b, x, "fc1", kHidden);
  ir::ValueRef y = b.op("LeakyReLU", {h}, {{"act_type", "gelu"}}, "gelu0");
  y = fully_connected(b, y, "fc2", kHidden);
  y = b.op("elemwise_add", {h, y}, {}, "residual0");
  return b.op("LayerNorm", {y, b.param("ln0_gamma"), b.param("ln0_beta")}, {{"axis", "-1"}, {"eps", "1e-05"}}, "ln0");
}

}  // namespace

ir::Graph build_default_model(int64_t batch) {
  // A batch of 0 is an empty input, as anywhere else (the outputs are empty too).
  if (batch < 0) fail("the default model needs a batch of 0 or more, not {}", batch);
  ir::GraphBuilder b;
  ir::ValueRef x = b.input("data", {ir::DType::f32, {batch, kChannels, kImageSize, kImageSize}});
  x = conv_block(b, x);
  x = b.op("Flatten", {x}, {}, "flatten0");
  x = mlp_block(b, x);
  x = fully_connected(b, x, "fc_out", kClasses);
  b.output(b.op("softmax", {x}, {{"axis", "-1"}}, "softmax"));
  return b.finish();
}

}  // namespace ampfuse::models
