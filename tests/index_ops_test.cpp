// Indexing, shape and data-movement ops (ir/ops/tensor_index.cpp): their registry entries,
// shape inference and its errors, the interpreter against outputs of the real MXNet 1.9.1
// (tests/data/index_ops/mxnet_cases.json, written by scripts/index_ops_cases.py), fused
// chains around reverse and reshape_like against the interpreter, and an MXNet symbol JSON that uses them.
#include "engine/execution/executor.h"
#include "engine/passes/amp_convert.h"
#include "engine/passes/autodiff.h"
#include "ir/builder.h"
#include "ir/mxnet_json.h"
#include "ir/op_registry.h"
#include "runtime/interpreter.h"
#include "runtime/reference/reference_kernels.h"
#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>

namespace ampfuse {
namespace {

using ir::DType;
using ir::Shape;
using ir::TensorType;
using nlohmann::json;
using runtime::Tensor;
using Attrs = std::map<std::string, std::string>;

const char* const kIndexOps[] = {"_arange",      "_contrib_arange_like", "shape_array",    "size_array",
                                 "reverse",      "tile",                 "repeat",         "reshape_like",
                                 "depth_to_space", "space_to_depth",     "take",           "pick",
                                 "gather_nd",    "one_hot",              "Crop",           "Pad",
                                 "UpSampling",   "_contrib_BilinearResize2D", "SequenceMask",         "SequenceLast",   "SequenceReverse"};

const json& mxnet_cases() {
  static const json j = [] {
    std::ifstream f(std::string(AMPFUSE_TESTDATA_DIR) + "/index_ops/mxnet_cases.json");
    return json::parse(f);
  }();
  return j;
}

TensorType type_of(const json& t) {
  const auto dtype = ir::parse_dtype(t.at("dtype").get<std::string>());
  EXPECT_TRUE(dtype) << t.at("dtype");
  return {dtype.value_or(DType::f32), t.at("shape").get<Shape>()};
}

Tensor tensor_of(const json& t) {
  Tensor x(type_of(t));
  const auto& v = t.at("values");
  for (int64_t i = 0; i < x.size(); ++i) x.set_f64(i, v.at(i).get<double>());
  return x;
}

// Exactly MXNet's dtype, shape and values (every value here is exact in a double).
::testing::AssertionResult same_as_mxnet(const json& want, const Tensor& got) {
  if (got.type() != type_of(want))
    return ::testing::AssertionFailure() << "got " << ir::type_str(got.type()) << ", MXNet gives "
                                         << ir::type_str(type_of(want));
  const auto& v = want.at("values");
  for (int64_t i = 0; i < got.size(); ++i)
    if (got.get_f64(i) != v.at(i).get<double>())
      return ::testing::AssertionFailure() << "element " << i << " is " << got.get_f64(i) << ", MXNet gives " << v.at(i);
  return ::testing::AssertionSuccess();
}

// One `op` node over input variables of the given types, types inferred.
ir::Graph one_node(const std::string& op, const std::vector<TensorType>& ins, const Attrs& attrs) {
  ir::GraphBuilder b;
  std::vector<ir::ValueRef> refs;
  for (size_t i = 0; i < ins.size(); ++i) refs.push_back(b.input(fmt::format("x{}", i), ins[i]));
  for (ir::ValueRef out : b.op_multi(op, refs, attrs, "node")) b.output(out);
  return b.finish();
}

TensorType infer(const std::string& op, const std::vector<TensorType>& ins, const Attrs& attrs) {
  return one_node(op, ins, attrs).nodes.back().outputs.at(0);
}

TensorType f32(Shape s) { return {DType::f32, std::move(s)}; }

// ---- registry ------------------------------------------------------------------------------

// MXNet 1.9.1's lists: FP16_FP32_FUNCS for fp16, FP32_FUNCS for bf16.
TEST(IndexOpsRegistry, NeutralForFp16Fp32ForBf16WithAReferenceKernel) {
  const auto& r = ir::OpRegistry::global();
  for (const char* op : kIndexOps) {
    ASSERT_NE(r.find(op), nullptr) << op;
    EXPECT_EQ(r.get(op).amp_fp16, ir::AmpClass::neutral) << op;
    EXPECT_EQ(r.get(op).amp_bf16, ir::AmpClass::fp32) << op;
    EXPECT_NE(runtime::find_reference_kernel(op), nullptr) << op;
  }
  EXPECT_TRUE(r.get("take").inputs.at(1).index);
  EXPECT_TRUE(r.get("pick").inputs.at(1).index);
  EXPECT_TRUE(r.get("gather_nd").inputs.at(1).index);
  EXPECT_TRUE(r.get("one_hot").inputs.at(0).index);
  EXPECT_TRUE(r.get("SequenceMask").inputs.at(1).index);
  EXPECT_FALSE(r.get("take").inputs.at(0).index);
  EXPECT_EQ(r.resolve("flip").name, "reverse");
  EXPECT_EQ(r.resolve("pad").name, "Pad");
}

// Only reshape_like (a view) fuses: reverse would need negative strides, which the kernel
// generators do not take, the others a division or modulo in an access map or data-dependent
// reads; _arange is no source, so AMP does
// not make it directly in 16 bits (bf16 holds integers exactly only up to 256).
TEST(IndexOpsRegistry, KindsAndFusability) {
  const auto& r = ir::OpRegistry::global();
  for (const char* op : kIndexOps) {
    EXPECT_EQ(r.get(op).fusable, std::string_view(op) == "reshape_like") << op;
    EXPECT_FALSE(r.get(op).remap_access) << op;
  }
  EXPECT_EQ(r.get("reshape_like").kind, ir::OpKind::view);
  EXPECT_EQ(r.get("_arange").kind, ir::OpKind::compute);
  EXPECT_EQ(r.get("tile").kind, ir::OpKind::data_movement);
  ASSERT_TRUE(r.get("one_hot").table_index);
  EXPECT_EQ(r.get("one_hot").table_index->size_attr, "depth");
}

// ---- shape inference and its errors ----------------------------------------------------------

TEST(IndexOpsShapes, OutputTypes) {
  EXPECT_EQ(infer("_arange", {}, {{"start", "0"}, {"stop", "13"}, {"step", "2"}, {"repeat", "3"}, {"dtype", "int64"}}),
            (TensorType{DType::i64, {21}}));
  EXPECT_EQ(infer("shape_array", {{DType::f16, {2, 0, 5}}}, {}), (TensorType{DType::i64, {3}}));
  EXPECT_EQ(infer("take", {f32({5, 6, 7}), {DType::i32, {2, 3}}}, {{"axis", "-2"}}), f32({5, 2, 3, 7}));
  EXPECT_EQ(infer("tile", {f32({2, 3})}, {{"reps", "(4, 1, 2)"}}), f32({4, 2, 6}));
  EXPECT_EQ(infer("repeat", {f32({2, 3})}, {{"repeats", "0"}, {"axis", "1"}}), f32({0}));  // as MXNet 1.9.1
  EXPECT_EQ(infer("one_hot", {{DType::i64, {2, 3}}}, {{"depth", "7"}, {"dtype", "float16"}}),
            (TensorType{DType::f16, {2, 3, 7}}));
  EXPECT_EQ(infer("gather_nd", {f32({4, 5, 6}), f32({2, 9})}, {}), f32({9, 6}));
  EXPECT_EQ(infer("gather_nd", {f32({4, 5}), f32({2})}, {}), f32({1}));
  EXPECT_EQ(infer("SequenceLast", {f32({7, 3, 2}), f32({3})}, {{"use_sequence_length", "True"}}), f32({3, 2}));
  EXPECT_EQ(infer("_contrib_BilinearResize2D", {{DType::f16, {1, 3, 10, 9}}},
                  {{"scale_height", "1.55"}, {"scale_width", "0.5"}}),
            (TensorType{DType::f16, {1, 3, 15, 4}}));
  EXPECT_EQ(infer("UpSampling", {f32({1, 2, 3, 3}), f32({1, 5, 1, 1})},
                  {{"scale", "2"}, {"sample_type", "nearest"}, {"num_args", "2"}}),
            f32({1, 7, 6, 6}));
}

TEST(IndexOpsShapes, ErrorsNameTheAttributeOrInput) {
  using testing::error_message;
  const auto fails = [](const std::string& op, const std::vector<TensorType>& ins, const Attrs& attrs) {
    return error_message([&] { one_node(op, ins, attrs); });
  };
  EXPECT_NE(fails("_arange", {}, {{"start", "5"}, {"stop", "2"}}).find("empty range"), std::string::npos);
  EXPECT_NE(fails("_arange", {}, {{"start", "0"}, {"stop", "2"}, {"step", "0"}}).find("'step'"), std::string::npos);
  EXPECT_NE(fails("_arange", {}, {{"start", "0"}, {"stop", "2"}, {"repeat", "0"}}).find("'repeat'"), std::string::npos);
  EXPECT_NE(fails("_arange", {}, {{"start", "0"}, {"infer_range", "True"}}).find("'infer_range=True'"), std::string::npos);
  EXPECT_NE(fails("reverse", {f32({3, 4})}, {{"axis", "(-1,)"}}).find("attribute 'axis'"), std::string::npos);
  EXPECT_NE(fails("reverse", {f32({3, 4})}, {{"axis", "(2,)"}}).find("attribute 'axis'"), std::string::npos);
  EXPECT_NE(fails("tile", {f32({3, 4})}, {{"reps", "(0, 1)"}}).find("reps=(0, 1)"), std::string::npos);
  EXPECT_NE(fails("repeat", {f32({3, 4})}, {{"repeats", "-1"}}).find("'repeats'"), std::string::npos);
  EXPECT_NE(fails("repeat", {f32({3, 4})}, {{"repeats", "2"}, {"axis", "2"}}).find("attribute 'axis'"),
            std::string::npos);
  EXPECT_NE(fails("take", {f32({3, 4}), f32({2})}, {{"mode", "bogus"}}).find("mode"), std::string::npos);
  EXPECT_NE(fails("pick", {f32({3, 4}), f32({4})}, {{"axis", "1"}}).find("input 1 (index)"), std::string::npos);
  EXPECT_NE(fails("pick", {f32({3, 4}), f32({3})}, {{"axis", "None"}}).find("attribute 'axis'"), std::string::npos);
  EXPECT_NE(fails("pick", {f32({3, 0}), f32({3})}, {{"axis", "1"}}).find("empty"), std::string::npos);
  EXPECT_NE(fails("take", {f32({0, 4}), f32({3})}, {}).find("empty"), std::string::npos);
  EXPECT_NE(fails("gather_nd", {f32({3, 4}), f32({3, 2})}, {}).find("input 1 (indices)"), std::string::npos);
  EXPECT_NE(fails("one_hot", {f32({3})}, {{"depth", "-2"}}).find("'depth'"), std::string::npos);
  EXPECT_NE(fails("reshape_like", {f32({3, 4}), f32({5, 2})}, {}).find("element count"), std::string::npos);
  EXPECT_NE(fails("reshape_like", {f32({3, 4}), f32({6, 2})}, {{"lhs_begin", "3"}}).find("'lhs_begin'"),
            std::string::npos);
  EXPECT_NE(fails("depth_to_space", {f32({1, 3, 2, 2})}, {{"block_size", "2"}}).find("block_size"), std::string::npos);
  EXPECT_NE(fails("space_to_depth", {f32({1, 3, 3, 2})}, {{"block_size", "2"}}).find("block_size"), std::string::npos);
  EXPECT_NE(fails("Crop", {f32({1, 1, 5, 6})}, {{"offset", "(4, 0)"}, {"h_w", "(2, 3)"}}).find("'offset'"),
            std::string::npos);
  EXPECT_NE(fails("Crop", {f32({1, 1, 5, 6})}, {{"num_args", "3"}}).find("'num_args'"), std::string::npos);
  EXPECT_NE(fails("Pad", {f32({1, 2, 3, 3})}, {{"mode", "reflect"}, {"pad_width", "(0,0,0,0,3,0,0,0)"}})
                .find("'pad_width'"),
            std::string::npos);
  EXPECT_NE(fails("Pad", {f32({1, 2, 3, 3})}, {{"mode", "edge"}, {"pad_width", "(1,0,0,0,0,0,0,0)"}})
                .find("first two dims"),
            std::string::npos);
  EXPECT_NE(fails("Pad", {f32({2, 3, 3})}, {{"mode", "edge"}, {"pad_width", "(0,0,0,0,1,1)"}}).find("4-D and 5-D"),
            std::string::npos);
  EXPECT_NE(fails("Pad", {f32({1, 2, 3, 3})}, {{"mode", "wrap"}, {"pad_width", "(0,0,0,0,1,1,1,1)"}}).find("mode"),
            std::string::npos);
  EXPECT_NE(fails("UpSampling", {f32({1, 2, 3, 3}), f32({1, 2, 4, 4})},
                  {{"scale", "2"}, {"sample_type", "nearest"}, {"num_args", "2"}})
                .find("input 1"),
            std::string::npos);
  // odd_scale needs both scales, and so does mode=size once scale_height is given (MXNet
  // fails with "bad optional access").
  EXPECT_NE(fails("_contrib_BilinearResize2D", {f32({1, 2, 3, 3})}, {{"mode", "odd_scale"}, {"scale_height", "2"}})
                .find("attribute 'scale_width' is needed by mode='odd_scale'"),
            std::string::npos);
  EXPECT_NE(fails("_contrib_BilinearResize2D", {f32({1, 2, 3, 3})}, {{"scale_height", "2"}})
                .find("attribute 'scale_width' is needed by mode='size'"),
            std::string::npos);
  const std::string bad_mode = fails("_contrib_BilinearResize2D", {f32({1, 2, 3, 3})}, {{"mode", "to_odd"}});
  EXPECT_NE(bad_mode.find("'to_odd' is not one of"), std::string::npos) << bad_mode;
  EXPECT_NE(bad_mode.find("'node'"), std::string::npos) << bad_mode;
  EXPECT_NE(fails("_contrib_BilinearResize2D", {f32({1, 2, 3, 3})}, {{"height", "0"}}).find("'height'"),
            std::string::npos);
  EXPECT_NE(fails("_contrib_BilinearResize2D", {f32({2, 3, 3})}, {{"height", "4"}}).find("4-D"), std::string::npos);
  EXPECT_NE(fails("SequenceMask", {f32({4, 3}), f32({4})}, {{"use_sequence_length", "True"}})
                .find("input 1 (sequence_length)"),
            std::string::npos);
  EXPECT_NE(fails("SequenceReverse", {f32({4, 3})}, {{"axis", "1"}}).find("attribute 'axis'"), std::string::npos);
  EXPECT_NE(fails("SequenceMask", {f32({4, 3})}, {{"axis", "2"}}).find("attribute 'axis'"), std::string::npos);
}

// ---- the interpreter against MXNet -------------------------------------------------------------

TEST(IndexOpsMxnet, InterpreterGivesMxnetsOutputs) {
  const json& cases = mxnet_cases().at("cases");
  ASSERT_GE(cases.size(), 86u);
  for (const json& c : cases) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    std::vector<TensorType> types;
    runtime::Bindings vars;
    for (size_t i = 0; i < c.at("inputs").size(); ++i) {
      types.push_back(type_of(c["inputs"][i]));
      vars.emplace(fmt::format("x{}", i), tensor_of(c["inputs"][i]));
    }
    const ir::Graph g = one_node(c.at("op"), types, c.at("attrs").get<Attrs>());
    const std::vector<Tensor> out = runtime::interpret(g, vars);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_TRUE(same_as_mxnet(c.at("output"), out[0]));
  }
}

// mode='raise' and gather_nd throw on an index outside the data, naming the op and index.
TEST(IndexOpsMxnet, OutOfRangeIndicesRaise) {
  Tensor a({DType::f32, {3, 4}});
  Tensor idx({DType::f32, {1}});
  idx.set_f64(0, 3.0);
  const ir::Graph take = one_node("take", {a.type(), idx.type()}, {{"mode", "raise"}});
  EXPECT_ERROR(runtime::interpret(take, {{"x0", a}, {"x1", idx}}), "take index 3 is out of range [0, 3) (mode='raise')");
  Tensor nd_idx({DType::f32, {2, 1}});
  nd_idx.set_f64(0, 0.0);
  nd_idx.set_f64(1, -5.0);
  const ir::Graph gather = one_node("gather_nd", {a.type(), nd_idx.type()}, {});
  EXPECT_ERROR(runtime::interpret(gather, {{"x0", a}, {"x1", nd_idx}}), "gather_nd index -5 is out of range for dim 1");
}

// A symbol JSON written by MXNet 1.9.1 (YOLOv3's grid offsets from _arange, tile, repeat and
// slice_like, then reverse, UpSampling, pad, take, SequenceMask, shape_array, one_hot)
// imports and computes MXNet's outputs.
TEST(IndexOpsMxnet, ImportedSymbolComputesMxnetsOutputs) {
  const json& graph = mxnet_cases().at("graph");
  ir::MxnetImportOptions opts;
  runtime::Bindings vars;
  for (const auto& [name, t] : graph.at("inputs").items()) {
    opts.input_shapes[name] = type_of(t).shape;
    opts.input_dtypes[name] = type_of(t).dtype;
    vars.emplace(name, tensor_of(t));
  }
  const ir::Graph g = ir::import_mxnet_json(graph.at("symbol").get<std::string>(), "yolo_like-symbol.json", opts);
  const std::vector<Tensor> out = runtime::interpret(g, vars);
  ASSERT_EQ(out.size(), graph.at("outputs").size());
  for (size_t k = 0; k < out.size(); ++k) EXPECT_TRUE(same_as_mxnet(graph["outputs"][k], out[k])) << "output " << k;
}

// ---- bilinear UpSampling against MXNet -------------------------------------------------------

const json& bilinear_upsampling_cases() {
  static const json j = [] {
    std::ifstream f(std::string(AMPFUSE_TESTDATA_DIR) + "/index_ops/upsampling_bilinear.json");
    return json::parse(f);
  }();
  return j;
}

// MXNet runs the Deconvolution by im2col and GEMM, ampfuse by its own loops or oneDNN: the
// sums may round differently, so within a few f32 ulps of the values' scale (1).
::testing::AssertionResult close_to_mxnet(const json& want, const Tensor& got) {
  if (got.type() != type_of(want))
    return ::testing::AssertionFailure() << "got " << ir::type_str(got.type()) << ", MXNet gives "
                                         << ir::type_str(type_of(want));
  const auto& v = want.at("values");
  for (int64_t i = 0; i < got.size(); ++i) {
    const double w = v.at(i).get<double>();
    if (!(std::abs(got.get_f64(i) - w) <= 2e-6 * (1 + std::abs(w))))
      return ::testing::AssertionFailure() << "element " << i << " is " << got.get_f64(i) << ", MXNet gives " << w;
  }
  return ::testing::AssertionSuccess();
}

// Symbol JSON as MXNet writes it (the weight variable "up_weight" carries the op's
// attributes and __init__), imported: the weight is a param of shape (C, 1, k, k); the
// interpreter and the executor (oneDNN's deconvolution) give MXNet's output, and the
// gradients of data and weight for a head gradient are MXNet's.
TEST(IndexOpsMxnet, BilinearUpSamplingIsMxnetsDeconvolution) {
  const json& cases = bilinear_upsampling_cases().at("cases");
  ASSERT_EQ(cases.size(), 5u);
  for (const json& c : cases) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    ir::MxnetImportOptions opts;
    opts.input_shapes["data"] = type_of(c.at("data")).shape;
    const ir::Graph g = ir::import_mxnet_json(c.at("symbol").get<std::string>(), "up-symbol.json", opts);
    bool weight_is_param = false;
    for (const ir::Node& n : g.nodes)
      if (n.is_var() && n.name == "up_weight") {
        weight_is_param = n.role == ir::VarRole::param;
        EXPECT_EQ(n.outputs.at(0), type_of(c.at("weight")));
      }
    EXPECT_TRUE(weight_is_param);
    const runtime::Bindings vars{{"data", tensor_of(c.at("data"))}, {"up_weight", tensor_of(c.at("weight"))}};
    EXPECT_TRUE(close_to_mxnet(c.at("output"), runtime::interpret(g, vars).at(0))) << "interpreter";
    EXPECT_TRUE(close_to_mxnet(c.at("output"), engine::Executable::compile(g).run(vars).at(0))) << "executor";

    const engine::BackwardGraph bg = engine::build_backward(g, {.wrt = {"data", "up_weight"}});
    ASSERT_EQ(bg.head_grads.size(), 1u);
    runtime::Bindings with_head = vars;
    with_head.emplace(bg.head_grads[0], tensor_of(c.at("head_grad")));
    for (const bool fused : {false, true}) {
      SCOPED_TRACE(fused ? "executor" : "interpreter");
      const std::vector<Tensor> out =
          fused ? engine::Executable::compile(bg.graph).run(with_head) : runtime::interpret(bg.graph, with_head);
      ASSERT_EQ(out.size(), 3u);
      for (size_t k = 0; k < 2; ++k)
        EXPECT_TRUE(close_to_mxnet(c.at(bg.gradient_of[k] == "data" ? "data_grad" : "weight_grad"), out[1 + k]))
            << bg.gradient_of[k];
    }
  }
}

// A changed weight is seen (the comparison above can fail), and the refusals name the
// attribute: num_filter must be the channel count (MXNet's num_group), the weight (C, 1, k, k).
TEST(IndexOpsMxnet, BilinearUpSamplingChecksItsWeight) {
  const json& c = bilinear_upsampling_cases().at("cases").at(0);
  ir::MxnetImportOptions opts;
  opts.input_shapes["data"] = type_of(c.at("data")).shape;
  const ir::Graph g = ir::import_mxnet_json(c.at("symbol").get<std::string>(), "up-symbol.json", opts);
  Tensor w = tensor_of(c.at("weight"));
  w.set_f64(5, w.get_f64(5) + 0.01);
  EXPECT_FALSE(close_to_mxnet(c.at("output"), runtime::interpret(g, {{"data", tensor_of(c.at("data"))}, {"up_weight", w}}).at(0)));

  using testing::error_message;
  // Bilinear takes data and weight whatever num_args says.
  const std::string one_input =
      error_message([] { one_node("UpSampling", {f32({1, 2, 3, 3})}, {{"scale", "2"}, {"sample_type", "bilinear"}, {"num_filter", "2"}}); });
  EXPECT_NE(one_input.find("2 expected"), std::string::npos) << one_input;
  const Attrs up{{"scale", "2"}, {"sample_type", "bilinear"}, {"num_filter", "2"}};
  EXPECT_EQ(infer("UpSampling", {f32({1, 3, 5, 4}), f32({3, 1, 4, 4})}, {{"scale", "2"}, {"sample_type", "bilinear"}, {"num_filter", "3"}}),
            f32({1, 3, 10, 8}));
  EXPECT_EQ(infer("UpSampling", {f32({1, 2, 5, 4}), f32({2, 1, 5, 5})}, {{"scale", "3"}, {"sample_type", "bilinear"}, {"num_filter", "2"}}),
            f32({1, 2, 15, 12}));
  const std::string wrong_filters = error_message([&] { one_node("UpSampling", {f32({1, 3, 5, 4}), f32({3, 1, 4, 4})}, up); });
  EXPECT_NE(wrong_filters.find("'num_filter'=2 must equal the data's 3 channels"), std::string::npos) << wrong_filters;
  const std::string wrong_weight = error_message([&] { one_node("UpSampling", {f32({1, 2, 5, 4}), f32({2, 1, 3, 3})}, up); });
  EXPECT_NE(wrong_weight.find("weight"), std::string::npos) << wrong_weight;
}

// Under fp16 AMP (UpSampling is neutral there, fp32 under bf16: MXNet's lists) bilinear
// UpSampling after a Convolution runs in f16 and reads its weight cast to f16, as MXNet
// infers the weight's type from the data's.
TEST(IndexOpsAmp, BilinearUpSamplingFollowsItsData) {
  for (const DType target : {DType::f16, DType::bf16}) {
    ir::GraphBuilder b;
    const ir::ValueRef x = b.input("x", {DType::f32, {1, 2, 3, 3}});
    const ir::ValueRef cw = b.param("cw", TensorType{DType::f32, {2, 2, 1, 1}});
    const ir::ValueRef uw = b.param("uw", TensorType{DType::f32, {2, 1, 4, 4}});
    const ir::ValueRef conv = b.op("Convolution", {x, cw}, {{"kernel", "(1,1)"}, {"num_filter", "2"}, {"no_bias", "True"}});
    b.output(b.op("UpSampling", {conv, uw}, {{"scale", "2"}, {"sample_type", "bilinear"}, {"num_filter", "2"}}, "up"));
    ir::Graph g = b.finish();
    engine::AmpOptions opts;
    opts.target = target;
    engine::amp_convert(g, opts);
    const DType want = target == DType::f16 ? DType::f16 : DType::f32;
    for (const ir::Node& n : g.nodes)
      if (n.name == "up") {
        EXPECT_EQ(n.outputs[0].dtype, want) << ir::dtype_name(target);
        EXPECT_EQ(g.type(n.inputs[1]).dtype, want) << ir::dtype_name(target);
      }
    const runtime::Bindings vars = runtime::random_bindings(g, 5);
    const std::vector<Tensor> want_out = runtime::interpret(g, vars), got = engine::Executable::compile(g).run(vars);
    ASSERT_EQ(got.at(0).type(), want_out.at(0).type());
    for (int64_t i = 0; i < got[0].size(); ++i)
      EXPECT_NEAR(got[0].get_f64(i), want_out[0].get_f64(i), 1e-2 * (1 + std::abs(want_out[0].get_f64(i)))) << i;
  }
}

// ---- fusion ------------------------------------------------------------------------------------

// Fused kernels around reverse (run between kernels as a strided gather) and reshape_like
// (a view of its input's buffer) compute what the interpreter does, bit for bit.
TEST(IndexOpsFusion, FusedChainsAroundReverseAndReshapeLikeMatchTheInterpreter) {
  ir::GraphBuilder b;
  const ir::ValueRef x = b.input("x", {DType::f32, {3, 5, 7}});
  const ir::ValueRef like = b.input("like", {DType::f16, {15, 7}});
  const ir::ValueRef h = b.op("amp_cast", {x}, {{"dtype", "bfloat16"}});
  const ir::ValueRef r = b.op("reverse", {h}, {{"axis", "(0, 2)"}});
  const ir::ValueRef s = b.op("_mul_scalar", {r}, {{"scalar", "3"}});
  const ir::ValueRef v = b.op("reshape_like", {s, like}, {});
  b.output(b.op("_plus_scalar", {v}, {{"scalar", "0.5"}}));
  const ir::Graph g = b.finish();
  const engine::Executable exe = engine::Executable::compile(g);
  // amp_cast | reverse (a reference gather) | _mul_scalar | reshape_like (a view step: an alias,
  // no copy) | _plus_scalar, as for Reshape.
  EXPECT_EQ(exe.compile_stats().kernels, 3);
  const runtime::Bindings vars = runtime::random_bindings(g, 11);
  const std::vector<Tensor> want = runtime::interpret(g, vars), got = exe.run(vars);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].type(), (TensorType{DType::bf16, {15, 7}}));
  for (int64_t i = 0; i < want[0].size(); ++i)
    ASSERT_EQ(want[0].data<uint16_t>()[i], got[0].data<uint16_t>()[i]) << "element " << i;
}

// ---- AMP ---------------------------------------------------------------------------------------

// Under fp16 AMP (take is neutral there), take runs low with its table (FullyConnected's
// output), yet reads its indices in their own type: f16 would round index 2049 to 2048.
// one_hot reads them uncast too.
TEST(IndexOpsAmp, IndexInputsAreNeverCast) {
  ir::GraphBuilder b;
  const ir::ValueRef x = b.input("x", {DType::f32, {2, 8}});
  const ir::ValueRef w = b.param("w", TensorType{DType::f32, {300, 8}});
  const ir::ValueRef idx = b.input("idx", {DType::f32, {4}});
  const ir::ValueRef fc = b.op("FullyConnected", {x, w}, {{"num_hidden", "300"}, {"no_bias", "True"}});
  b.output(b.op("take", {fc, idx}, {{"axis", "1"}}, "take"));
  b.output(b.op("one_hot", {idx}, {{"depth", "300"}}, "one_hot"));
  ir::Graph g = b.finish();
  engine::AmpOptions opts;
  opts.target = DType::f16;
  engine::amp_convert(g, opts);
  for (const ir::Node& n : g.nodes) {
    if (n.name == "take") {
      EXPECT_EQ(n.outputs[0].dtype, DType::f16);
    }
    if (n.name != "take" && n.name != "one_hot") continue;
    const ir::ValueRef indices = n.inputs.back();
    EXPECT_EQ(g.nodes[indices.node].name, "idx") << n.name << " reads its indices through " << g.nodes[indices.node].op;
    EXPECT_EQ(g.type(indices).dtype, DType::f32) << n.name;
  }
}

}  // namespace
}  // namespace ampfuse
