// Gradients of the tensor, data-movement, reduction and indexing ops (ir/ops/tensor.cpp,
// ir/ops/tensor_index.cpp, their backward ops in ir/ops/tensor_backward.cpp): finite
// differences in f64 at odd shapes and several attribute settings, MXNet's choices where
// the derivative has one (ties of max/min), clear errors, and the executor's backward
// graphs against the interpreter's in f32.
#include "engine/execution/executor.h"
#include "engine/passes/autodiff.h"
#include "ir/builder.h"
#include "ir/text_format.h"
#include "ir/type_inference.h"
#include "runtime/interpreter.h"
#include "tests/gradient_check.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace ampfuse {
namespace {

using ir::DType;
using ir::Shape;
using ir::TensorType;
using runtime::Tensor;
using testing::check_gradients;
using testing::GradCheckOptions;
using Attrs = std::map<std::string, std::string>;

struct Input {
  std::string name;
  TensorType type;
};

// One `op` node reading `inputs`; its outputs `used` (all when empty) are the graph's.
ir::Graph op_graph(const std::string& op, const std::vector<Input>& inputs, const Attrs& attrs,
                   std::vector<size_t> used = {}) {
  ir::GraphBuilder b;
  std::vector<ir::ValueRef> ins;
  for (const Input& in : inputs) ins.push_back(b.input(in.name, in.type));
  const std::vector<ir::ValueRef> outs = b.op_multi(op, ins, attrs);
  if (used.empty())
    for (size_t k = 0; k < outs.size(); ++k) used.push_back(k);
  for (size_t k : used) b.output(outs.at(k));
  return b.finish();
}

TensorType f64(const Shape& s) { return {DType::f64, s}; }

// One f64 input "x" of shape `s`.
ir::Graph unary(const std::string& op, const Shape& s, const Attrs& attrs, std::vector<size_t> used = {}) {
  return op_graph(op, {{"x", f64(s)}}, attrs, std::move(used));
}

Tensor values(DType t, const Shape& s, const std::vector<double>& v) {
  Tensor x(TensorType{t, s});
  EXPECT_EQ(static_cast<size_t>(x.size()), v.size());
  for (int64_t i = 0; i < x.size() && i < static_cast<int64_t>(v.size()); ++i) x.set_f64(i, v[i]);
  return x;
}

struct Case {
  std::string op;
  Shape shape;
  Attrs attrs;
};

void expect_unary_gradients(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    SCOPED_TRACE(c.op + " " + ir::shape_str(c.shape) + " " + ::testing::PrintToString(c.attrs));
    EXPECT_TRUE(check_gradients(unary(c.op, c.shape, c.attrs)));
  }
}

// ---- permutations ----------------------------------------------------------------------

TEST(TensorGradients, Permutations) {
  expect_unary_gradients({
      {"transpose", {3, 1, 7}, {}},
      {"transpose", {2, 5, 3}, {{"axes", "(1, 2, 0)"}}},
      {"transpose", {2, 5, 3, 1}, {{"axes", "(3, 0, 2, 1)"}}},
      {"transpose", {7}, {}},
      {"SwapAxis", {2, 5, 3}, {{"dim1", "0"}, {"dim2", "-1"}}},
      {"SwapAxis", {5, 3}, {}},
      {"reverse", {3, 7}, {{"axis", "(1,)"}}},
      {"reverse", {2, 5, 3}, {{"axis", "(0, 2)"}}},
      {"reverse", {1, 5}, {{"axis", "(0, 1, 1)"}}},  // an axis named twice cancels
      {"depth_to_space", {1, 8, 3, 5}, {{"block_size", "2"}}},
      {"depth_to_space", {2, 9, 1, 2}, {{"block_size", "3"}}},
      {"space_to_depth", {1, 3, 4, 6}, {{"block_size", "2"}}},
  });
}

// ---- slices ----------------------------------------------------------------------------

TEST(TensorGradients, Slices) {
  expect_unary_gradients({
      {"slice", {7, 5}, {{"begin", "(1, 0)"}, {"end", "(6, 5)"}}},
      {"slice", {7, 5}, {{"begin", "(None, 1)"}, {"end", "(None, None)"}, {"step", "(2, 3)"}}},
      {"slice", {7, 5}, {{"begin", "(None, -1)"}, {"end", "(None, 0)"}, {"step", "(-1, -2)"}}},
      {"slice", {7, 5, 3}, {{"begin", "(5, -4)"}, {"end", "(1, None)"}, {"step", "(-3, 1)"}}},
      {"slice", {1, 7}, {{"begin", "(0,)"}, {"end", "(1,)"}}},  // the whole input: no scatter
      {"slice_axis", {5, 7}, {{"axis", "-1"}, {"begin", "2"}, {"end", "None"}}},
      {"slice_axis", {5, 7}, {{"axis", "0"}, {"begin", "-3"}, {"end", "-1"}}},
      {"slice_axis", {3, 1}, {{"axis", "1"}, {"begin", "0"}, {"end", "1"}}},
  });
}

TEST(TensorGradients, SliceLikeAndCropLendShapesOnly) {
  const ir::Graph like = op_graph("slice_like", {{"x", f64({7, 5, 3})}, {"s", f64({4, 9, 2})}}, {{"axes", "(0, -1)"}});
  EXPECT_TRUE(check_gradients(like));
  EXPECT_TRUE(check_gradients(op_graph("slice_like", {{"x", f64({7, 5})}, {"s", f64({2, 3})}}, {})));
  // shape_like gets zeros: MXNet's gradient of an input that lends its shape.
  EXPECT_TRUE(check_gradients(op_graph("Crop", {{"x", f64({2, 3, 7, 5})}, {"s", f64({1, 1, 3, 2})}}, {{"num_args", "2"}})));
  EXPECT_TRUE(check_gradients(unary("Crop", {1, 2, 7, 5}, {{"offset", "(3, 1)"}, {"h_w", "(4, 3)"}})));
  EXPECT_TRUE(check_gradients(unary("Crop", {1, 2, 7, 6}, {{"h_w", "(2, 3)"}, {"center_crop", "True"}})));
}

// ---- joins and splits --------------------------------------------------------------------

TEST(TensorGradients, ConcatAndStackGiveEachInputItsPart) {
  EXPECT_TRUE(check_gradients(op_graph("Concat", {{"a", f64({2, 3, 5})}, {"b", f64({2, 1, 5})}, {"c", f64({2, 7, 5})}},
                                       {{"num_args", "3"}, {"dim", "-2"}})));
  EXPECT_TRUE(check_gradients(op_graph("Concat", {{"a", f64({3, 2})}, {"b", f64({1, 2})}}, {{"num_args", "2"}, {"dim", "0"}})));
  EXPECT_TRUE(check_gradients(op_graph("Concat", {{"a", f64({3, 2})}}, {{"num_args", "1"}})));
  for (const char* axis : {"0", "1", "-1"}) {
    SCOPED_TRACE(axis);
    EXPECT_TRUE(check_gradients(op_graph("stack", {{"a", f64({3, 5})}, {"b", f64({3, 5})}, {"c", f64({3, 5})}},
                                         {{"num_args", "3"}, {"axis", axis}})));
  }
}

TEST(TensorGradients, SliceChannelJoinsTheOutputsGradients) {
  expect_unary_gradients({
      {"SliceChannel", {3, 6, 5}, {{"num_outputs", "3"}}},
      {"SliceChannel", {7, 2}, {{"num_outputs", "7"}, {"axis", "0"}, {"squeeze_axis", "True"}}},
      {"SliceChannel", {5, 3}, {{"num_outputs", "1"}, {"axis", "-1"}}},
  });
  // Outputs that no gradient reaches contribute zeros.
  EXPECT_TRUE(check_gradients(unary("SliceChannel", {2, 9}, {{"num_outputs", "3"}, {"axis", "1"}}, {2})));
  EXPECT_TRUE(check_gradients(unary("SliceChannel", {3, 2}, {{"num_outputs", "3"}, {"axis", "0"}, {"squeeze_axis", "True"}}, {0, 2})));
}

// ---- repetition: broadcasts, tile, repeat -------------------------------------------------

TEST(TensorGradients, BroadcastsSumBackToTheInputShape) {
  expect_unary_gradients({
      {"broadcast_to", {3, 1, 5}, {{"shape", "(3, 7, 5)"}}},
      {"broadcast_to", {1, 1}, {{"shape", "(7, 3)"}}},
      {"broadcast_to", {3, 5}, {{"shape", "(0, 5)"}}},  // 0 keeps the extent: no sum
      {"broadcast_axis", {1, 5, 1}, {{"axis", "(0, 2)"}, {"size", "(3, 7)"}}},
      {"broadcast_axis", {5, 1}, {{"axis", "-1"}, {"size", "11"}}},
  });
  EXPECT_TRUE(check_gradients(op_graph("broadcast_like", {{"x", f64({1, 5, 1})}, {"y", f64({3, 5, 7})}}, {})));
  EXPECT_TRUE(check_gradients(op_graph("broadcast_like", {{"x", f64({1, 5})}, {"y", f64({7, 2, 3})}},
                                       {{"lhs_axes", "(0,)"}, {"rhs_axes", "(-1,)"}})));
}

TEST(TensorGradients, TileAndRepeatAddEveryCopy) {
  expect_unary_gradients({
      {"tile", {3, 5}, {{"reps", "(2, 3)"}}},
      {"tile", {3, 5}, {{"reps", "(2, 1, 3)"}}},  // more reps than dims
      {"tile", {2, 3, 5}, {{"reps", "(2,)"}}},     // fewer: the last dims
      {"tile", {1}, {{"reps", "(7,)"}}},
      {"repeat", {3, 5}, {{"repeats", "2"}, {"axis", "1"}}},
      {"repeat", {3, 5}, {{"repeats", "3"}, {"axis", "-2"}}},
      {"repeat", {3, 5}, {{"repeats", "2"}}},  // axis None: the flattened input
      {"repeat", {7}, {{"repeats", "1"}, {"axis", "0"}}},
  });
}

// ---- pads ------------------------------------------------------------------------------

TEST(TensorGradients, PadEveryMode) {
  for (const char* mode : {"constant", "edge", "reflect"}) {
    SCOPED_TRACE(mode);
    expect_unary_gradients({
        {"Pad", {2, 3, 5, 7}, {{"mode", mode}, {"pad_width", "(0, 0, 0, 0, 1, 2, 3, 0)"}, {"constant_value", "1.5"}}},
        {"Pad", {1, 2, 3, 2, 4}, {{"mode", mode}, {"pad_width", "(0, 0, 0, 0, 2, 2, 0, 1, 3, 3)"}}},
    });
  }
}

TEST(TensorGradients, UpSamplingSumsEachBlock) {
  const Attrs nearest = {{"sample_type", "nearest"}, {"scale", "2"}};
  EXPECT_TRUE(check_gradients(unary("UpSampling", {2, 3, 5, 1}, nearest)));
  EXPECT_TRUE(check_gradients(unary("UpSampling", {1, 1, 1, 7}, {{"sample_type", "nearest"}, {"scale", "3"}})));
  // Several inputs, each scaled to input 0's size times scale: joined along the channels, or summed.
  for (const char* mode : {"concat", "sum"}) {
    SCOPED_TRACE(mode);
    Attrs a = nearest;
    a["num_args"] = "3";
    a["multi_input_mode"] = mode;
    const int64_t c1 = std::string(mode) == "sum" ? 2 : 3;
    EXPECT_TRUE(check_gradients(
        op_graph("UpSampling", {{"a", f64({1, 2, 2, 2})}, {"b", f64({1, c1, 1, 1})}, {"c", f64({1, 2, 4, 4})}}, a)));
  }
}

TEST(TensorGradients, BilinearResizeSpreadsOverTheNeighbours) {
  struct ResizeCase {
    Shape in;
    int64_t height, width;
    const char* align;
  };
  for (const ResizeCase& r : std::vector<ResizeCase>{{{1, 2, 3, 5}, 7, 11, "True"},
                                                     {{1, 2, 3, 5}, 7, 11, "False"},
                                                     {{2, 1, 7, 5}, 3, 2, "False"},
                                                     {{1, 1, 7, 5}, 1, 1, "True"},
                                                     {{1, 1, 3, 2}, 3, 2, "True"}}) {
    SCOPED_TRACE(ir::shape_str(r.in) + " to " + std::to_string(r.height) + "x" + std::to_string(r.width) + " " + r.align);
    EXPECT_TRUE(check_gradients(unary("_contrib_BilinearResize2D", r.in,
                                      {{"height", std::to_string(r.height)}, {"width", std::to_string(r.width)},
                                       {"align_corners", r.align}})));
  }
  EXPECT_TRUE(check_gradients(op_graph("_contrib_BilinearResize2D", {{"x", f64({1, 2, 3, 5})}, {"s", f64({1, 1, 5, 2})}},
                                       {{"mode", "like"}})));
  // The modes that take the size from the input's extents: _backward_BilinearResize2D
  // follows the output they give (odd and even extents, both corner rules).
  for (const char* mode : {"odd_scale", "to_even_down", "to_even_up", "to_odd_down", "to_odd_up"})
    for (const char* align : {"True", "False"}) {
      SCOPED_TRACE(std::string(mode) + " " + align);
      EXPECT_TRUE(check_gradients(unary("_contrib_BilinearResize2D", {1, 2, 4, 5},
                                        {{"mode", mode}, {"scale_height", "1.5"}, {"scale_width", "0.5"},
                                         {"align_corners", align}})));
    }
}

// ---- reductions ------------------------------------------------------------------------

TEST(TensorGradients, Reductions) {
  const std::vector<Attrs> settings = {
      {},
      {{"axis", "1"}},
      {{"axis", "(0, -1)"}, {"keepdims", "True"}},
      {{"axis", "-2"}, {"exclude", "True"}},
      {{"axis", "(2,)"}, {"keepdims", "True"}, {"exclude", "True"}},
  };
  for (const char* op : {"sum", "mean", "max", "min", "prod"})
    for (const Attrs& a : settings) {
      SCOPED_TRACE(std::string(op) + " " + ::testing::PrintToString(a));
      GradCheckOptions o;
      // prod's gradient divides by x: values away from 0 (as MXNet's, it is inf/nan at 0).
      if (std::string(op) == "prod") o.given = {{"x", values(DType::f64, {3, 5, 2}, [] {
                                                   std::vector<double> v;
                                                   for (int i = 0; i < 30; ++i) v.push_back((i % 2 ? -1 : 1) * (0.6 + 0.03 * i));
                                                   return v;
                                                 }())}};
      EXPECT_TRUE(check_gradients(unary(op, {3, 5, 2}, a), o));
    }
  EXPECT_TRUE(check_gradients(unary("sum", {1}, {})));
  EXPECT_TRUE(check_gradients(unary("max", {7}, {{"axis", "0"}})));
}

TEST(TensorGradients, Norm) {
  const std::vector<Attrs> settings = {{}, {{"axis", "(1,)"}}, {{"axis", "(0, -1)"}, {"keepdims", "True"}}};
  for (const char* ord : {"1", "2"})
    for (Attrs a : settings) {
      a["ord"] = ord;
      SCOPED_TRACE(::testing::PrintToString(a));
      EXPECT_TRUE(check_gradients(unary("norm", {3, 5, 2}, a)));
    }
}

// out_dtype=float32 on f64 data: the gradient arrives in f32 and leaves in f64, equal to
// the f64 gradient up to the f32 rounding of the norm (finite differences of a rounded
// output would not tell).
TEST(TensorGradients, NormOutDtypeCastsTheGradientBack) {
  for (const char* ord : {"1", "2"}) {
    SCOPED_TRACE(std::string("ord=") + ord);
    const Attrs a = {{"ord", ord}, {"axis", "(2,)"}};
    Attrs narrow = a;
    narrow["out_dtype"] = "float32";
    const engine::BackwardGraph wide = engine::build_backward(unary("norm", {3, 5, 2}, a), {.wrt = {}, .with_inputs = true});
    const engine::BackwardGraph rounded = engine::build_backward(unary("norm", {3, 5, 2}, narrow), {.wrt = {}, .with_inputs = true});
    const runtime::Bindings vars = runtime::random_bindings(rounded.graph, 5);
    const std::string head = rounded.head_grads.at(0);
    runtime::Bindings wide_vars = vars;
    wide_vars[head] = values(DType::f64, {3, 5}, runtime::to_f64_vector(vars.at(head)));
    const Tensor want = runtime::interpret(wide.graph, wide_vars).at(1);
    const Tensor got = runtime::interpret(rounded.graph, vars).at(1);
    ASSERT_EQ(got.type(), want.type());
    for (int64_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got.get_f64(i), want.get_f64(i), 1e-6 * std::abs(want.get_f64(i))) << "element " << i;
  }
}

// nansum and nanprod: sum's and prod's gradients away from NaN (finite differences), and
// exactly 0 at a NaN element, where prod's quotient y / x would be NaN.
TEST(TensorGradients, NanReductionsSkipNaN) {
  std::vector<double> v;
  for (int i = 0; i < 30; ++i) v.push_back((i % 2 ? -1 : 1) * (0.6 + 0.03 * i));
  for (const char* op : {"nansum", "nanprod"})
    for (const Attrs& a : {Attrs{}, Attrs{{"axis", "1"}}, Attrs{{"axis", "(0, 2)"}, {"keepdims", "True"}}}) {
      SCOPED_TRACE(std::string(op) + " " + ::testing::PrintToString(a));
      EXPECT_TRUE(check_gradients(unary(op, {3, 5, 2}, a), {.given = {{"x", values(DType::f64, {3, 5, 2}, v)}}}));
      std::vector<double> with_nan = v;
      with_nan[7] = std::nan("");
      const engine::BackwardGraph bg = engine::build_backward(unary(op, {3, 5, 2}, a), {.wrt = {}, .with_inputs = true});
      runtime::Bindings vars = runtime::random_bindings(bg.graph, 3, {{"x", values(DType::f64, {3, 5, 2}, with_nan)}});
      const std::vector<double> grad = runtime::to_f64_vector(runtime::interpret(bg.graph, vars).at(1));
      for (size_t i = 0; i < grad.size(); ++i) {
        if (i == 7) EXPECT_EQ(grad[i], 0.0);
        else EXPECT_TRUE(std::isfinite(grad[i])) << "element " << i;
      }
    }
}

// topk's and sort's values take their gradient back to where each came from: rows along
// every axis, both orders, k < n and k = n, the flattened data (axis=None); topk's indices
// and mask get none (MXNet's zeros).
TEST(TensorGradients, TopkAndSortScatterToTheTakenElements) {
  const std::vector<Attrs> topk = {{{"k", "2"}, {"ret_typ", "value"}},
                                   {{"k", "3"}, {"ret_typ", "both"}, {"axis", "0"}, {"is_ascend", "True"}},
                                   {{"k", "5"}, {"ret_typ", "value"}, {"axis", "1"}},
                                   {{"k", "4"}, {"ret_typ", "value"}, {"axis", "None"}}};
  for (const Attrs& a : topk) {
    SCOPED_TRACE("topk " + ::testing::PrintToString(a));
    EXPECT_TRUE(check_gradients(unary("topk", {3, 5, 2}, a, {0})));
  }
  for (const Attrs& a : {Attrs{}, Attrs{{"axis", "0"}, {"is_ascend", "False"}}, Attrs{{"axis", "None"}}}) {
    SCOPED_TRACE("sort " + ::testing::PrintToString(a));
    EXPECT_TRUE(check_gradients(unary("sort", {3, 5, 2}, a)));
  }
  // The largest of each row of [[1, 3, 2], [0, -1, 5]] takes the head gradient [10, 20].
  const engine::BackwardGraph bg =
      engine::build_backward(unary("topk", {2, 3}, {{"k", "1"}, {"ret_typ", "value"}}), {.wrt = {}, .with_inputs = true});
  const runtime::Bindings vars = {{"x", values(DType::f64, {2, 3}, {1, 3, 2, 0, -1, 5})},
                                  {bg.head_grads.at(0), values(DType::f64, {2, 1}, {10, 20})}};
  EXPECT_EQ(runtime::to_f64_vector(runtime::interpret(bg.graph, vars).at(1)), (std::vector<double>{0, 10, 0, 0, 0, 20}));
  for (const char* ret : {"indices", "mask"}) {
    const engine::BackwardGraph none =
        engine::build_backward(unary("topk", {2, 3}, {{"k", "1"}, {"ret_typ", ret}}), {.wrt = {}, .with_inputs = true});
    EXPECT_EQ(std::count_if(none.graph.nodes.begin(), none.graph.nodes.end(),
                            [](const ir::Node& n) { return n.op == "_backward_topk"; }),
              0)
        << ret;
  }
}

// MXNet gives every element equal to the maximum (minimum) the whole gradient.
TEST(TensorGradients, MaxAndMinGiveEveryTiedElementTheWholeGradient) {
  for (const char* op : {"max", "min"}) {
    SCOPED_TRACE(op);
    const ir::Graph g = unary(op, {2, 3}, {{"axis", "1"}});
    const engine::BackwardGraph bg = engine::build_backward(g, {.wrt = {}, .with_inputs = true});
    const double extreme = std::string(op) == "max" ? 4 : -4;
    const runtime::Bindings vars = {{"x", values(DType::f64, {2, 3}, {extreme, 1, extreme, 0, extreme, 2})},
                                    {bg.head_grads.at(0), values(DType::f64, {2}, {10, 20})}};
    const Tensor grad = runtime::interpret(bg.graph, vars).at(1);
    EXPECT_EQ(runtime::to_f64_vector(grad), (std::vector<double>{10, 0, 10, 0, 20, 0}));
  }
}

// ---- gathers through index tensors -------------------------------------------------------

TEST(TensorGradients, TakeAddsRowsAtTheirIndices) {
  struct TakeCase {
    Shape a, indices;
    Attrs attrs;
    std::vector<double> index_values;
  };
  const std::vector<TakeCase> cases = {
      {{5, 3}, {4}, {}, {4, 0, 4, 2}},                                   // a repeated row adds
      {{5, 3}, {2, 3}, {{"axis", "0"}, {"mode", "clip"}}, {-2, 7, 1, 1, 0, 9}},  // clipped to 0 and 4
      {{2, 7, 3}, {5}, {{"axis", "-2"}, {"mode", "wrap"}}, {-1, 8, 13, 2, 6}},
      {{3, 5}, {3}, {{"axis", "1"}, {"mode", "raise"}}, {4, 0, 4}},
      {{1}, {3}, {}, {0, 0, 0}},
  };
  for (const TakeCase& c : cases) {
    SCOPED_TRACE(ir::shape_str(c.a) + " " + ::testing::PrintToString(c.attrs));
    const ir::Graph g = op_graph("take", {{"x", f64(c.a)}, {"i", {DType::i32, c.indices}}}, c.attrs);
    EXPECT_TRUE(check_gradients(g, {.wrt = {}, .given = {{"i", values(DType::i32, c.indices, c.index_values)}}}));
  }
}

TEST(TensorGradients, PickPutsTheGradientAtThePickedElement) {
  struct PickCase {
    Shape data, index;
    Attrs attrs;
    std::vector<double> index_values;
  };
  const std::vector<PickCase> cases = {
      {{3, 5}, {3}, {}, {4, 0, 2}},
      {{3, 5}, {3, 1}, {{"axis", "1"}, {"keepdims", "True"}}, {-3, 9, 1}},  // clipped
      {{7, 2, 3}, {2, 3}, {{"axis", "0"}, {"mode", "wrap"}}, {-1, 7, 13, 2, 6, 0}},
      {{1, 1}, {1}, {{"axis", "-1"}}, {0}},
  };
  for (const PickCase& c : cases) {
    SCOPED_TRACE(ir::shape_str(c.data) + " " + ::testing::PrintToString(c.attrs));
    const ir::Graph g = op_graph("pick", {{"x", f64(c.data)}, {"i", {DType::i32, c.index}}}, c.attrs);
    EXPECT_TRUE(check_gradients(g, {.wrt = {}, .given = {{"i", values(DType::i32, c.index, c.index_values)}}}));
  }
}

TEST(TensorGradients, GatherNdAddsAtRepeatedIndices) {
  // Whole rows (M=1 of a rank-2 table), one element (M=rank), slices (M=2 of rank 3);
  // negative indices count from the end.
  EXPECT_TRUE(check_gradients(op_graph("gather_nd", {{"x", f64({5, 3})}, {"i", {DType::i64, {1, 4}}}}, {}),
                              {.wrt = {}, .given = {{"i", values(DType::i64, {1, 4}, {1, 4, 1, -1})}}}));
  EXPECT_TRUE(check_gradients(op_graph("gather_nd", {{"x", f64({5, 3})}, {"i", {DType::i64, {2, 3}}}}, {}),
                              {.wrt = {}, .given = {{"i", values(DType::i64, {2, 3}, {0, 4, 0, 2, -1, 2})}}}));
  EXPECT_TRUE(check_gradients(op_graph("gather_nd", {{"x", f64({2, 7, 3})}, {"i", {DType::i32, {2, 2, 2}}}}, {}),
                              {.wrt = {}, .given = {{"i", values(DType::i32, {2, 2, 2}, {1, 0, 1, 1, 6, 2, 6, -7})}}}));
}

// Low-precision gradients add in f32 and round once: bf16 1 + 2^-8 + 2^-8 rounds to 1 when
// each sum is rounded (ties to even), but the f32 total 1 + 2^-7 is a bf16 value.
TEST(TensorGradients, ScattersAddLowPrecisionInF32) {
  const ir::Graph g = op_graph("take", {{"x", {DType::bf16, {2, 1}}}, {"i", {DType::i32, {3}}}}, {});
  const engine::BackwardGraph bg = engine::build_backward(g, {.wrt = {"x"}});
  const runtime::Bindings vars = {{"i", values(DType::i32, {3}, {0, 0, 0})},
                                  {"x", values(DType::bf16, {2, 1}, {0, 0})},
                                  {bg.head_grads.at(0), values(DType::bf16, {3, 1}, {1, 0x1p-8, 0x1p-8})}};
  const Tensor grad = runtime::interpret(bg.graph, vars).at(1);
  ASSERT_EQ(grad.type(), (TensorType{DType::bf16, {2, 1}}));
  EXPECT_EQ(runtime::to_f64_vector(grad), (std::vector<double>{1 + 0x1p-7, 0}));
}

// ---- sequences, shape-only and index-only inputs ---------------------------------------------

TEST(TensorGradients, SequenceMaskAndReverse) {
  for (const char* op : {"SequenceMask", "SequenceReverse"})
    for (const char* axis : {"0", "1"}) {
      if (std::string(op) == "SequenceReverse" && std::string(axis) == "1") continue;  // MXNet: axis 0 only
      SCOPED_TRACE(std::string(op) + " axis=" + axis);
      const Shape data = std::string(axis) == "0" ? Shape{5, 3, 2} : Shape{3, 5, 2};
      EXPECT_TRUE(check_gradients(unary(op, data, {{"axis", axis}})));
      Attrs attrs = {{"use_sequence_length", "True"}, {"axis", axis}};
      if (std::string(op) == "SequenceMask") attrs["value"] = "-2";
      const ir::Graph g = op_graph(op, {{"x", f64(data)}, {"len", {DType::f32, {3}}}}, attrs);
      // Float lengths are differentiable variables too, but a step function of them: only x.
      EXPECT_TRUE(check_gradients(g, {.wrt = {"x"}, .given = {{"len", values(DType::f32, {3}, {2, 5, 0})}}}));
    }
}

// The gradient reaches step length-1 alone; lengths outside [1, T] (the forward op gives
// zeros) and fractional ones (truncated) included.
TEST(TensorGradients, SequenceLastPutsTheGradientAtTheLastStep) {
  for (const char* axis : {"0", "1"}) {
    SCOPED_TRACE(std::string("axis=") + axis);
    const Shape data = std::string(axis) == "0" ? Shape{5, 7, 2} : Shape{7, 5, 2};
    EXPECT_TRUE(check_gradients(unary("SequenceLast", data, {{"axis", axis}})));
    const ir::Graph g = op_graph("SequenceLast", {{"x", f64(data)}, {"len", {DType::f32, {7}}}},
                                 {{"use_sequence_length", "True"}, {"axis", axis}});
    EXPECT_TRUE(check_gradients(g, {.wrt = {"x"}, .given = {{"len", values(DType::f32, {7}, {1, 5, 0, 6, 0.5, 2.7, -1})}}}));
  }
  EXPECT_TRUE(check_gradients(op_graph("SequenceLast", {{"x", f64({1, 1})}, {"len", {DType::i32, {1}}}},
                                       {{"use_sequence_length", "True"}}),
                              {.wrt = {}, .given = {{"len", values(DType::i32, {1}, {1})}}}));
}

TEST(TensorGradients, ReshapeLikeAndIndexOnlyOps) {
  EXPECT_TRUE(check_gradients(op_graph("reshape_like", {{"x", f64({3, 5})}, {"y", f64({5, 3})}}, {})));
  // The outputs of one_hot, arange_like, argmax and argmin do not move with their inputs'
  // values (almost everywhere): the gradients are zeros (MXNet: MakeZeroGradNodes).
  EXPECT_TRUE(check_gradients(unary("one_hot", {3}, {{"depth", "4"}, {"dtype", "float64"}}),
                              {.wrt = {}, .given = {{"x", values(DType::f64, {3}, {0.5, 3.5, 1.5})}}}));
  EXPECT_TRUE(check_gradients(unary("_contrib_arange_like", {2, 3}, {})));
  EXPECT_TRUE(check_gradients(unary("argmax", {3, 5}, {{"axis", "1"}})));
  EXPECT_TRUE(check_gradients(unary("argmin", {7}, {})));
}

// ---- errors --------------------------------------------------------------------------------

TEST(TensorGradients, BackwardOpsRefuseInputsThatDoNotFit) {
  const auto infer = [](const char* text) {
    ir::Graph g = ir::parse_graph(text);
    ir::infer_types(g);
  };
  EXPECT_ERROR(infer(R"(graph {
    %g = var input : f32[3]
    %d = _backward_slice(%g) {shape=[4], begin=[2], step=[1]}
    return %d
  })"),
               "window of dim 0");
  EXPECT_ERROR(infer(R"(graph {
    %g = var input : f32[2,3]
    %i = var input : i32[4]
    %d = _backward_take(%g, %i) {shape=[5,3]}
    return %d
  })"),
               "input 0 (grad) has shape [2,3] but the forward op's output for an input of shape [5,3] is [4,3]");
  EXPECT_ERROR(infer(R"(graph {
    %g = var input : f32[2,3,4,4]
    %d = _backward_Pad(%g) {mode="edge", pad_width=[0,0,0,0,3,3,0,0]}
    return %d
  })"),
               "smaller than pad_width");
  const std::string message = testing::error_message([&] {
    infer(R"(graph {
    %g = var input : f32[2]
    %i = var input : i32[1,2]
    %d = _backward_gather_nd(%g, %i) {shape=[3,4]}
    return %d
  })");
  });
  EXPECT_NE(message.find("'d'"), std::string::npos) << message;  // the node
  EXPECT_NE(message.find("input 0 (grad)"), std::string::npos) << message;
}

// ---- the executor runs the backward graphs as the interpreter does (f32) --------------------
// Bit for bit: fused kernels and reference kernels only (oneDNN's and runtime/onednn's
// reductions add in another order).

void expect_executor_matches_interpreter(const ir::Graph& forward, const runtime::Bindings& given = {}) {
  const engine::BackwardGraph bg = engine::build_backward(forward, {.wrt = {}, .with_inputs = true});
  const runtime::Bindings vars = runtime::random_bindings(bg.graph, 11, given);
  const std::vector<Tensor> want = runtime::interpret(bg.graph, vars);
  const std::vector<Tensor> got = engine::Executable::compile(bg.graph, {.use_onednn = false}).run(vars);
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    ASSERT_EQ(got[k].type(), want[k].type()) << "output " << k;
    for (int64_t i = 0; i < want[k].size(); ++i)
      ASSERT_EQ(got[k].get_f64(i), want[k].get_f64(i)) << "output " << k << " element " << i;
  }
}

TEST(TensorGradients, ExecutorMatchesInterpreterOnDataMovement) {
  const ir::Graph g = ir::parse_graph(R"(graph {
    %x = var input : f32[3,5,7]
    %y = var input : f32[3,1,7]
    %t = transpose(%x) {axes=[2,0,1]}
    %s = slice(%t) {begin=[6,none,1], end=[none,none,none], step=[-2,1,2]}
    %b = broadcast_to(%y) {shape=[3,5,7]}
    %c = Concat(%x, %b) {num_args=2, dim=1}
    %p = SliceChannel(%c) {num_outputs=2, axis=1}
    %r = tile(%p:1) {reps=[1,2,1]}
    %e = reverse(%r) {axis=[2]}
    %m = elemwise_mul(%e, %e)
    return %s, %m
  })");
  expect_executor_matches_interpreter(g);
}

TEST(TensorGradients, ExecutorMatchesInterpreterOnReductions) {
  const ir::Graph g = ir::parse_graph(R"(graph {
    %x = var input : f32[4,6,5]
    %s = sum(%x) {axis=[1]}
    %m = mean(%x) {axis=[0,2], keepdims=true}
    %a = max(%x) {axis=[-1], exclude=true}
    %t = square(%s)
    return %t, %m, %a
  })");
  expect_executor_matches_interpreter(g);
}

TEST(TensorGradients, ExecutorMatchesInterpreterOnScatters) {
  const ir::Graph g = ir::parse_graph(R"(graph {
    %x = var input : f32[5,3,2]
    %i = var input : i32[4]
    %j = var input : i32[2,3]
    %t = take(%x, %i) {axis=0}
    %g = gather_nd(%x, %j)
    %z = var input : f32[2,3,4,5]
    %p = Pad(%z) {mode="reflect", pad_width=[0,0,0,0,1,1,1,0]}
    %c = slice_axis(%x) {axis=1, begin=1, end=3}
    return %t, %g, %p, %c
  })");
  expect_executor_matches_interpreter(g, {{"i", values(DType::i32, {4}, {4, 0, 4, 2})},
                                             {"j", values(DType::i32, {2, 3}, {0, 4, 0, 2, 1, 2})}});
}

}  // namespace
}  // namespace ampfuse
