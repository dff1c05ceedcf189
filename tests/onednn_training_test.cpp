// The training step's external ops outside the reference interpreter (runtime/onednn/
// onednn_training.cpp) against their reference kernels: sum and mean over any axes,
// _BatchNorm_train, _backward_Pooling (max with ties, avg, every convention); f32, bf16 and
// f16 at odd shapes; and what they refuse.
#include "ir/builder.h"
#include "runtime/onednn/onednn_ops.h"
#include "runtime/reference/reference_kernels.h"
#include "tests/onednn_check.h"

#include <gtest/gtest.h>

namespace ampfuse::runtime {
namespace {

using ir::DType;
using ir::TensorType;
using namespace onednn_check;
using Attrs = std::map<std::string, std::string>;

constexpr DType kFloatTypes[] = {DType::f32, DType::bf16, DType::f16};

TEST(OnednnTraining, SumAndMeanMatchReference) {
  struct Case {
    ir::Shape shape;
    Attrs attrs;
  };
  const std::vector<Case> cases = {
      // BatchNorm's per-channel sums: all but the channel axis, NCHW and channels last.
      {{7, 5, 3, 11}, {{"axis", "1"}, {"exclude", "True"}, {"keepdims", "True"}}},
      {{1, 13, 5, 5}, {{"axis", "1"}, {"exclude", "True"}, {"keepdims", "True"}}},
      {{5, 6, 6, 13}, {{"axis", "3"}, {"exclude", "True"}, {"keepdims", "True"}}},
      {{32, 16, 9, 11}, {{"axis", "1"}, {"exclude", "True"}}},  // large enough to split over threads
      {{3, 7}, {{"axis", "0"}}},                                // a bias gradient: column sums
      {{37, 1029}, {{"axis", "0"}}},
      {{3, 7, 11}, {{"axis", "2"}}},  // row sums
      {{2, 3, 5, 7}, {{"axis", "(0,2)"}}},
      {{6, 1, 5}, {{"axis", "1"}, {"keepdims", "True"}}},  // only an extent-1 dim: a copy
      {{31}, {}},
      {{2, 3, 5, 7}, {}},
  };
  for (DType t : kFloatTypes)
    for (const Case& c : cases) {
      SCOPED_TRACE(fmt::format("{} {}", ir::shape_str(c.shape), ir::dtype_name(t)));
      const std::string impl = check_against_reference("sum", {{t, c.shape}}, c.attrs, tolerance(t));
      if (t == DType::f32) {
        EXPECT_FALSE(impl.empty());
      }
      check_against_reference("mean", {{t, c.shape}}, c.attrs, tolerance(t));
    }
}

// Large sums stay within f32 summation error of the reference's f64 sum (a few ulp of the
// sum of the magnitudes), here with all terms positive so that the sum is that large.
TEST(OnednnTraining, LongSumsKeepF32Accuracy) {
  const TensorType type{DType::f32, {32, 16, 32, 32}};
  ir::GraphBuilder b;
  b.output(b.op("sum", {b.input("x", type)}, {{"axis", "1"}, {"exclude", "True"}}, "sum"));
  const ir::Graph g = b.finish();
  Tensor x(type);
  for (int64_t i = 0; i < x.size(); ++i) x.set_f64(i, 1.0 + static_cast<double>(i % 1000) / 997.0);
  Tensor got(g.nodes.back().outputs[0]), want(g.nodes.back().outputs[0]);
  onednn_run(g.nodes.back(), std::vector<Tensor>{x}, std::span<Tensor>(&got, 1));
  (*find_reference_kernel("sum"))(g.nodes.back(), std::vector<Tensor>{x}, std::span<Tensor>(&want, 1));
  for (int64_t c = 0; c < 16; ++c) EXPECT_NEAR(got.get_f64(c), want.get_f64(c), want.get_f64(c) * 1e-6) << c;
}

TEST(OnednnTraining, BatchNormTrainMatchesReference) {
  struct Case {
    ir::Shape shape;
    Attrs attrs;
  };
  const std::vector<Case> cases = {
      {{7, 5, 3, 11}, {{"fix_gamma", "False"}, {"eps", "1e-5"}}},
      {{7, 5, 3, 11}, {{"fix_gamma", "True"}, {"momentum", "0.5"}}},
      {{1, 13, 5, 5}, {{"fix_gamma", "False"}}},  // batch 1
      {{5, 6, 6, 13}, {{"fix_gamma", "False"}, {"axis", "-1"}}},  // channels last
      {{9, 7}, {{"fix_gamma", "False"}}},
      {{3, 5, 17}, {{"fix_gamma", "False"}, {"eps", "0.01"}}},
      {{2, 3, 4, 5, 6}, {{"fix_gamma", "False"}}},
  };
  for (DType t : kFloatTypes)
    for (const Case& c : cases) {
      const int64_t axis = c.attrs.contains("axis") ? static_cast<int64_t>(c.shape.size()) - 1 : 1;
      const TensorType stats{DType::f32, {c.shape[axis]}};
      SCOPED_TRACE(fmt::format("{} {}", ir::shape_str(c.shape), ir::dtype_name(t)));
      check_against_reference("_BatchNorm_train", {{t, c.shape}, stats, stats, stats, stats}, c.attrs,
                              t == DType::f32 ? 2e-5 : tolerance(t));
    }
}

// max: ties (a plane of equal values, steps of 0.5) send each window's gradient to its first
// maximum in row-major order, as the reference; avg: each pooling convention's divisor.
TEST(OnednnTraining, PoolingGradientMatchesReference) {
  struct Case {
    ir::Shape shape;
    Attrs attrs;
  };
  const std::vector<Case> cases = {
      {{2, 3, 9, 9}, {{"kernel", "(3,3)"}, {"stride", "(2,2)"}, {"pad", "(1,1)"}, {"pool_type", "max"}}},
      {{1, 5, 7, 7}, {{"kernel", "(3,3)"}, {"stride", "(2,2)"}, {"pool_type", "max"}, {"pooling_convention", "full"}}},
      {{2, 9, 9, 8}, {{"kernel", "(3,3)"}, {"stride", "(2,2)"}, {"pool_type", "max"}, {"layout", "NHWC"}}},
      {{1, 3, 5, 6, 7}, {{"kernel", "(2,3,3)"}, {"stride", "(1,2,2)"}, {"pad", "(0,1,1)"}, {"pool_type", "max"}}},
      {{2, 3, 8, 8}, {{"kernel", "(2,2)"}, {"stride", "(2,2)"}, {"pool_type", "avg"}}},
      {{2, 7, 9, 9},
       {{"kernel", "(3,3)"}, {"stride", "(2,2)"}, {"pad", "(1,1)"}, {"pool_type", "avg"}, {"count_include_pad", "False"}}},
      {{2, 3, 9, 9}, {{"kernel", "(3,3)"}, {"stride", "(2,2)"}, {"pad", "(1,1)"}, {"pool_type", "avg"}}},
      {{32, 11, 7, 7}, {{"kernel", "(1,1)"}, {"global_pool", "True"}, {"pool_type", "avg"}}},
      {{2, 5, 17}, {{"kernel", "(3,)"}, {"stride", "(2,)"}, {"pool_type", "avg"}}},
  };
  for (DType t : kFloatTypes)
    for (const Case& c : cases) {
      const TensorType x{t, c.shape};
      ir::GraphBuilder forward;
      forward.output(forward.op("Pooling", {forward.input("x", x)}, c.attrs, "pool"));
      const ir::Shape pooled = forward.finish().nodes.back().outputs[0].shape;
      ir::GraphBuilder b;
      b.output(b.op("_backward_Pooling", {b.input("x", x), b.input("dy", {t, pooled})}, c.attrs, "pool_grad"));
      const ir::Graph g = b.finish();
      Tensor data = filled(x, 3);
      if (c.attrs.at("pool_type") == "max")  // many ties: {0, 0.5, 1} and a constant first plane
        for (int64_t i = 0; i < data.size(); ++i) data.set_f64(i, i < c.shape.back() * 4 ? 1.0 : std::round(data.get_f64(i)) / 2 + 0.5);
      SCOPED_TRACE(fmt::format("{} {} {}", ir::shape_str(c.shape), ir::dtype_name(t), c.attrs.at("pool_type")));
      const std::string impl = compare_node(g.nodes.back(), {data, filled({t, pooled}, 4)}, tolerance(t));
      std::cout << "[   impl   ] _backward_Pooling " << ir::type_str(x) << " " << c.attrs.at("pool_type") << ": " << impl << "\n";
    }
}

TEST(OnednnTraining, RefusesWhatItCannotDo) {
  struct Refused {
    std::string op;
    std::vector<TensorType> in;
    Attrs attrs;
    std::string reason;
  };
  const TensorType stats{DType::f32, {5}};
  const std::vector<Refused> cases = {
      {"sum", {{DType::f64, {3, 5}}}, {{"axis", "0"}}, "f64"},
      {"mean", {{DType::i32, {3, 5}}}, {}, "oneDNN runs f32"},
      {"_BatchNorm_train", {{DType::f32, {2, 3, 5, 4}}, {DType::f32, {5}}, stats, stats, stats}, {{"axis", "2"}},
       "not a channel axis"},
      {"_BatchNorm_train", {{DType::f32, {2, 5, 4}}, stats, stats, stats, stats}, {{"eps", "0"}}, "eps 0"},
      {"_BatchNorm_train", {{DType::f64, {2, 5, 4}}, {DType::f64, {5}}, {DType::f64, {5}}, {DType::f64, {5}}, {DType::f64, {5}}},
       {}, "f64"},
      {"_BatchNorm_train", {{DType::f32, {2, 5, 1, 1, 1, 3}}, stats, stats, stats, stats}, {}, "rank 6"},
      {"_backward_Pooling", {{DType::f32, {1, 2, 6, 6}}, {DType::f32, {1, 2, 3, 3}}},
       {{"kernel", "(2,2)"}, {"stride", "(2,2)"}, {"pool_type", "sum"}}, "sum or lp"},
      {"_backward_Pooling", {{DType::f32, {1, 2, 8, 8}}, {DType::f32, {1, 2, 4, 4}}},
       {{"kernel", "(3,3)"}, {"stride", "(2,2)"}, {"pool_type", "avg"}, {"pooling_convention", "full"}},
       "past the padding"},
  };
  for (const Refused& c : cases) {
    ir::GraphBuilder b;
    std::vector<ir::ValueRef> ins;
    for (size_t i = 0; i < c.in.size(); ++i) ins.push_back(b.input("in" + std::to_string(i), c.in[i]));
    b.output(b.op(c.op, ins, c.attrs, "refused"));
    const ir::Graph g = b.finish();
    const ir::Node& node = g.nodes.back();
    EXPECT_FALSE(onednn_supports(node, c.in)) << c.op << " " << c.reason;
    EXPECT_NE(onednn_refusal(node, c.in).find(c.reason), std::string::npos) << onednn_refusal(node, c.in);
    EXPECT_EQ(onednn_impl_name(node, c.in), "");
  }
}

}  // namespace
}  // namespace ampfuse::runtime
