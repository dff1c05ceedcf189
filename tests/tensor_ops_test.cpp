// Tensor ops (ir/ops/tensor.cpp) and their reference kernels: shapes from MXNet's documented
// examples, values computed by hand, and the bits of f16/bf16 NaNs through every data move.
#include "ir/builder.h"
#include "ir/lowp.h"
#include "ir/op_registry.h"
#include "runtime/reference/reference_kernels.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace ampfuse {
namespace {

using ir::DType;
using ir::Shape;
using ir::TensorType;
using runtime::Tensor;
using Attrs = std::map<std::string, std::string>;

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

// One `op` node over input variables of the given types, types inferred.
ir::Graph one_node(const std::string& op, const std::vector<TensorType>& ins, const Attrs& attrs) {
  ir::GraphBuilder b;
  std::vector<ir::ValueRef> refs;
  for (size_t i = 0; i < ins.size(); ++i) refs.push_back(b.input(fmt::format("x{}", i), ins[i]));
  for (ir::ValueRef out : b.op_multi(op, refs, attrs, "node")) b.output(out);
  return b.finish();
}

std::vector<TensorType> infer(const std::string& op, const std::vector<TensorType>& ins, const Attrs& attrs = {}) {
  return one_node(op, ins, attrs).nodes.back().outputs;
}

Shape shape_of(const std::string& op, const Shape& in, const Attrs& attrs) {
  return infer(op, {{DType::f32, in}}, attrs).at(0).shape;
}

Shape reshape(const Shape& in, const std::string& shape, bool reverse = false) {
  return shape_of("Reshape", in, {{"shape", shape}, {"reverse", reverse ? "True" : "False"}});
}

// Runs the reference kernel of one `op` node over the given tensors.
std::vector<Tensor> run(const std::string& op, const std::vector<Tensor>& ins, const Attrs& attrs = {}) {
  std::vector<TensorType> types;
  for (const Tensor& t : ins) types.push_back(t.type());
  const ir::Graph g = one_node(op, types, attrs);
  const ir::Node& node = g.nodes.back();
  std::vector<Tensor> outs;
  for (const TensorType& t : node.outputs) outs.emplace_back(t);
  const runtime::ReferenceKernel* kernel = runtime::find_reference_kernel(node.op);
  if (!kernel) {
    ADD_FAILURE() << "no reference kernel for " << op;
    return outs;
  }
  (*kernel)(node, ins, outs);
  return outs;
}

Tensor tensor(DType t, const Shape& s, const std::vector<double>& values) {
  Tensor x({t, s});
  EXPECT_EQ(static_cast<size_t>(x.size()), values.size()) << "test data for " << ir::shape_str(s);
  for (int64_t i = 0; i < x.size() && i < static_cast<int64_t>(values.size()); ++i) x.set_f64(i, values[i]);
  return x;
}

// 0, 1, 2, ... in row-major order: each value names the element it came from.
Tensor iota(DType t, const Shape& s) {
  Tensor x({t, s});
  for (int64_t i = 0; i < x.size(); ++i) x.set_f64(i, static_cast<double>(i));
  return x;
}

Tensor bits16(DType t, const Shape& s, const std::vector<uint16_t>& bits) {
  Tensor x({t, s});
  EXPECT_EQ(static_cast<size_t>(x.size()), bits.size());
  for (size_t i = 0; i < bits.size(); ++i) x.data<uint16_t>()[i] = bits[i];
  return x;
}

std::vector<uint16_t> bits_of(const Tensor& t) { return {t.data<uint16_t>(), t.data<uint16_t>() + t.size()}; }

std::vector<double> values(const Tensor& t) { return runtime::to_f64_vector(t); }

// ---- registry --------------------------------------------------------------------------

TEST(TensorOpsRegistry, AmpClassesKindsAndFusability) {
  const auto& r = ir::OpRegistry::global();
  for (const char* op : {"Concat", "stack"}) EXPECT_EQ(r.get(op).amp_fp16, ir::AmpClass::widest) << op;
  for (const char* op : {"sum", "mean", "prod"}) {
    EXPECT_EQ(r.get(op).amp_bf16, ir::AmpClass::fp32) << op;
    EXPECT_EQ(r.get(op).amp_fp16, ir::AmpClass::fp32) << op;
  }
  for (const char* op : {"Reshape", "transpose", "slice", "max", "amp_multicast", "all_finite", "_zeros"})
    EXPECT_EQ(r.get(op).amp_fp16, ir::AmpClass::neutral) << op;
  EXPECT_EQ(r.get("Reshape").kind, ir::OpKind::view);
  EXPECT_EQ(r.get("Flatten").kind, ir::OpKind::view);
  EXPECT_EQ(r.get("transpose").kind, ir::OpKind::data_movement);
  EXPECT_EQ(r.get("sum").kind, ir::OpKind::reduction);
  EXPECT_EQ(r.get("_full").kind, ir::OpKind::source);
  for (const char* op : {"Reshape", "Flatten", "expand_dims", "transpose", "slice", "slice_axis", "broadcast_to",
                         "amp_multicast"})
    EXPECT_TRUE(r.get(op).fusable) << op;
  for (const char* op : {"Concat", "SliceChannel", "sum", "max", "all_finite"})
    EXPECT_FALSE(r.get(op).fusable) << op;
}

TEST(TensorOpsRegistry, EveryTensorOpHasAReferenceKernel) {
  for (const char* op : {"Reshape", "Flatten", "expand_dims", "squeeze", "transpose", "SwapAxis", "Concat", "stack",
                         "SliceChannel", "slice", "slice_axis", "slice_like", "broadcast_to", "broadcast_axis",
                         "broadcast_like", "sum", "mean", "prod", "max", "min", "_zeros", "_ones", "_full",
                         "all_finite", "multi_all_finite", "amp_multicast"}) {
    EXPECT_NE(ir::OpRegistry::global().find(op), nullptr) << op;
    EXPECT_NE(runtime::find_reference_kernel(op), nullptr) << op;
  }
}

// MXNet's second names resolve to the op that has the kernel (graphs never hold them).
TEST(TensorOpsRegistry, AliasesNameTheirCanonicalOp) {
  const auto& r = ir::OpRegistry::global();
  const std::pair<const char*, const char*> aliases[] = {
      {"reshape", "Reshape"}, {"flatten", "Flatten"}, {"swapaxes", "SwapAxis"}, {"concat", "Concat"},
      {"split", "SliceChannel"}, {"crop", "slice"}, {"broadcast_axes", "broadcast_axis"}, {"sum_axis", "sum"},
      {"max_axis", "max"}, {"min_axis", "min"}};
  for (const auto& [alias, canonical] : aliases) {
    EXPECT_EQ(r.resolve(alias).name, canonical) << alias;
    EXPECT_EQ(r.find(alias), nullptr) << alias;
    EXPECT_EQ(runtime::find_reference_kernel(alias), nullptr) << alias;
  }
}

// ---- Reshape ---------------------------------------------------------------------------

// The examples of MXNet's Reshape documentation, one per special code.
TEST(TensorOpsReshape, MxnetDocumentationExamples) {
  EXPECT_EQ(reshape({2, 3, 4}, "(4, 0, 2)"), (Shape{4, 3, 2}));
  EXPECT_EQ(reshape({2, 3, 4}, "(2, 0, 0)"), (Shape{2, 3, 4}));
  EXPECT_EQ(reshape({2, 3, 4}, "(6, 1, -1)"), (Shape{6, 1, 4}));
  EXPECT_EQ(reshape({2, 3, 4}, "(3, -1, 8)"), (Shape{3, 1, 8}));
  EXPECT_EQ(reshape({2, 3, 4}, "(-1,)"), (Shape{24}));
  EXPECT_EQ(reshape({2, 3, 4}, "(-2,)"), (Shape{2, 3, 4}));
  EXPECT_EQ(reshape({2, 3, 4}, "(2, -2)"), (Shape{2, 3, 4}));
  EXPECT_EQ(reshape({2, 3, 4}, "(-2, 1, 1)"), (Shape{2, 3, 4, 1, 1}));
  EXPECT_EQ(reshape({2, 3, 4}, "(-3, 4)"), (Shape{6, 4}));
  EXPECT_EQ(reshape({2, 3, 4, 5}, "(-3, -3)"), (Shape{6, 20}));
  EXPECT_EQ(reshape({2, 3, 4}, "(0, -3)"), (Shape{2, 12}));
  EXPECT_EQ(reshape({2, 3, 4}, "(-3, -2)"), (Shape{6, 4}));
  EXPECT_EQ(reshape({2, 3, 4}, "(-4, 1, 2, -2)"), (Shape{1, 2, 3, 4}));
  EXPECT_EQ(reshape({2, 3, 4}, "(2, -4, -1, 3, -2)"), (Shape{2, 1, 3, 4}));
}

TEST(TensorOpsReshape, ReverseMatchesCodesRightToLeft) {
  EXPECT_EQ(reshape({10, 5, 4}, "(-1, 0)"), (Shape{40, 5}));
  EXPECT_EQ(reshape({10, 5, 4}, "(-1, 0)", true), (Shape{50, 4}));
  // -4 keeps its two parts together: from the right, it splits the last dim 4 into 2 x 2.
  EXPECT_EQ(reshape({2, 3, 4}, "(-1, -4, 2, 2)", true), (Shape{6, 2, 2}));
  EXPECT_ERROR(reshape({2, 3, 4}, "(-1, -4, 2, 2)"), "-4 splits 3 into 2 x 2");
}

TEST(TensorOpsReshape, ErrorsNameTheInputShapeAndTheAttribute) {
  const std::string msg = testing::error_message([] { reshape({2, 3, 4}, "(5, -1)"); });
  EXPECT_NE(msg.find("[2,3,4]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("shape=(5, -1)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'node' (Reshape)"), std::string::npos) << msg;
  EXPECT_ERROR(reshape({2, 3, 4}, "(-1, -1)"), "more than one -1");
  EXPECT_ERROR(reshape({2, 3, 4}, "(0, 0, 0, 0)"), "code 0 finds no input dim left");
  EXPECT_ERROR(reshape({2, 3, 4}, "(4, 4)"), "the result [4,4] has 16 elements, the input 24");
  EXPECT_ERROR(reshape({2, 3, 4}, "(-4, -1, -1, -2)"), "cannot infer both parts");
  EXPECT_ERROR(reshape({2, 3, 4}, "(-4, 5, -1, -2)"), "cannot split 2 into (5, -1)");
  EXPECT_ERROR(reshape({2, 3, 4}, "(-4, 2)"), "-4 must be followed by the two dims");
  EXPECT_ERROR(reshape({2, 3, 4}, "(-3, -3)"), "code -3 finds no input dim left");
  EXPECT_ERROR(reshape({2, 3, 4}, "(-5, 4)"), "-5 is not a dim or a code");
  EXPECT_ERROR(shape_of("Reshape", {2, 3}, {{"target_shape", "(3, 2)"}}), "'target_shape'");
}

TEST(TensorOpsReshape, ViewsKeepElementOrderAndDtype) {
  const auto out = run("Reshape", {iota(DType::i32, {2, 3})}, {{"shape", "(3, -1)"}});
  EXPECT_EQ(out[0].type(), (TensorType{DType::i32, {3, 2}}));
  EXPECT_EQ(values(out[0]), (std::vector<double>{0, 1, 2, 3, 4, 5}));
}

TEST(TensorOpsReshape, FlattenExpandDimsSqueeze) {
  EXPECT_EQ(shape_of("Flatten", {2, 3, 4}, {}), (Shape{2, 12}));
  EXPECT_EQ(shape_of("flatten", {5}, {}), (Shape{5, 1}));
  EXPECT_EQ(shape_of("expand_dims", {2, 3}, {{"axis", "-1"}}), (Shape{2, 3, 1}));
  EXPECT_EQ(shape_of("expand_dims", {2, 3}, {{"axis", "-3"}}), (Shape{1, 2, 3}));
  EXPECT_ERROR(shape_of("expand_dims", {2, 3}, {{"axis", "3"}}), "axis 3 (attribute 'axis') is out of range");
  EXPECT_EQ(shape_of("squeeze", {1, 3, 1}, {}), (Shape{3}));
  EXPECT_EQ(shape_of("squeeze", {1, 3, 1}, {{"axis", "(0,)"}}), (Shape{3, 1}));
  EXPECT_EQ(shape_of("squeeze", {1, 1}, {}), (Shape{1}));
  EXPECT_ERROR(shape_of("squeeze", {1, 3, 1}, {{"axis", "1"}}), "cannot squeeze dim 1 of input [1,3,1]");
  EXPECT_ERROR(shape_of("squeeze", {1, 3, 1}, {{"axis", "(0, -3)"}}), "names dim 0 twice");
}

// ---- transpose -------------------------------------------------------------------------

TEST(TensorOpsTranspose, Shapes) {
  EXPECT_EQ(shape_of("transpose", {2, 3, 4}, {}), (Shape{4, 3, 2}));
  EXPECT_EQ(shape_of("transpose", {2, 3, 4}, {{"axes", "(0, 2, 1)"}}), (Shape{2, 4, 3}));
  EXPECT_EQ(shape_of("transpose", {2, 3, 4}, {{"axes", "(-1, 0, 1)"}}), (Shape{4, 2, 3}));
  EXPECT_ERROR(shape_of("transpose", {2, 3, 4}, {{"axes", "(0, 0, 1)"}}), "not a permutation");
  EXPECT_ERROR(shape_of("transpose", {2, 3, 4}, {{"axes", "(0, 1)"}}), "has 2 entries but input [2,3,4] has 3");
}

TEST(TensorOpsTranspose, Values) {
  EXPECT_EQ(values(run("transpose", {iota(DType::f32, {2, 3})})[0]), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  // out[a][b][c] = in[b][c][a], in[b][c][a] = 4b + 2c + a.
  EXPECT_EQ(values(run("transpose", {iota(DType::i8, {2, 2, 2})}, {{"axes", "(2, 0, 1)"}})[0]),
            (std::vector<double>{0, 2, 4, 6, 1, 3, 5, 7}));
  EXPECT_EQ(values(run("SwapAxis", {iota(DType::f64, {2, 3})}, {{"dim1", "1"}, {"dim2", "0"}})[0]),
            (std::vector<double>{0, 3, 1, 4, 2, 5}));
}

// ---- Concat, stack, SliceChannel -------------------------------------------------------

TEST(TensorOpsConcat, JoinsAlongTheDim) {
  const Tensor a = tensor(DType::f32, {2, 1}, {0, 1});
  const Tensor b = tensor(DType::f32, {2, 2}, {10, 11, 12, 13});
  for (const char* dim : {"1", "-1"}) {
    const auto out = run("Concat", {a, b}, {{"num_args", "2"}, {"dim", dim}});
    EXPECT_EQ(out[0].shape(), (Shape{2, 3}));
    EXPECT_EQ(values(out[0]), (std::vector<double>{0, 10, 11, 1, 12, 13}));
  }
  const auto rows = run("concat", {tensor(DType::f32, {1, 2}, {7, 8}), b}, {{"num_args", "2"}, {"dim", "0"}});
  EXPECT_EQ(values(rows[0]), (std::vector<double>{7, 8, 10, 11, 12, 13}));
}

TEST(TensorOpsConcat, RejectsMismatchedShapesAndDtypes) {
  EXPECT_ERROR(infer("Concat", {{DType::f32, {2, 1}}, {DType::f32, {3, 2}}}, {{"num_args", "2"}}),
               "input 1 has shape [3,2] but input 0 has [2,1]: only dim 1 may differ");
  EXPECT_ERROR(infer("Concat", {{DType::f32, {2, 1}}, {DType::f16, {2, 1}}}, {{"num_args", "2"}}), "f16");
  EXPECT_ERROR(infer("Concat", {{DType::f32, {2, 1}}}, {{"num_args", "1"}, {"dim", "2"}}), "out of range");
}

TEST(TensorOpsConcat, Stack) {
  const Tensor a = tensor(DType::f32, {2}, {1, 2}), b = tensor(DType::f32, {2}, {3, 4});
  EXPECT_EQ(values(run("stack", {a, b}, {{"num_args", "2"}})[0]), (std::vector<double>{1, 2, 3, 4}));
  for (const char* axis : {"1", "-1"}) {
    const auto out = run("stack", {a, b}, {{"num_args", "2"}, {"axis", axis}});
    EXPECT_EQ(out[0].shape(), (Shape{2, 2}));
    EXPECT_EQ(values(out[0]), (std::vector<double>{1, 3, 2, 4}));
  }
  EXPECT_ERROR(infer("stack", {{DType::f32, {2}}, {DType::f32, {3}}}, {{"num_args", "2"}}), "stack needs one shape");
}

TEST(TensorOpsSliceChannel, SplitsEvenly) {
  const auto parts = run("SliceChannel", {iota(DType::f32, {2, 4})}, {{"num_outputs", "2"}});
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].shape(), (Shape{2, 2}));
  EXPECT_EQ(values(parts[0]), (std::vector<double>{0, 1, 4, 5}));
  EXPECT_EQ(values(parts[1]), (std::vector<double>{2, 3, 6, 7}));
}

TEST(TensorOpsSliceChannel, SqueezeAxis) {
  const auto parts =
      run("split", {iota(DType::f32, {2, 3})}, {{"num_outputs", "3"}, {"axis", "-1"}, {"squeeze_axis", "True"}});
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[2].shape(), (Shape{2}));
  EXPECT_EQ(values(parts[0]), (std::vector<double>{0, 3}));
  EXPECT_EQ(values(parts[1]), (std::vector<double>{1, 4}));
  EXPECT_EQ(values(parts[2]), (std::vector<double>{2, 5}));
}

TEST(TensorOpsSliceChannel, Errors) {
  EXPECT_ERROR(shape_of("SliceChannel", {2, 4}, {{"num_outputs", "3"}}), "into num_outputs=3 equal parts");
  EXPECT_ERROR(shape_of("SliceChannel", {2, 4}, {{"num_outputs", "2"}, {"squeeze_axis", "True"}}),
               "squeeze_axis=True needs dim 1 of input [2,4] to equal num_outputs=2");
  EXPECT_ERROR(shape_of("SliceChannel", {2, 4}, {{"num_outputs", "0"}}), "between 1 and 1000000, not 0");
}

// ---- slices ----------------------------------------------------------------------------

std::vector<double> slice1d(const std::string& begin, const std::string& end, const std::string& step) {
  return values(run("slice", {iota(DType::f32, {5})}, {{"begin", begin}, {"end", end}, {"step", step}})[0]);
}

// Expected values are Python's list slicing of [0, 1, 2, 3, 4].
TEST(TensorOpsSlice, NoneNegativeIndicesAndSteps) {
  EXPECT_EQ(slice1d("(None,)", "(None,)", "(-1,)"), (std::vector<double>{4, 3, 2, 1, 0}));      // a[::-1]
  EXPECT_EQ(slice1d("(-2,)", "(None,)", "()"), (std::vector<double>{3, 4}));                   // a[-2:]
  EXPECT_EQ(slice1d("(3,)", "(0,)", "(-2,)"), (std::vector<double>{3, 1}));                    // a[3:0:-2]
  EXPECT_EQ(slice1d("(1,)", "(100,)", "(2,)"), (std::vector<double>{1, 3}));                   // a[1:100:2]
  EXPECT_EQ(slice1d("(None,)", "(-100,)", "(-1,)"), (std::vector<double>{4, 3, 2, 1, 0}));     // a[:-100:-1]
  EXPECT_EQ(slice1d("(10,)", "(None,)", "(-2,)"), (std::vector<double>{4, 2, 0}));             // a[10::-2]
  EXPECT_EQ(slice1d("(-100,)", "(None,)", "(-1,)"), (std::vector<double>{}));                  // a[-100::-1]
  EXPECT_EQ(slice1d("(4,)", "(1,)", "(None,)"), (std::vector<double>{}));                      // a[4:1]
  EXPECT_EQ(shape_of("slice", {5}, {{"begin", "(4,)"}, {"end", "(1,)"}}), (Shape{0}));
}

TEST(TensorOpsSlice, TwoDimsWithNegativeStep) {
  // a = arange(12).reshape(3, 4); a[::-1, 1::2]
  const auto out = run("slice", {iota(DType::i64, {3, 4})},
                       {{"begin", "(None, 1)"}, {"end", "(None, None)"}, {"step", "(-1, 2)"}});
  EXPECT_EQ(out[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(values(out[0]), (std::vector<double>{9, 11, 5, 7, 1, 3}));
  // Dims past `begin` are taken whole: a[1:2]
  EXPECT_EQ(values(run("crop", {iota(DType::f32, {3, 2})}, {{"begin", "(1,)"}, {"end", "(2,)"}})[0]),
            (std::vector<double>{2, 3}));
}

TEST(TensorOpsSlice, Errors) {
  EXPECT_ERROR(shape_of("slice", {5}, {{"begin", "(0,)"}, {"end", "(5,)"}, {"step", "(0,)"}}), "entry 0 is 0");
  EXPECT_ERROR(shape_of("slice", {5}, {{"begin", "(0, 0)"}, {"end", "(5, 1)"}}),
               "begin=(0, 0) has 2 entries but input [5] has only 1 dims");
  EXPECT_ERROR(shape_of("slice", {5, 2}, {{"begin", "(0, 0)"}, {"end", "(5,)"}}), "differ in length");
}

TEST(TensorOpsSlice, SliceAxis) {
  const Tensor x = iota(DType::f32, {2, 5});
  EXPECT_EQ(values(run("slice_axis", {x}, {{"axis", "1"}, {"begin", "1"}, {"end", "None"}})[0]),
            (std::vector<double>{1, 2, 3, 4, 6, 7, 8, 9}));
  EXPECT_EQ(values(run("slice_axis", {x}, {{"axis", "-1"}, {"begin", "-2"}, {"end", "-1"}})[0]),
            (std::vector<double>{3, 8}));
  EXPECT_ERROR(shape_of("slice_axis", {2, 5}, {{"axis", "1"}, {"begin", "3"}, {"end", "2"}}),
               "begin=3 end=2 is not a non-empty range of axis 1 (extent 5)");
  EXPECT_ERROR(shape_of("slice_axis", {2, 5}, {{"axis", "1"}, {"begin", "0"}, {"end", "6"}}), "extent 5");
}

TEST(TensorOpsSlice, SliceLike) {
  const Tensor x = iota(DType::f32, {3, 4});
  const auto all = run("slice_like", {x, Tensor::zeros({DType::f16, {2, 2}})});
  EXPECT_EQ(all[0].type(), (TensorType{DType::f32, {2, 2}}));
  EXPECT_EQ(values(all[0]), (std::vector<double>{0, 1, 4, 5}));
  const auto cols = run("slice_like", {x, Tensor::zeros({DType::f32, {1, 3}})}, {{"axes", "(-1,)"}});
  EXPECT_EQ(values(cols[0]), (std::vector<double>{0, 1, 2, 4, 5, 6, 8, 9, 10}));
  EXPECT_ERROR(infer("slice_like", {{DType::f32, {3, 4}}, {DType::f32, {4, 4}}}),
               "shape_like [4,4] is larger than input [3,4] in dim 0");
}

// ---- broadcasts -------------------------------------------------------------------------

TEST(TensorOpsBroadcast, BroadcastToWithZeroKeepingTheExtent) {
  const auto out = run("broadcast_to", {tensor(DType::f32, {1, 3}, {1, 2, 3})}, {{"shape", "(2, 0)"}});
  EXPECT_EQ(out[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(values(out[0]), (std::vector<double>{1, 2, 3, 1, 2, 3}));
  EXPECT_ERROR(shape_of("broadcast_to", {2, 3}, {{"shape", "(4, 3)"}}),
               "cannot broadcast input [2,3] to shape=(4, 3): dim 0 is 2");
  EXPECT_ERROR(shape_of("broadcast_to", {3}, {{"shape", "(2, 3)"}}), "the ranks differ");
}

TEST(TensorOpsBroadcast, BroadcastAxisAndLike) {
  const Tensor col = tensor(DType::f32, {2, 1}, {5, 6});
  EXPECT_EQ(values(run("broadcast_axis", {col}, {{"axis", "1"}, {"size", "3"}})[0]),
            (std::vector<double>{5, 5, 5, 6, 6, 6}));
  EXPECT_EQ(values(run("broadcast_axes", {col}, {{"axis", "(-1,)"}, {"size", "(2,)"}})[0]),
            (std::vector<double>{5, 5, 6, 6}));
  EXPECT_ERROR(shape_of("broadcast_axis", {2, 1}, {{"axis", "0"}, {"size", "3"}}), "its extent is 2, not 1");

  const auto like = run("broadcast_like", {col, Tensor::zeros({DType::f32, {2, 2}})});
  EXPECT_EQ(values(like[0]), (std::vector<double>{5, 5, 6, 6}));
  const auto axes = run("broadcast_like", {col, Tensor::zeros({DType::f32, {4, 3}})},
                        {{"lhs_axes", "(1,)"}, {"rhs_axes", "(0,)"}});
  EXPECT_EQ(axes[0].shape(), (Shape{2, 4}));
  EXPECT_ERROR(infer("broadcast_like", {{DType::f32, {2, 1}}, {DType::f32, {4, 3}}}, {{"lhs_axes", "(1,)"}}),
               "must be given together");
}

// ---- reductions -------------------------------------------------------------------------

TEST(TensorOpsReduce, SumAxesKeepdimsExclude) {
  const Tensor x = iota(DType::f32, {2, 3});  // [[0, 1, 2], [3, 4, 5]]
  auto sum = [&](const Attrs& a) { return run("sum", {x}, a)[0]; };
  EXPECT_EQ(values(sum({{"axis", "1"}})), (std::vector<double>{3, 12}));
  const Tensor kept = sum({{"axis", "0"}, {"keepdims", "True"}});
  EXPECT_EQ(kept.shape(), (Shape{1, 3}));
  EXPECT_EQ(values(kept), (std::vector<double>{3, 5, 7}));
  // exclude: reduce every axis except the named ones.
  const Tensor excl = sum({{"axis", "(1,)"}, {"exclude", "True"}});
  EXPECT_EQ(excl.shape(), (Shape{3}));
  EXPECT_EQ(values(excl), (std::vector<double>{3, 5, 7}));
  const Tensor excl_kept = sum({{"axis", "(0,)"}, {"exclude", "True"}, {"keepdims", "True"}});
  EXPECT_EQ(excl_kept.shape(), (Shape{2, 1}));
  EXPECT_EQ(values(excl_kept), (std::vector<double>{3, 12}));
  const Tensor all = sum({});
  EXPECT_EQ(all.shape(), (Shape{1}));
  EXPECT_EQ(values(all), (std::vector<double>{15}));
  EXPECT_EQ(sum({{"axis", "()"}, {"keepdims", "True"}}).shape(), (Shape{1, 1}));
}

TEST(TensorOpsReduce, MeanProdMaxMin) {
  const Tensor x = tensor(DType::f32, {2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(values(run("mean", {x}, {{"axis", "1"}})[0]), (std::vector<double>{2, 5}));
  EXPECT_EQ(values(run("prod", {x}, {{"axis", "-1"}})[0]), (std::vector<double>{6, 120}));
  EXPECT_EQ(values(run("max", {x}, {{"axis", "0"}})[0]), (std::vector<double>{4, 5, 6}));
  EXPECT_EQ(values(run("min_axis", {x}, {})[0]), (std::vector<double>{1}));
}

TEST(TensorOpsReduce, LowPrecisionAccumulatesWideAndRoundsOnce) {
  // 1 + 2^-8 + 2^-8 = 1 + 2^-7, a bf16 value; rounding to bf16 after each step would stay at
  // 1 (1 + 2^-8 is a tie that rounds to even).
  const Tensor x = tensor(DType::bf16, {3}, {1, 0x1p-8, 0x1p-8});
  EXPECT_EQ(values(run("sum", {x})[0]), (std::vector<double>{1 + 0x1p-7}));
}

TEST(TensorOpsReduce, MaxPropagatesNaNAndIsExactForInt64) {
  const auto out = run("max", {bits16(DType::f16, {3}, {0x3C00, 0x7E05, 0x4200})});
  EXPECT_EQ(bits_of(out[0]), (std::vector<uint16_t>{0x7E05}));  // the NaN itself, payload kept
  // 2^62 and 2^62 + 1 convert to the same double: only an int64 compare tells them apart.
  Tensor big({DType::i64, {2}});
  big.data<int64_t>()[0] = (int64_t{1} << 62);
  big.data<int64_t>()[1] = (int64_t{1} << 62) + 1;
  EXPECT_EQ(run("max", {big})[0].data<int64_t>()[0], (int64_t{1} << 62) + 1);
  EXPECT_EQ(run("min", {big})[0].data<int64_t>()[0], int64_t{1} << 62);
}

TEST(TensorOpsReduce, EmptyReductionsGiveTheIdentity) {
  const Tensor empty({DType::f32, {0, 2}});
  EXPECT_EQ(values(run("sum", {empty}, {{"axis", "0"}})[0]), (std::vector<double>{0, 0}));
  EXPECT_EQ(values(run("prod", {empty}, {{"axis", "0"}})[0]), (std::vector<double>{1, 1}));
  EXPECT_EQ(values(run("max", {empty}, {{"axis", "0"}})[0]), (std::vector<double>{-kInf, -kInf}));
}

TEST(TensorOpsReduce, Errors) {
  EXPECT_ERROR(shape_of("sum", {2, 3}, {{"axis", "2"}}), "axis 2 (attribute 'axis') is out of range for input [2,3]");
  EXPECT_ERROR(shape_of("sum", {2, 3}, {{"axis", "(0, -2)"}}), "names dim 0 twice");
}

// ---- sources ------------------------------------------------------------------------------

TEST(TensorOpsSources, ZerosOnesFull) {
  const auto z = run("_zeros", {}, {{"shape", "(2, 3)"}, {"dtype", "float16"}});
  EXPECT_EQ(z[0].type(), (TensorType{DType::f16, {2, 3}}));
  EXPECT_EQ(values(z[0]), std::vector<double>(6, 0.0));
  EXPECT_EQ(values(run("_ones", {}, {{"shape", "(2,)"}, {"dtype", "int32"}})[0]), (std::vector<double>{1, 1}));
  const auto f = run("_full", {}, {{"shape", "(1,)"}, {"dtype", "bfloat16"}, {"value", "2.5"}});
  EXPECT_EQ(f[0].dtype(), DType::bf16);
  EXPECT_EQ(values(f[0]), (std::vector<double>{2.5}));
  EXPECT_EQ(infer("_zeros", {}, {{"shape", "(4,)"}, {"ctx", "cpu(0)"}}).at(0), (TensorType{DType::f32, {4}}));
}

// A 0 extent (the LSTM begin state's "(2, 0, 200)") or an empty shape means the consumer
// decides: the output stays unknown for type inference to fill in from the consumer.
TEST(TensorOpsSources, ZeroExtentLeavesTheOutputUnknown) {
  const ir::OpDef& zeros = ir::OpRegistry::global().get("_zeros");
  for (const char* shape : {"(2, 0, 200)", "()"}) {
    const ir::Attrs attrs = ir::parse_attrs(zeros, {{"shape", shape}});
    ir::InferContext ctx{attrs, {}, {std::nullopt}};
    zeros.infer(ctx);
    EXPECT_FALSE(ctx.outputs[0].has_value()) << shape;
  }
  EXPECT_ERROR(infer("_zeros", {}, {{"shape", "(2, -1)"}}), "negative extent");
}

// ---- overflow checks ----------------------------------------------------------------------

double finite_flag(const std::vector<Tensor>& ins) {
  const std::string op = ins.size() == 1 ? "all_finite" : "multi_all_finite";
  const Attrs attrs = ins.size() == 1 ? Attrs{} : Attrs{{"num_arrays", std::to_string(ins.size())}};
  const auto out = run(op, ins, attrs);
  EXPECT_EQ(out[0].type(), (TensorType{DType::f32, {1}}));
  return out[0].get_f64(0);
}

TEST(TensorOpsAllFinite, NaNInfAndNegativeZero) {
  EXPECT_EQ(finite_flag({tensor(DType::f32, {3}, {1, -0.0, 3})}), 1.0);
  EXPECT_EQ(finite_flag({tensor(DType::f32, {2}, {1, kNaN})}), 0.0);
  EXPECT_EQ(finite_flag({tensor(DType::f32, {1}, {-kInf})}), 0.0);
  EXPECT_EQ(finite_flag({bits16(DType::f16, {2}, {0x7BFF, 0x8000})}), 1.0);  // 65504 and -0
  EXPECT_EQ(finite_flag({bits16(DType::f16, {1}, {0x7C00})}), 0.0);          // +Inf
  EXPECT_EQ(finite_flag({bits16(DType::bf16, {2}, {0x8000, 0x7F81})}), 0.0);  // -0, a NaN
  EXPECT_EQ(finite_flag({iota(DType::i32, {3})}), 1.0);
}

TEST(TensorOpsAllFinite, MultiAllFinite) {
  const Tensor ok = tensor(DType::f32, {2}, {1, 2});
  EXPECT_EQ(finite_flag({ok, tensor(DType::f16, {1}, {5})}), 1.0);
  EXPECT_EQ(finite_flag({ok, tensor(DType::f32, {3}, {0, kInf, 0})}), 0.0);
}

// ---- amp_multicast --------------------------------------------------------------------------

std::vector<TensorType> multicast(const std::vector<TensorType>& ins, bool narrow) {
  return infer("amp_multicast", ins,
               {{"num_outputs", std::to_string(ins.size())}, {"cast_narrow", narrow ? "True" : "False"}});
}

TEST(TensorOpsAmpMulticast, EachOutputKeepsItsInputsShape) {
  const TensorType a{DType::f16, {2, 3}}, b{DType::f32, {4}};
  EXPECT_EQ(multicast({a, b}, false), (std::vector<TensorType>{{DType::f32, {2, 3}}, {DType::f32, {4}}}));
  EXPECT_EQ(multicast({a, b}, true), (std::vector<TensorType>{{DType::f16, {2, 3}}, {DType::f16, {4}}}));
  EXPECT_EQ(multicast({a, {DType::f16, {1}}}, false), (std::vector<TensorType>{a, {DType::f16, {1}}}));
  // f64 is no AMP type: it passes through, as in MXNet.
  EXPECT_EQ(multicast({{DType::f64, {2}}, a}, false), (std::vector<TensorType>{{DType::f64, {2}}, a}));
}

TEST(TensorOpsAmpMulticast, RejectsAmbiguousAndNonFloatInputs) {
  EXPECT_ERROR(multicast({{DType::f16, {2}}, {DType::bf16, {2}}}, false), "mix f16 and bf16");
  EXPECT_ERROR(multicast({{DType::f16, {2}}, {DType::bf16, {2}}, {DType::f32, {2}}}, true), "narrowest");
  EXPECT_EQ(multicast({{DType::f16, {2}}, {DType::bf16, {2}}, {DType::f32, {1}}}, false)[1].dtype, DType::f32);
  EXPECT_ERROR(multicast({{DType::f16, {2}}, {DType::i32, {2}}}, false), "input 1 is i32");
}

TEST(TensorOpsAmpMulticast, NarrowingRoundsToNearestEven) {
  // 1 + 2^-11 is halfway between f16 neighbours 1 and 1 + 2^-10: even is 1.
  // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 and 1 + 2^-9: even is 1 + 2^-9.
  const Tensor wide = tensor(DType::f32, {3}, {1 + 0x1p-11, 1 + 3 * 0x1p-11, 70000});
  const Tensor narrow = bits16(DType::f16, {2}, {0x7E01, 0x3C00});  // a NaN with payload, 1
  const auto out = run("amp_multicast", {narrow, wide}, {{"num_outputs", "2"}, {"cast_narrow", "True"}});
  EXPECT_EQ(bits_of(out[0]), (std::vector<uint16_t>{0x7E01, 0x3C00}));  // unchanged, bit for bit
  EXPECT_EQ(out[1].shape(), (Shape{3}));
  EXPECT_EQ(values(out[1]), (std::vector<double>{1, 1 + 0x1p-9, kInf}));
  const auto widened = run("amp_multicast", {narrow, wide}, {{"num_outputs", "2"}});
  EXPECT_EQ(widened[0].dtype(), DType::f32);
  EXPECT_TRUE(std::isnan(widened[0].get_f64(0)));
  EXPECT_EQ(widened[0].get_f64(1), 1.0);
}

// ---- bits -----------------------------------------------------------------------------------

// Data movement copies 16-bit floats as bits: signalling NaNs, payloads and -0 survive.
TEST(TensorOpsBitExact, NaNPayloadsSurviveEveryDataMove) {
  for (DType t : {DType::bf16, DType::f16}) {
    const std::vector<uint16_t> in = {0x7F81, 0xFFC3, 0x7C01, 0x8000, 0xFE55, 0x0001};
    const Tensor x = bits16(t, {2, 3}, in);
    const std::string name(ir::dtype_name(t));
    EXPECT_EQ(bits_of(run("Reshape", {x}, {{"shape", "(-1,)"}})[0]), in) << name;
    EXPECT_EQ(bits_of(run("transpose", {x})[0]),
              (std::vector<uint16_t>{0x7F81, 0x8000, 0xFFC3, 0xFE55, 0x7C01, 0x0001}))
        << name;
    EXPECT_EQ(bits_of(run("slice", {x}, {{"begin", "(None, None)"}, {"end", "(None, None)"}, {"step", "(-1, -2)"}})[0]),
              (std::vector<uint16_t>{0x0001, 0x8000, 0x7C01, 0x7F81}))
        << name;
    EXPECT_EQ(bits_of(run("Concat", {x, x}, {{"num_args", "2"}, {"dim", "0"}})[0]).size(), 12u) << name;
    EXPECT_EQ(bits_of(run("Concat", {x, x}, {{"num_args", "2"}, {"dim", "0"}})[0]),
              (std::vector<uint16_t>{0x7F81, 0xFFC3, 0x7C01, 0x8000, 0xFE55, 0x0001, 0x7F81, 0xFFC3, 0x7C01, 0x8000,
                                     0xFE55, 0x0001}))
        << name;
    const auto parts = run("SliceChannel", {x}, {{"num_outputs", "3"}});
    EXPECT_EQ(bits_of(parts[1]), (std::vector<uint16_t>{0xFFC3, 0xFE55})) << name;
    EXPECT_EQ(bits_of(run("broadcast_axis", {bits16(t, {1, 2}, {0x7F81, 0xFFC3})}, {{"axis", "0"}, {"size", "2"}})[0]),
              (std::vector<uint16_t>{0x7F81, 0xFFC3, 0x7F81, 0xFFC3}))
        << name;
  }
}

}  // namespace
}  // namespace ampfuse
