#include "models/layered_model.h"

#include "ir/builder.h"

#include <fmt/format.h>

#include <deque>
#include <string>

namespace ampfuse::models {

namespace {

constexpr int64_t kChannels = 8, kSide = 4;
constexpr int kLongSkip = 8;  // blocks between the ends of a long skip

class LayeredModel {
 public:
  ir::Graph build(int64_t min_nodes) {
    ir::ValueRef x = b_.input("data", {ir::DType::f32, {1, kChannels, kSide, kSide}});
    std::deque<ir::ValueRef> recent;  // block outputs, the last kLongSkip of them
    // Every block ends with the node it returns, the newest: x.node + 1 nodes so far.
    for (int block = 0; x.node + 1 < min_nodes; ++block) {
      switch (block % 4) {
        case 0: x = residual_conv(x); break;
        case 1: x = feed_forward(x); break;
        case 2: x = gate(x, block % 16 == 2); break;
        default: x = inception(x); break;
      }
      if (static_cast<int>(recent.size()) == kLongSkip) {
        if (block % kLongSkip == 0) x = b_.op("elemwise_add", {x, recent.front()}, {}, name("long_skip"));
        recent.pop_front();
      }
      recent.push_back(x);
    }
    b_.output(x);
    return b_.finish(true);
  }

 private:
  std::string name(const char* what) { return fmt::format("{}{}", what, ++names_); }

  ir::ValueRef conv(ir::ValueRef x) {
    const std::string n = name("conv");
    return b_.op("Convolution", {x, b_.param(n + "_weight"), b_.param(n + "_bias")},
                 {{"kernel", "(3, 3)"}, {"pad", "(1, 1)"}, {"num_filter", std::to_string(kChannels)}}, n);
  }
  ir::ValueRef batch_norm(ir::ValueRef x) {
    const std::string n = name("bn");
    return b_.op("BatchNorm",
                 {x, b_.param(n + "_gamma"), b_.param(n + "_beta"), b_.aux(n + "_moving_mean"), b_.aux(n + "_moving_var")},
                 {{"fix_gamma", "False"}}, n);
  }
  ir::ValueRef relu(ir::ValueRef x) { return b_.op("Activation", {x}, {{"act_type", "relu"}}, name("relu")); }
  ir::ValueRef fully_connected(ir::ValueRef x) {
    const std::string n = name("fc");
    return b_.op("FullyConnected", {x, b_.param(n + "_weight"), b_.param(n + "_bias")},
                 {{"num_hidden", std::to_string(kChannels * kSide * kSide)}}, n);
  }

  ir::ValueRef residual_conv(ir::ValueRef x) {
    const ir::ValueRef y = batch_norm(conv(relu(batch_norm(conv(x)))));
    return relu(b_.op("elemwise_add", {y, x}, {}, name("residual")));
  }
  ir::ValueRef feed_forward(ir::ValueRef x) {
    ir::ValueRef h = fully_connected(b_.op("Flatten", {x}, {}, name("flatten")));
    h = b_.op("LeakyReLU", {h}, {{"act_type", "gelu"}}, name("gelu"));
    h = fully_connected(b_.op("_mul_scalar", {h}, {{"scalar", "0.5"}}, name("scale")));
    const std::string shape = fmt::format("(1, {}, {}, {})", kChannels, kSide, kSide);
    h = b_.op("Reshape", {h}, {{"shape", shape}}, name("reshape"));
    return b_.op("elemwise_add", {h, x}, {}, name("residual"));
  }
  ir::ValueRef gate(ir::ValueRef x, bool output) {
    const ir::ValueRef gated = b_.op("elemwise_mul", {x, b_.op("sigmoid", {x}, {}, name("sigmoid"))}, {}, name("gated"));
    if (output) b_.output(gated);
    const ir::ValueRef low = b_.op("amp_cast", {gated}, {{"dtype", "bfloat16"}}, name("to_bf16"));
    const ir::ValueRef back = b_.op("amp_cast", {low}, {{"dtype", "float32"}}, name("to_f32"));
    return b_.op("elemwise_add", {b_.op("tanh", {back}, {}, name("tanh")), gated}, {}, name("gate_sum"));
  }
  ir::ValueRef inception(ir::ValueRef x) {
    const ir::ValueRef r = relu(x);
    const ir::ValueRef branches = b_.op("elemwise_add", {conv(r), conv(r)}, {}, name("branches"));
    return b_.op("elemwise_add", {branches, r}, {}, name("inception"));
  }

  ir::GraphBuilder b_;
  int names_ = 0;
};

}  // namespace

ir::Graph build_layered_model(int64_t min_nodes) { return LayeredModel().build(min_nodes); }

}  // namespace ampfuse::models
