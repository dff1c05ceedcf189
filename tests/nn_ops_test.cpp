// Neural-network ops: type inference (weights filled from attributes, MXNet's rules and
// refusals) and reference kernels against hand-computed values or a direct formula.
#include "ir/builder.h"
#include "ir/op_registry.h"
#include "runtime/interpreter.h"
#include "runtime/reference/reference_kernels.h"
#include "runtime/tensor.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>

namespace ampfuse {
namespace {

using ir::DType;
using ir::GraphBuilder;
using ir::Shape;
using ir::TensorType;
using runtime::Tensor;
using Attrs = std::map<std::string, std::string>;

Tensor tensor(const Shape& shape, const std::vector<double>& values, DType dtype = DType::f32) {
  Tensor t(TensorType{dtype, shape});
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.size()) << "values for " << ir::shape_str(shape);
  for (int64_t i = 0; i < t.size() && i < static_cast<int64_t>(values.size()); ++i) t.set_f64(i, values[i]);
  return t;
}

// Small integers over 4: every product and sum below stays exact in f32.
std::vector<double> pattern(int64_t n, int seed) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>((i * 7 + seed * 3) % 11 - 5) / 4.0;
  return v;
}

void expect_values(const Tensor& t, const std::vector<double>& want, double tol = 0) {
  const std::vector<double> got = runtime::to_f64_vector(t);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

// Builds a graph of one `op` node fed by one variable per input (a param without a type
// where `types[i]` is nullopt), infers it, and returns it; the node is the last one.
ir::Graph one_op(const std::string& op, const std::vector<std::optional<TensorType>>& types, const Attrs& attrs) {
  GraphBuilder b;
  std::vector<ir::ValueRef> refs;
  for (size_t i = 0; i < types.size(); ++i)
    refs.push_back(types[i] ? b.input(fmt::format("in{}", i), *types[i]) : b.param(fmt::format("in{}", i)));
  for (ir::ValueRef r : b.op_multi(op, refs, attrs, "node")) b.output(r);
  return b.finish();
}

// The types inference gives input i and the node's outputs.
struct Inferred {
  std::vector<TensorType> inputs, outputs;
};
Inferred infer(const std::string& op, const std::vector<std::optional<TensorType>>& types, const Attrs& attrs) {
  const ir::Graph g = one_op(op, types, attrs);
  Inferred r;
  for (size_t i = 0; i < types.size(); ++i) r.inputs.push_back(g.nodes[i].outputs.at(0));
  r.outputs = g.nodes.back().outputs;
  return r;
}

// Runs `op`'s reference kernel on `inputs`, output types from inference.
std::vector<Tensor> run(const std::string& op, const std::vector<Tensor>& inputs, const Attrs& attrs) {
  std::vector<std::optional<TensorType>> types;
  for (const Tensor& t : inputs) types.push_back(t.type());
  const ir::Graph g = one_op(op, types, attrs);
  const ir::Node& node = g.nodes.back();
  std::vector<Tensor> outputs;
  for (const TensorType& t : node.outputs) outputs.emplace_back(t);
  const runtime::ReferenceKernel* kernel = runtime::find_reference_kernel(node.op);
  if (!kernel) {
    ADD_FAILURE() << op << " has no reference kernel";
    return outputs;
  }
  (*kernel)(node, inputs, outputs);
  return outputs;
}

TensorType f32(Shape s) { return {DType::f32, std::move(s)}; }

// ---------------------------------------------------------------- type inference

TEST(NnOpsInfer, ConvolutionFillsWeightAndBiasFromAttributes) {
  const Inferred r = infer("Convolution", {f32({2, 6, 9, 8}), std::nullopt, std::nullopt},
                           {{"kernel", "(3, 2)"},
                            {"num_filter", "4"},
                            {"num_group", "2"},
                            {"stride", "(2, 1)"},
                            {"pad", "(1, 0)"},
                            {"dilate", "(1, 2)"}});
  EXPECT_EQ(r.inputs[1], f32({4, 3, 3, 2}));
  EXPECT_EQ(r.inputs[2], f32({4}));
  // H: (9 + 2 - 3) / 2 + 1 = 5; W: (8 - (2*(2-1)+1)) / 1 + 1 = 6.
  EXPECT_EQ(r.outputs[0], f32({2, 4, 5, 6}));
}

TEST(NnOpsInfer, ChannelsLastConvolutionPermutesItsWeight) {
  const Inferred r = infer("Convolution", {f32({1, 7, 6, 5}), std::nullopt},
                           {{"kernel", "(3,2)"}, {"num_filter", "4"}, {"no_bias", "True"}, {"layout", "NHWC"}});
  EXPECT_EQ(r.inputs[1], f32({4, 3, 2, 5}));
  EXPECT_EQ(r.outputs[0], f32({1, 5, 5, 4}));
  const Inferred d = infer("Convolution", {f32({1, 4, 4, 4, 2}), std::nullopt},
                           {{"kernel", "(1,2,3)"}, {"num_filter", "3"}, {"no_bias", "True"}, {"layout", "NDHWC"}});
  EXPECT_EQ(d.inputs[1], f32({3, 1, 2, 3, 2}));
  EXPECT_EQ(d.outputs[0], f32({1, 4, 3, 2, 3}));
}

TEST(NnOpsInfer, DeconvolutionShapesAndDefaultsToNoBias) {
  const Inferred r = infer("Deconvolution", {f32({1, 4, 3, 5}), std::nullopt},
                           {{"kernel", "(3,3)"},
                            {"num_filter", "6"},
                            {"num_group", "2"},
                            {"stride", "(2,2)"},
                            {"pad", "(1,1)"},
                            {"adj", "(1,0)"}});
  EXPECT_EQ(r.inputs[1], f32({4, 3, 3, 3}));
  // 2*(3-1) + 3 - 2 + 1 = 6 and 2*(5-1) + 3 - 2 + 0 = 9.
  EXPECT_EQ(r.outputs[0], f32({1, 6, 6, 9}));
}

TEST(NnOpsInfer, ConvolutionRefusals) {
  EXPECT_ERROR(infer("Convolution", {f32({1, 3, 8, 8}), std::nullopt},
                     {{"kernel", "(3,3,3)"}, {"num_filter", "2"}, {"no_bias", "True"}}),
               "3-D kernel needs data of rank 5");
  EXPECT_ERROR(infer("Convolution", {f32({1, 3, 8, 8}), std::nullopt},
                     {{"kernel", "(3,3)"}, {"num_filter", "2"}, {"num_group", "2"}, {"no_bias", "True"}}),
               "the data has 3 channels, which num_group=2 does not divide");
  EXPECT_ERROR(
      infer("Convolution", {f32({1, 3, 2, 2}), std::nullopt, std::nullopt}, {{"kernel", "(3,3)"}, {"num_filter", "2"}}),
      "exceeds the padded input");
  EXPECT_ERROR(infer("Convolution", {f32({1, 3, 8, 8}), std::nullopt},
                     {{"kernel", "(3,3)"}, {"num_filter", "2"}, {"no_bias", "True"}, {"layout", "NCW"}}),
               "layout NCW does not fit data of rank 4");
  EXPECT_ERROR(infer("Deconvolution", {f32({1, 3, 8, 8}), std::nullopt},
                     {{"kernel", "(3,3)"}, {"num_filter", "2"}, {"target_shape", "(16,16)"}}),
               "target_shape=(16, 16) is not supported");
  EXPECT_ERROR(infer("Deconvolution", {f32({1, 3, 8, 8}), std::nullopt},
                     {{"kernel", "(3,3)"}, {"num_filter", "2"}, {"stride", "(2,2)"}, {"adj", "(2,0)"}}),
               "adj=(2, 0) must be smaller than stride");
}

TEST(NnOpsInfer, WrongWeightNamesBothChannelCounts) {
  const std::string msg = testing::error_message([] {
    infer("Convolution", {f32({1, 3, 8, 8}), f32({8, 4, 3, 3})},
          {{"kernel", "(3,3)"}, {"num_filter", "8"}, {"no_bias", "True"}});
  });
  EXPECT_NE(msg.find("input 1 (weight) has shape [8,4,3,3] but [8,3,3,3] is needed"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the data has 3 channels but the weight is for 4"), std::string::npos) << msg;
  EXPECT_ERROR(infer("FullyConnected", {f32({2, 5}), f32({3, 4}), std::nullopt}, {{"num_hidden", "3"}}),
               "input 1 (weight) has shape [3,4] but [3,5] is needed");
  // The weight shares the data's dtype; the bias may be wider, never an integer.
  const TensorType bf16_data{DType::bf16, {2, 5}};
  EXPECT_ERROR(infer("FullyConnected", {bf16_data, f32({3, 5}), std::nullopt}, {{"num_hidden", "3"}}),
               "input 1 (weight) is f32 but bf16 is needed");
  EXPECT_EQ(infer("FullyConnected", {bf16_data, std::nullopt, f32({3})}, {{"num_hidden", "3"}}).outputs[0],
            (TensorType{DType::bf16, {2, 3}}));
  EXPECT_ERROR(infer("FullyConnected", {f32({2, 5}), std::nullopt, TensorType{DType::i32, {3}}}, {{"num_hidden", "3"}}),
               "input 2 (bias) must be a float tensor");
}

TEST(NnOpsInfer, FullyConnectedFlattenOrLastAxis) {
  const Inferred flat = infer("FullyConnected", {f32({2, 3, 4}), std::nullopt, std::nullopt}, {{"num_hidden", "5"}});
  EXPECT_EQ(flat.inputs[1], f32({5, 12}));
  EXPECT_EQ(flat.outputs[0], f32({2, 5}));
  const Inferred last = infer("FullyConnected", {f32({2, 3, 4}), std::nullopt},
                              {{"num_hidden", "5"}, {"flatten", "False"}, {"no_bias", "True"}});
  EXPECT_EQ(last.inputs[1], f32({5, 4}));
  EXPECT_EQ(last.outputs[0], f32({2, 3, 5}));
}

TEST(NnOpsInfer, BatchNormKeepsStatisticsInF32ForLowPrecisionData) {
  const Inferred r =
      infer("BatchNorm", {TensorType{DType::f16, {2, 3, 4, 4}}, std::nullopt, std::nullopt, std::nullopt, std::nullopt},
            {{"output_mean_var", "True"}});
  for (size_t i = 1; i < 5; ++i) EXPECT_EQ(r.inputs[i], f32({3})) << i;
  ASSERT_EQ(r.outputs.size(), 3u);
  EXPECT_EQ(r.outputs[0], (TensorType{DType::f16, {2, 3, 4, 4}}));
  EXPECT_EQ(r.outputs[2], f32({3}));
  const Inferred last =
      infer("BatchNorm", {f32({2, 4, 7}), std::nullopt, std::nullopt, std::nullopt, std::nullopt}, {{"axis", "-1"}});
  EXPECT_EQ(last.inputs[3], f32({7}));
  EXPECT_ERROR(infer("BatchNorm", {f32({2, 4}), f32({5}), std::nullopt, std::nullopt, std::nullopt}, {}),
               "input 1 (gamma) has shape [5] but [4] is needed");
}

// eps sits under a square root with the variance: 0 is allowed (the test of the moving
// statistics below uses it), a negative or NaN eps is refused by every normalization.
TEST(NnOpsInfer, NormalizationEpsMustBeZeroOrMore) {
  const std::optional<TensorType> none;
  EXPECT_EQ(infer("BatchNorm", {f32({2, 4}), none, none, none, none}, {{"eps", "0"}}).outputs[0], f32({2, 4}));
  for (const char* eps : {"-1", "-1e-30", "nan"}) {
    SCOPED_TRACE(eps);
    const std::string want = fmt::format("eps={} must be 0 or more", std::stod(eps));
    EXPECT_ERROR(infer("BatchNorm", {f32({2, 4}), none, none, none, none}, {{"eps", eps}}), want);
    EXPECT_ERROR(infer("_contrib_SyncBatchNorm", {f32({2, 4}), none, none, none, none}, {{"eps", eps}}), want);
    EXPECT_ERROR(infer("LayerNorm", {f32({2, 4}), none, none}, {{"eps", eps}}), want);
    EXPECT_ERROR(infer("InstanceNorm", {f32({2, 4, 3}), none, none}, {{"eps", eps}}), want);
    EXPECT_ERROR(infer("GroupNorm", {f32({2, 4, 3}), none, none}, {{"eps", eps}}), want);
    EXPECT_ERROR(infer("L2Normalization", {f32({2, 4})}, {{"eps", eps}}), want);
  }
}

TEST(NnOpsInfer, PoolingConventionsAndLayouts) {
  const Attrs base{{"kernel", "(3,3)"}, {"stride", "(2,2)"}};
  EXPECT_EQ(infer("Pooling", {f32({1, 2, 8, 8})}, base).outputs[0], f32({1, 2, 3, 3}));
  Attrs full = base;
  full["pooling_convention"] = "full";
  EXPECT_EQ(infer("Pooling", {f32({1, 2, 8, 8})}, full).outputs[0], f32({1, 2, 4, 4}));
  EXPECT_EQ(infer("Pooling", {f32({1, 5, 7, 2})}, {{"global_pool", "True"}, {"layout", "NHWC"}}).outputs[0],
            f32({1, 1, 1, 2}));
  EXPECT_EQ(infer("Pooling", {f32({1, 2, 7})}, {{"kernel", "(3,)"}, {"stride", "(2,)"}, {"pooling_convention", "same"}})
                .outputs[0],
            f32({1, 2, 4}));
  EXPECT_ERROR(infer("Pooling", {f32({1, 2, 8, 8})}, {{"pool_type", "avg"}}),
               "Pooling needs kernel unless global_pool=True");
  EXPECT_ERROR(infer("Pooling", {f32({1, 2, 8, 8})}, {{"kernel", "(2,2)"}, {"pool_type", "lp"}}),
               "pool_type=lp needs p_value");
}

TEST(NnOpsInfer, RnnFillsFlatParametersAndBeginStates) {
  // MXNet's PTB LSTM: 2 layers of 200, input 200: per layer 4*200*(200+200) weights and
  // 2*4*200 biases.
  const Inferred lstm =
      infer("RNN", {f32({35, 3, 200}), std::nullopt, std::nullopt, std::nullopt},
            {{"mode", "lstm"}, {"state_size", "200"}, {"num_layers", "2"}, {"state_outputs", "True"}});
  EXPECT_EQ(lstm.inputs[1], f32({2 * (320000 + 1600)}));
  EXPECT_EQ(lstm.inputs[2], f32({2, 3, 200}));
  EXPECT_EQ(lstm.inputs[3], f32({2, 3, 200}));
  ASSERT_EQ(lstm.outputs.size(), 3u);
  EXPECT_EQ(lstm.outputs[0], f32({35, 3, 200}));
  // Bidirectional GRU, input 3, state 2, 2 layers: layer 0 per direction 3*2*(3+2) + 12,
  // layer 1 (input 4) per direction 3*2*(4+2) + 12.
  const Inferred gru = infer("RNN", {f32({4, 1, 3}), std::nullopt, std::nullopt},
                             {{"mode", "gru"}, {"state_size", "2"}, {"num_layers", "2"}, {"bidirectional", "True"}});
  EXPECT_EQ(gru.inputs[1], f32({2 * 42 + 2 * 48}));
  EXPECT_EQ(gru.inputs[2], f32({4, 1, 2}));
  EXPECT_EQ(gru.outputs, std::vector<TensorType>{f32({4, 1, 4})});
  const Attrs refused{{"mode", "lstm"}, {"state_size", "2"}, {"num_layers", "1"}, {"projection_size", "1"}};
  EXPECT_ERROR(infer("RNN", {f32({4, 1, 3}), std::nullopt, std::nullopt, std::nullopt}, refused),
               "projection_size is not supported");
  EXPECT_ERROR(infer("RNN", {f32({4, 3}), std::nullopt, std::nullopt},
                     {{"mode", "gru"}, {"state_size", "2"}, {"num_layers", "1"}}),
               "RNN data must be (sequence, batch, features)");
}

TEST(NnOpsInfer, MatmulShapesAndRefusals) {
  EXPECT_EQ(infer("dot", {f32({2, 1, 2}), f32({2, 3})}, {{"transpose_a", "True"}}).outputs[0], f32({1, 2, 3}));
  EXPECT_EQ(infer("dot", {f32({4, 5}), f32({3, 5})}, {{"transpose_b", "True"}}).outputs[0], f32({4, 3}));
  EXPECT_EQ(infer("dot", {f32({3}), f32({3})}, {}).outputs[0], f32({1}));
  EXPECT_EQ(infer("batch_dot", {f32({2, 3, 4, 5}), f32({2, 3, 6, 5})}, {{"transpose_b", "True"}}).outputs[0],
            f32({2, 3, 4, 6}));
  EXPECT_ERROR(infer("batch_dot", {f32({2, 4, 5}), f32({3, 5, 6})}, {}),
               "the batch axes of lhs [2,4,5] and rhs [3,5,6] differ");
  EXPECT_ERROR(infer("dot", {f32({2, 3}), f32({2, 3})}, {}), "3 != 2");
  EXPECT_ERROR(infer("dot", {f32({2, 3}), TensorType{DType::f16, {3, 2}}}, {}), "both operands need one dtype");
}

TEST(NnOpsInfer, SoftmaxFamilyNormsAndEmbedding) {
  EXPECT_EQ(infer("softmax", {f32({2, 3})}, {{"dtype", "float16"}}).outputs[0], (TensorType{DType::f16, {2, 3}}));
  EXPECT_ERROR(infer("softmax", {f32({2, 3})}, {{"axis", "2"}}), "axis=2 is out of range for data of rank 2");
  EXPECT_ERROR(infer("softmax", {f32({2, 3}), f32({2})}, {{"use_length", "True"}}), "use_length=True is not supported");
  const Inferred so = infer("SoftmaxOutput", {f32({4, 10}), std::nullopt}, {});
  EXPECT_EQ(so.inputs[1], f32({4}));
  EXPECT_EQ(infer("SoftmaxOutput", {f32({2, 5, 3, 3}), std::nullopt}, {{"multi_output", "True"}}).inputs[1],
            f32({2, 9}));
  const Inferred ln = infer("LayerNorm", {f32({2, 3, 8}), std::nullopt, std::nullopt}, {{"output_mean_var", "True"}});
  EXPECT_EQ(ln.inputs[1], f32({8}));
  EXPECT_EQ(ln.outputs[2], f32({2, 3, 1}));
  const Inferred emb =
      infer("Embedding", {TensorType{DType::i32, {2, 7}}, std::nullopt}, {{"input_dim", "10"}, {"output_dim", "4"}});
  EXPECT_EQ(emb.inputs[1], f32({10, 4}));
  EXPECT_EQ(emb.outputs[0], f32({2, 7, 4}));
  // A weight AMP already narrowed keeps the op in its precision.
  EXPECT_EQ(infer("Embedding", {f32({3}), TensorType{DType::bf16, {10, 4}}}, {{"input_dim", "10"}, {"output_dim", "4"}})
                .outputs[0],
            (TensorType{DType::bf16, {3, 4}}));
}

TEST(NnOpsInfer, AmpClassesAndParamRoles) {
  const ir::OpRegistry& reg = ir::OpRegistry::global();
  // MXNet 1.9.1's lists: fp16 runs these four low, bf16 only Convolution and FullyConnected
  // (Deconvolution and RNN are fp32 there); dot and batch_dot are widest for both.
  for (const char* op : {"Convolution", "Deconvolution", "FullyConnected", "RNN"})
    EXPECT_EQ(reg.get(op).amp_class(DType::f16), ir::AmpClass::lowp) << op;
  for (const char* op : {"Convolution", "FullyConnected"})
    EXPECT_EQ(reg.get(op).amp_class(DType::bf16), ir::AmpClass::lowp) << op;
  for (const char* op : {"Deconvolution", "RNN", "Embedding"})
    EXPECT_EQ(reg.get(op).amp_class(DType::bf16), ir::AmpClass::fp32) << op;
  for (const char* op : {"dot", "batch_dot"}) {
    EXPECT_EQ(reg.get(op).amp_class(DType::bf16), ir::AmpClass::widest) << op;
    EXPECT_EQ(reg.get(op).amp_class(DType::f16), ir::AmpClass::widest) << op;
  }
  for (const char* op : {"softmax", "log_softmax", "SoftmaxOutput", "LayerNorm", "Custom"})
    EXPECT_EQ(reg.get(op).amp_class(DType::bf16), ir::AmpClass::fp32) << op;
  for (const char* op : {"BatchNorm", "Pooling", "Embedding"})
    EXPECT_EQ(reg.get(op).amp_class(DType::f16), ir::AmpClass::neutral) << op;
  const ir::OpDef& bn = reg.get("BatchNorm");
  EXPECT_EQ(bn.keep_fp32_inputs_bf16, (std::vector<int>{1, 2, 3, 4}));
  EXPECT_TRUE(bn.fusable);
  EXPECT_EQ(bn.slot(3).role, ir::SlotRole::aux);
  EXPECT_EQ(reg.get("Convolution").slot(1).role, ir::SlotRole::param);
  // UpSampling's second slot is a weight for bilinear, data for nearest: asking without the
  // attributes would give the wrong one, so it is refused.
  const ir::OpDef& up = reg.get("UpSampling");
  EXPECT_ERROR(up.slot(1), "depend on its attributes");
  EXPECT_EQ(up.slot(1, ir::parse_attrs(up, {{"scale", "2"}, {"sample_type", "bilinear"}, {"num_filter", "3"}})).role,
            ir::SlotRole::param);
  EXPECT_EQ(up.slot(1, ir::parse_attrs(up, {{"scale", "2"}, {"sample_type", "nearest"}, {"num_args", "2"}})).role, ir::SlotRole::data);
  EXPECT_FALSE(reg.get("Convolution").fusable);
  // Performance hints are accepted and dropped; anything else unknown is an error.
  EXPECT_FALSE(ir::parse_attrs(reg.get("Convolution"), {{"kernel", "(1,1)"}, {"num_filter", "1"}, {"workspace", "512"}})
                   .has("workspace"));
  EXPECT_ERROR(ir::parse_attrs(reg.get("Convolution"), {{"kernel", "(1,1)"}, {"num_filter", "1"}, {"wrkspace", "512"}}),
               "no attribute 'wrkspace'");
}

TEST(NnOpsInfer, CustomDispatchesOnOpType) {
  EXPECT_EQ(infer("Custom", {}, {{"op_type", "positional_encodings"}, {"length", "100"}, {"depth", "512"}}).outputs[0],
            f32({1, 100, 512}));
  EXPECT_EQ(infer("Custom", {}, {{"op_type", "auto_regressive_bias"}, {"length", "7"}}).outputs[0], f32({1, 7, 7}));
  EXPECT_EQ(infer("Custom", {TensorType{DType::f16, {3}}}, {{"op_type", "variable_length_bias"}, {"max_length", "9"}})
                .outputs[0],
            f32({3, 9}));
  EXPECT_ERROR(infer("Custom", {}, {{"op_type", "beam_search"}}), "unknown Custom op_type 'beam_search'");
  EXPECT_ERROR(infer("Custom", {}, {{"op_type", "positional_encodings"}, {"length", "10"}, {"depth", "5"}}),
               "positional_encodings needs an even depth, not 5");
  EXPECT_ERROR(infer("Custom", {}, {{"op_type", "auto_regressive_bias"}, {"length", "7"}, {"width", "2"}}),
               "Custom op_type 'auto_regressive_bias' has no attribute 'width'");
  EXPECT_ERROR(infer("Custom", {}, {{"op_type", "auto_regressive_bias"}}), "needs attribute 'length'");
  EXPECT_ERROR(infer("Custom", {f32({2, 2})}, {{"op_type", "variable_length_bias"}, {"max_length", "9"}}),
               "shape (batch,)");
}

// ---------------------------------------------------------------- convolution kernels

// A direct evaluation of (grouped, strided, padded, dilated) convolution over 1-3 spatial
// dimensions, channels first: the definition the kernel's im2col + GEMM must reproduce.
std::vector<double> direct_conv(const std::vector<double>& x, const Shape& xs, const std::vector<double>& w,
                                const Shape& ws, const std::vector<double>& bias, const std::vector<int64_t>& stride,
                                const std::vector<int64_t>& pad, const std::vector<int64_t>& dilate, int64_t groups,
                                const Shape& ys) {
  const size_t nd = xs.size() - 2;
  auto dim = [&](const Shape& s, size_t i) { return i < nd ? s[2 + i] : 1; };
  auto at = [&](std::vector<int64_t> idx, const Shape& s) {  // (a, b, spatial...) -> flat
    int64_t flat = idx[0] * s[1] + idx[1];
    for (size_t i = 0; i < nd; ++i) flat = flat * s[2 + i] + idx[2 + i];
    return flat;
  };
  const int64_t cg = xs[1] / groups, og = ys[1] / groups;
  std::vector<double> y(static_cast<size_t>(ir::num_elements(ys)));
  for (int64_t n = 0; n < ys[0]; ++n)
    for (int64_t o = 0; o < ys[1]; ++o)
      for (int64_t p0 = 0; p0 < dim(ys, 0); ++p0)
        for (int64_t p1 = 0; p1 < dim(ys, 1); ++p1)
          for (int64_t p2 = 0; p2 < dim(ys, 2); ++p2) {
            const int64_t p[3] = {p0, p1, p2};
            double sum = bias.empty() ? 0 : bias[o];
            for (int64_t c = 0; c < cg; ++c)
              for (int64_t k0 = 0; k0 < dim(ws, 0); ++k0)
                for (int64_t k1 = 0; k1 < dim(ws, 1); ++k1)
                  for (int64_t k2 = 0; k2 < dim(ws, 2); ++k2) {
                    const int64_t k[3] = {k0, k1, k2};
                    std::vector<int64_t> xi{n, (o / og) * cg + c}, wi{o, c};
                    bool inside = true;
                    for (size_t i = 0; i < nd; ++i) {
                      const int64_t pos = p[i] * stride[i] - pad[i] + k[i] * dilate[i];
                      inside = inside && pos >= 0 && pos < xs[2 + i];
                      xi.push_back(pos);
                      wi.push_back(k[i]);
                    }
                    if (inside) sum += x[at(xi, xs)] * w[at(wi, ws)];
                  }
            std::vector<int64_t> yi{n, o};
            for (size_t i = 0; i < nd; ++i) yi.push_back(p[i]);
            y[at(yi, ys)] = sum;
          }
  return y;
}

TEST(NnOpsConv, HandComputed2x2Sums) {
  const Tensor x = tensor({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  const Tensor w = tensor({1, 1, 2, 2}, {1, 1, 1, 1});
  const auto y = run("Convolution", {x, w}, {{"kernel", "(2,2)"}, {"num_filter", "1"}, {"no_bias", "True"}});
  expect_values(y[0], {12, 16, 24, 28});
}

struct ConvCase {
  const char* name;
  Shape x, w;
  std::vector<int64_t> stride, pad, dilate;
  int64_t groups;
  bool bias;
};

TEST(NnOpsConv, MatchesDirectFormulaIn1D2D3D) {
  const ConvCase cases[] = {
      {"1-D stride pad dilate", {2, 3, 11}, {4, 3, 3}, {2}, {2}, {2}, 1, true},
      {"2-D groups", {1, 4, 7, 6}, {6, 2, 3, 2}, {1, 2}, {1, 0}, {1, 1}, 2, true},
      {"2-D depthwise dilated", {2, 3, 8, 8}, {3, 1, 3, 3}, {2, 2}, {2, 2}, {2, 2}, 3, false},
      {"2-D pointwise", {1, 5, 4, 3}, {7, 5, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, true},
      {"3-D", {1, 2, 5, 4, 6}, {3, 2, 2, 3, 2}, {1, 2, 1}, {1, 1, 0}, {2, 1, 1}, 1, true},
  };
  for (const ConvCase& c : cases) {
    SCOPED_TRACE(c.name);
    const auto fmt_list = [](const std::vector<int64_t>& v) { return fmt::format("({},)", fmt::join(v, ",")); };
    std::vector<int64_t> kernel(c.w.begin() + 2, c.w.end());
    Attrs attrs{{"kernel", fmt_list(kernel)},
                {"num_filter", std::to_string(c.w[0])},
                {"num_group", std::to_string(c.groups)},
                {"stride", fmt_list(c.stride)},
                {"pad", fmt_list(c.pad)},
                {"dilate", fmt_list(c.dilate)},
                {"no_bias", c.bias ? "False" : "True"}};
    const std::vector<double> xv = pattern(ir::num_elements(c.x), 1), wv = pattern(ir::num_elements(c.w), 2);
    const std::vector<double> bv = c.bias ? pattern(c.w[0], 3) : std::vector<double>{};
    std::vector<Tensor> in{tensor(c.x, xv), tensor(c.w, wv)};
    if (c.bias) in.push_back(tensor({c.w[0]}, bv));
    const auto y = run("Convolution", in, attrs);
    expect_values(y[0], direct_conv(xv, c.x, wv, c.w, bv, c.stride, c.pad, c.dilate, c.groups, y[0].shape()));
  }
}

TEST(NnOpsConv, ChannelsLastEqualsChannelsFirstTransposed) {
  const Shape xs{2, 3, 5, 4};  // N, C, H, W
  const Shape ws{4, 3, 3, 2};  // O, C, KH, KW
  const std::vector<double> xv = pattern(ir::num_elements(xs), 4), wv = pattern(ir::num_elements(ws), 5);
  const Attrs attrs{
      {"kernel", "(3,2)"}, {"num_filter", "4"}, {"pad", "(1,1)"}, {"stride", "(1,2)"}, {"no_bias", "True"}};
  const auto nchw = run("Convolution", {tensor(xs, xv), tensor(ws, wv)}, attrs);
  // NHWC data and OHWI weight hold the same numbers.
  std::vector<double> x_nhwc, w_ohwi;
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t h = 0; h < 5; ++h)
      for (int64_t w = 0; w < 4; ++w)
        for (int64_t c = 0; c < 3; ++c) x_nhwc.push_back(xv[((n * 3 + c) * 5 + h) * 4 + w]);
  for (int64_t o = 0; o < 4; ++o)
    for (int64_t h = 0; h < 3; ++h)
      for (int64_t w = 0; w < 2; ++w)
        for (int64_t c = 0; c < 3; ++c) w_ohwi.push_back(wv[((o * 3 + c) * 3 + h) * 2 + w]);
  Attrs cl = attrs;
  cl["layout"] = "NHWC";
  const auto nhwc = run("Convolution", {tensor({2, 5, 4, 3}, x_nhwc), tensor({4, 3, 2, 3}, w_ohwi)}, cl);
  const Shape& ys = nchw[0].shape();  // [2,4,5,3]
  ASSERT_EQ(nhwc[0].shape(), (Shape{ys[0], ys[2], ys[3], ys[1]}));
  const std::vector<double> a = runtime::to_f64_vector(nchw[0]), b = runtime::to_f64_vector(nhwc[0]);
  for (int64_t n = 0; n < ys[0]; ++n)
    for (int64_t o = 0; o < ys[1]; ++o)
      for (int64_t h = 0; h < ys[2]; ++h)
        for (int64_t w = 0; w < ys[3]; ++w)
          EXPECT_EQ(a[((n * ys[1] + o) * ys[2] + h) * ys[3] + w], b[((n * ys[2] + h) * ys[3] + w) * ys[1] + o]);
}

TEST(NnOpsConv, LowPrecisionInputsAccumulateInF32AndRoundOnce) {
  // 1 + 2^-8 + 2^-8 = 1 + 2^-7, a bf16 value. Summing in bf16 would lose each 2^-8 (a tie
  // that rounds to even, 1) and give 1.
  const Tensor x = tensor({1, 1, 1, 3}, {1, 0.00390625, 0.00390625}, DType::bf16);
  const Tensor w = tensor({1, 1, 1, 3}, {1, 1, 1}, DType::bf16);
  const auto y = run("Convolution", {x, w}, {{"kernel", "(1,3)"}, {"num_filter", "1"}, {"no_bias", "True"}});
  ASSERT_EQ(y[0].dtype(), DType::bf16);
  expect_values(y[0], {1.0078125});
  // With a bias of 2^-7 the f32 result 3 + 2^-7 lies halfway between the bf16 neighbours
  // 3 and 3 + 2^-6 and rounds to the even one, 3. 3 + 2^-7 + 2^-12 rounds up: an f32 bias
  // (accepted with bf16 data) enters the sum unrounded.
  const Tensor ones = tensor({1, 1, 1, 3}, {1, 1, 1}, DType::bf16);
  const Tensor b = tensor({1}, {0.0078125}, DType::bf16);
  expect_values(run("Convolution", {ones, w, b}, {{"kernel", "(1,3)"}, {"num_filter", "1"}})[0], {3.0});
  const Tensor b32 = tensor({1}, {0.0078125 + 0.000244140625});
  expect_values(run("Convolution", {ones, w, b32}, {{"kernel", "(1,3)"}, {"num_filter", "1"}})[0], {3.015625});
  const Tensor x64 = tensor({1, 1, 2}, {0.1, 0.2}, DType::f64);
  const Tensor w64 = tensor({1, 1, 1}, {3}, DType::f64);
  expect_values(run("Convolution", {x64, w64}, {{"kernel", "(1,)"}, {"num_filter", "1"}, {"no_bias", "True"}})[0],
                {0.1 * 3, 0.2 * 3});
}

TEST(NnOpsConv, DeconvolutionHandComputedAndTransposesConvolution) {
  // Stride 1, no padding: the "full" correlation with a 2x2 kernel of ones.
  const auto y = run("Deconvolution", {tensor({1, 1, 2, 2}, {1, 2, 3, 4}), tensor({1, 1, 2, 2}, {1, 1, 1, 1})},
                     {{"kernel", "(2,2)"}, {"num_filter", "1"}});
  expect_values(y[0], {1, 3, 2, 4, 10, 6, 3, 7, 4});
  // In general <deconv(x), z> = <x, conv(z)> with the same weight, stride, pad and groups.
  const Shape xs{1, 4, 3, 2}, ws{4, 3, 3, 2};  // C_in=4, num_filter=6, groups=2
  const Attrs attrs{{"kernel", "(3,2)"}, {"num_filter", "6"}, {"num_group", "2"},
                    {"stride", "(2,2)"}, {"pad", "(1,0)"},    {"adj", "(1,1)"}};
  const std::vector<double> xv = pattern(ir::num_elements(xs), 6), wv = pattern(ir::num_elements(ws), 7);
  const auto d = run("Deconvolution", {tensor(xs, xv), tensor(ws, wv)}, attrs);
  const Shape& zs = d[0].shape();
  ASSERT_EQ(zs, (Shape{1, 6, 6, 5}));
  const std::vector<double> zv = pattern(ir::num_elements(zs), 8);
  // conv of z (6 channels, 2 groups) back to 4 channels uses the weight as (4, 3, k) again.
  const std::vector<double> cz = direct_conv(zv, zs, wv, ws, {}, {2, 2}, {1, 0}, {1, 1}, 2, xs);
  const std::vector<double> dv = runtime::to_f64_vector(d[0]);
  double lhs = 0, rhs = 0;
  for (size_t i = 0; i < dv.size(); ++i) lhs += dv[i] * zv[i];
  for (size_t i = 0; i < xv.size(); ++i) rhs += xv[i] * cz[i];
  EXPECT_DOUBLE_EQ(lhs, rhs);
}

TEST(NnOpsConv, PerformanceOfAResNetLayer) {
#if defined(__SANITIZE_ADDRESS__) || !defined(__OPTIMIZE__)
  GTEST_SKIP() << "timing means nothing without optimization";
#endif
  // A ResNet-152 3x3 layer at 56x56 (about 0.23 GFLOP): must be a blocked GEMM, not a loop
  // per output element. Generous bound for a loaded machine.
  const Tensor x = tensor({1, 64, 56, 56}, pattern(64 * 56 * 56, 1));
  const Tensor w = tensor({64, 64, 3, 3}, pattern(64 * 64 * 9, 2));
  const auto start = std::chrono::steady_clock::now();
  run("Convolution", {x, w}, {{"kernel", "(3,3)"}, {"pad", "(1,1)"}, {"num_filter", "64"}, {"no_bias", "True"}});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 2.0);
}

// ---------------------------------------------------------------- pooling

const std::vector<double> k1to16{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

TEST(NnOpsPooling, MaxSumLpValid) {
  const Tensor x = tensor({1, 1, 4, 4}, k1to16);
  expect_values(run("Pooling", {x}, {{"kernel", "(2,2)"}, {"stride", "(2,2)"}})[0], {6, 8, 14, 16});
  expect_values(run("Pooling", {x}, {{"kernel", "(2,2)"}, {"stride", "(2,2)"}, {"pool_type", "sum"}})[0],
                {14, 22, 46, 54});
  expect_values(
      run("Pooling", {x}, {{"kernel", "(2,2)"}, {"stride", "(2,2)"}, {"pool_type", "lp"}, {"p_value", "2"}})[0],
      {std::sqrt(66.0), std::sqrt(9 + 16 + 49 + 64.0), std::sqrt(81 + 100 + 169 + 196.0),
       std::sqrt(121 + 144 + 225 + 256.0)},
      1e-5);
}

TEST(NnOpsPooling, AvgFullConventionClipsTheLastWindow) {
  const Tensor x = tensor({1, 1, 4, 4}, k1to16);
  const Attrs valid{{"kernel", "(3,3)"}, {"stride", "(2,2)"}, {"pool_type", "avg"}};
  expect_values(run("Pooling", {x}, valid)[0], {6});
  Attrs full = valid;
  full["pooling_convention"] = "full";
  // Windows [0,3) and [2,4) per axis: sums 54, 45, 72, 54 over 9, 6, 6, 4 elements.
  expect_values(run("Pooling", {x}, full)[0], {6, 7.5, 12, 13.5});
}

TEST(NnOpsPooling, AvgCountIncludePad) {
  const Tensor x = tensor({1, 1, 4, 4}, k1to16);
  const Attrs attrs{{"kernel", "(2,2)"}, {"pad", "(1,1)"}, {"pool_type", "avg"}};
  const auto with_pad = run("Pooling", {x}, attrs);
  ASSERT_EQ(with_pad[0].shape(), (Shape{1, 1, 5, 5}));
  const std::vector<double> a = runtime::to_f64_vector(with_pad[0]);
  EXPECT_EQ(a[0], 0.25);       // only x[0][0] = 1 inside, divided by 4
  EXPECT_EQ(a[6], 3.5);        // (1 + 2 + 5 + 6) / 4
  EXPECT_EQ(a[24], 16.0 / 4);  // bottom-right corner
  Attrs exclude = attrs;
  exclude["count_include_pad"] = "False";
  const std::vector<double> b = runtime::to_f64_vector(run("Pooling", {x}, exclude)[0]);
  EXPECT_EQ(b[0], 1.0);
  EXPECT_EQ(b[1], 1.5);  // (1 + 2) / 2
  EXPECT_EQ(b[6], 3.5);
  EXPECT_EQ(b[24], 16.0);
}

TEST(NnOpsPooling, GlobalAndChannelsLast) {
  const Tensor x = tensor({1, 1, 4, 4}, k1to16);
  expect_values(run("Pooling", {x}, {{"global_pool", "True"}, {"pool_type", "avg"}})[0], {8.5});
  expect_values(run("Pooling", {x}, {{"global_pool", "True"}})[0], {16});
  // NHWC with 2 channels: channel 0 holds 1..16, channel 1 their negatives.
  std::vector<double> nhwc;
  for (double v : k1to16) nhwc.insert(nhwc.end(), {v, -v});
  const auto y =
      run("Pooling", {tensor({1, 4, 4, 2}, nhwc)}, {{"kernel", "(2,2)"}, {"stride", "(2,2)"}, {"layout", "NHWC"}});
  ASSERT_EQ(y[0].shape(), (Shape{1, 2, 2, 2}));
  expect_values(y[0], {6, -1, 8, -3, 14, -9, 16, -11});
}

TEST(NnOpsPooling, MaxPropagatesNaNAndSamePads) {
  const Tensor x = tensor({1, 1, 4}, {1, NAN, 3, 4});
  const std::vector<double> y =
      runtime::to_f64_vector(run("Pooling", {x}, {{"kernel", "(2,)"}, {"stride", "(2,)"}})[0]);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], 4);
  // same: out = ceil(5 / 2) = 3 windows of 3, total padding (3-1)*2 + 3 - 5 = 2, one each side.
  expect_values(run("Pooling", {tensor({1, 1, 5}, {1, 2, 3, 4, 5})},
                    {{"kernel", "(3,)"}, {"stride", "(2,)"}, {"pooling_convention", "same"}})[0],
                {2, 4, 5});
}

// ---------------------------------------------------------------- dense ops

TEST(NnOpsDense, FullyConnectedFlattenTrueAndFalse) {
  const Tensor w = tensor({2, 3}, {1, 0, -1, 0.5, 0.5, 0.5});
  const Tensor b = tensor({2}, {1, -1});
  // Rows [1,2,3] and [4,5,6]: 1-3+1 = -1, 3-1 = 2; 4-6+1 = -1, 7.5-1 = 6.5.
  const auto flat = run("FullyConnected", {tensor({2, 1, 3}, {1, 2, 3, 4, 5, 6}), w, b}, {{"num_hidden", "2"}});
  ASSERT_EQ(flat[0].shape(), (Shape{2, 2}));
  expect_values(flat[0], {-1, 2, -1, 6.5});
  const auto last =
      run("FullyConnected", {tensor({1, 2, 3}, {1, 2, 3, 4, 5, 6}), w, b}, {{"num_hidden", "2"}, {"flatten", "False"}});
  ASSERT_EQ(last[0].shape(), (Shape{1, 2, 2}));
  expect_values(last[0], {-1, 2, -1, 6.5});
}

TEST(NnOpsDense, BatchDotTransposeFlags) {
  const Tensor a = tensor({1, 2, 2}, {1, 2, 3, 4}), b = tensor({1, 2, 2}, {5, 6, 7, 8});
  expect_values(run("batch_dot", {a, b}, {})[0], {19, 22, 43, 50});
  expect_values(run("batch_dot", {a, b}, {{"transpose_a", "True"}})[0], {26, 30, 38, 44});
  expect_values(run("batch_dot", {a, b}, {{"transpose_b", "True"}})[0], {17, 23, 39, 53});
  expect_values(run("batch_dot", {a, b}, {{"transpose_a", "True"}, {"transpose_b", "True"}})[0], {23, 31, 34, 46});
  // Two batches: the second is the identity times b.
  expect_values(run("batch_dot", {tensor({2, 1, 2}, {1, 1, 0, 1}), tensor({2, 2, 1}, {2, 3, 4, 5})}, {})[0], {5, 5});
}

TEST(NnOpsDense, DotNdAndVectors) {
  // transpose_a contracts lhs's first axis: out[m][n] = sum_k lhs[k][m] rhs[k][n].
  const auto y =
      run("dot", {tensor({2, 1, 2}, {1, 2, 3, 4}), tensor({2, 3}, {1, 0, 1, 0, 1, 1})}, {{"transpose_a", "True"}});
  ASSERT_EQ(y[0].shape(), (Shape{1, 2, 3}));
  expect_values(y[0], {1, 3, 4, 2, 4, 6});
  expect_values(run("dot", {tensor({3}, {1, 2, 3}), tensor({3}, {4, 5, 6})}, {})[0], {32});
  expect_values(run("dot", {tensor({2, 2}, {1, 2, 3, 4}), tensor({2}, {1, -1})}, {{"transpose_b", "True"}})[0],
                {-1, -1});
}

TEST(NnOpsDense, EmbeddingTruncatesAndClipsIndices) {
  const Tensor w = tensor({4, 2}, {0, 1, 10, 11, 20, 21, 30, 31});
  const auto y = run("Embedding", {tensor({5}, {2, 0, 7, -1, 1.9}), w}, {{"input_dim", "4"}, {"output_dim", "2"}});
  ASSERT_EQ(y[0].shape(), (Shape{5, 2}));
  expect_values(y[0], {20, 21, 0, 1, 30, 31, 0, 1, 10, 11});
  const auto ints =
      run("Embedding", {tensor({2, 1}, {3, 1}, DType::i64), w}, {{"input_dim", "4"}, {"output_dim", "2"}});
  expect_values(ints[0], {30, 31, 10, 11});
}

// ---------------------------------------------------------------- normalization, softmax

TEST(NnOpsNorm, BatchNormMovingStatisticsAndFixGamma) {
  // Channel 0 holds [1, 2], channel 1 [3, 4]; eps 0 keeps 1/sqrt exact (1/2 and 2).
  const Tensor x = tensor({1, 2, 1, 2}, {1, 2, 3, 4});
  const Tensor gamma = tensor({2}, {2, 3}), beta = tensor({2}, {0.5, -1});
  const Tensor mean = tensor({2}, {1, 3}), var = tensor({2}, {4, 0.25});
  const auto fixed = run("BatchNorm", {x, gamma, beta, mean, var}, {{"eps", "0"}});
  expect_values(fixed[0], {0.5, 1.0, -1, 1});  // (x - mean) * invstd + beta, gamma ignored
  const auto scaled = run("BatchNorm", {x, gamma, beta, mean, var},
                          {{"eps", "0"}, {"fix_gamma", "False"}, {"output_mean_var", "True"}});
  expect_values(scaled[0], {0.5, 1.5, -1, 5});
  expect_values(scaled[1], {1, 3});
  expect_values(scaled[2], {0.5, 2});  // MXNet's "var" output is 1/sqrt(var + eps)
  // Channels last (axis=-1): the same numbers interleaved.
  const auto last = run("BatchNorm", {tensor({1, 2, 2}, {1, 3, 2, 4}), gamma, beta, mean, var},
                        {{"eps", "0"}, {"fix_gamma", "False"}, {"axis", "-1"}});
  expect_values(last[0], {0.5, -1, 1.5, 5});
}

// With output_mean_var the node runs its reference kernel instead of the recipe; y must
// still be the recipe's, bit for bit, and the inverse-std output the value it multiplied by.
TEST(NnOpsNorm, BatchNormOutputMeanVarEvaluatesTheRecipe) {
  for (DType data : {DType::f32, DType::f16, DType::f64}) {
    for (const char* axis : {"1", "-1"}) {
      SCOPED_TRACE(fmt::format("{} data, axis {}", ir::dtype_name(data), axis));
      const Shape shape = {2, 3, 5};
      const int64_t c = std::string(axis) == "1" ? 3 : 5;
      std::vector<double> xs(30), vars(static_cast<size_t>(c));
      for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(0.7 * static_cast<double>(i)) * 3;
      for (size_t i = 0; i < vars.size(); ++i) vars[i] = 0.3 + 0.37 * static_cast<double>(i);
      const DType stats = data == DType::f64 ? DType::f64 : DType::f32;
      const std::vector<Tensor> in = {tensor(shape, xs, data), tensor({c}, pattern(c, 1), stats),
                                      tensor({c}, pattern(c, 2), stats), tensor({c}, pattern(c, 3), stats),
                                      tensor({c}, vars, stats)};
      std::vector<std::optional<TensorType>> types;
      for (const Tensor& t : in) types.push_back(t.type());
      const Attrs attrs = {{"eps", "0.001"}, {"fix_gamma", "False"}, {"axis", axis}};
      Attrs with_stats = attrs;
      with_stats["output_mean_var"] = "True";
      const ir::Graph plain = one_op("BatchNorm", types, attrs), stats_too = one_op("BatchNorm", types, with_stats);
      const std::vector<Tensor> by_recipe = runtime::run_node(plain.nodes.back(), in);
      const std::vector<Tensor> by_kernel = runtime::run_node(stats_too.nodes.back(), in);
      ASSERT_EQ(by_kernel.size(), 3u);
      ASSERT_EQ(by_recipe[0].type(), by_kernel[0].type());
      EXPECT_EQ(std::memcmp(by_recipe[0].raw(), by_kernel[0].raw(), by_recipe[0].bytes()), 0);
      expect_values(by_kernel[1], pattern(c, 3));
      for (int64_t k = 0; k < c; ++k) {
        const double want = stats == DType::f64
                                ? 1.0 / std::sqrt(vars[k] + 0.001)
                                : static_cast<double>(1.0f / std::sqrt(static_cast<float>(vars[k]) + 0.001f));
        EXPECT_EQ(by_kernel[2].get_f64(k), want) << "channel " << k;
      }
    }
  }
}

TEST(NnOpsNorm, LayerNormLastAndInnerAxis) {
  const double s = std::sqrt(1.25 + 1e-5);  // mean 2.5, variance 1.25
  const auto y = run("LayerNorm", {tensor({1, 4}, {1, 2, 3, 4}), tensor({4}, {1, 1, 1, 2}), tensor({4}, {0, 0, 0, 1})},
                     {{"output_mean_var", "True"}});
  expect_values(y[0], {-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s * 2 + 1}, 1e-6);
  expect_values(y[1], {2.5});
  expect_values(y[2], {s}, 1e-6);
  // axis 0 of [[1, 2], [3, 5]]: columns (1, 3) and (2, 5) both normalize to (-1, 1).
  const auto cols = run("LayerNorm", {tensor({2, 2}, {1, 2, 3, 5}), tensor({2}, {1, 2}), tensor({2}, {0, 0})},
                        {{"axis", "0"}, {"eps", "0"}});
  expect_values(cols[0], {-1, -1, 2, 2});
}

TEST(NnOpsSoftmax, SoftmaxLogSoftmaxTemperatureAndDtype) {
  const double e1 = std::exp(-1.0), e2 = std::exp(-2.0), sum = 1 + e1 + e2;
  const Tensor x = tensor({1, 3}, {1, 2, 3});
  expect_values(run("softmax", {x}, {})[0], {e2 / sum, e1 / sum, 1 / sum}, 1e-7);
  expect_values(run("log_softmax", {x}, {})[0], {-2 - std::log(sum), -1 - std::log(sum), -std::log(sum)}, 1e-6);
  const double h1 = std::exp(-0.5), h2 = std::exp(-1.0), hs = 1 + h1 + h2;
  expect_values(run("softmax", {x}, {{"temperature", "2"}})[0], {h2 / hs, h1 / hs, 1 / hs}, 1e-7);
  // Over axis 0 of a (2, 1) column, and into an f16 output.
  expect_values(run("softmax", {tensor({2, 1}, {0, 0})}, {{"axis", "0"}})[0], {0.5, 0.5});
  const auto half = run("softmax", {x}, {{"dtype", "float16"}});
  ASSERT_EQ(half[0].dtype(), DType::f16);
  expect_values(half[0], {e2 / sum, e1 / sum, 1 / sum}, 1e-3);  // f16 holds ~3 digits
}

TEST(NnOpsSoftmax, SoftmaxOutputAxisChoices) {
  const Tensor label = tensor({2}, {0, 1});
  // Default: each row of (2, 2) on its own.
  expect_values(run("SoftmaxOutput", {tensor({2, 2}, {0, 0, 5, 5}), label}, {})[0], {0.5, 0.5, 0.5, 0.5});
  // multi_output: over axis 1 of (1, 2, 2), so the pairs are (x[0][0][j], x[0][1][j]).
  const double p = 1 / (1 + std::exp(-1.0));
  expect_values(
      run("SoftmaxOutput", {tensor({1, 2, 2}, {1, 0, 0, 0}), tensor({1, 2}, {0, 0})}, {{"multi_output", "True"}})[0],
      {p, 0.5, 1 - p, 0.5}, 1e-7);
  // Default on rank 3: everything after the first axis is one row of 4.
  expect_values(run("SoftmaxOutput", {tensor({1, 2, 2}, {0, 0, 0, 0}), tensor({1, 2}, {0, 0})}, {})[0],
                {0.25, 0.25, 0.25, 0.25});
}

// ---------------------------------------------------------------- RNN

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

TEST(NnOpsRnn, LstmOneStepByHand) {
  // I = H = N = T = 1. Parameters: W_i2h (i, f, g, o), W_h2h, b_i2h, b_h2h.
  const Tensor params = tensor({16}, {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.01, 0.02, 0.03, 0.04, 0, 0, 0, 0.1});
  const auto y = run("RNN", {tensor({1, 1, 1}, {1}), params, tensor({1, 1, 1}, {0.5}), tensor({1, 1, 1}, {0.25})},
                     {{"mode", "lstm"}, {"state_size", "1"}, {"num_layers", "1"}, {"state_outputs", "True"}});
  const double i = sigmoid(0.1 + 0.5 * 0.5 + 0.01), f = sigmoid(0.2 + 0.6 * 0.5 + 0.02);
  const double g = std::tanh(0.3 + 0.7 * 0.5 + 0.03), o = sigmoid(0.4 + 0.8 * 0.5 + 0.04 + 0.1);
  const double c = 0.25 * f + i * g, h = o * std::tanh(c);
  expect_values(y[0], {h}, 1e-6);
  expect_values(y[1], {h}, 1e-6);
  expect_values(y[2], {c}, 1e-6);
}

TEST(NnOpsRnn, GruOneStepByHand) {
  // W_i2h (r, z, n), W_h2h (r, z, n), b_i2h, b_h2h: the reset gate scales h W_hn + b_hn.
  const Tensor params = tensor({12}, {0.5, -0.3, 0.8, 0.2, 0.4, -0.6, 0.1, 0.0, -0.1, 0.05, 0.0, 0.3});
  const auto y = run("RNN", {tensor({1, 1, 1}, {2}), params, tensor({1, 1, 1}, {-0.5})},
                     {{"mode", "gru"}, {"state_size", "1"}, {"num_layers", "1"}});
  const double x = 2, h0 = -0.5;
  const double r = sigmoid(0.5 * x + 0.2 * h0 + 0.1 + 0.05), z = sigmoid(-0.3 * x + 0.4 * h0 + 0.0 + 0.0);
  const double n = std::tanh(0.8 * x - 0.1 + r * (-0.6 * h0 + 0.3));
  expect_values(y[0], {(1 - z) * n + z * h0}, 1e-6);
}

TEST(NnOpsRnn, BidirectionalTanhRunsTheReverseDirectionBackwards) {
  // Two steps, H = I = 1. Weights: forward (w, u), reverse (w', u'); biases forward
  // (bx, bh), reverse (bx', bh').
  const double w = 0.5, u = -0.4, wr = 0.3, ur = 0.7, b = 0.1, br = -0.2;
  const Tensor params = tensor({8}, {w, u, wr, ur, b, 0, br, 0});
  const auto y = run("RNN", {tensor({2, 1, 1}, {1, -2}), params, tensor({2, 1, 1}, {0.25, -0.5})},
                     {{"mode", "rnn_tanh"},
                      {"state_size", "1"},
                      {"num_layers", "1"},
                      {"bidirectional", "True"},
                      {"state_outputs", "True"}});
  const double f0 = std::tanh(w * 1 + u * 0.25 + b), f1 = std::tanh(w * -2 + u * f0 + b);
  const double r1 = std::tanh(wr * -2 + ur * -0.5 + br), r0 = std::tanh(wr * 1 + ur * r1 + br);
  ASSERT_EQ(y[0].shape(), (Shape{2, 1, 2}));
  expect_values(y[0], {f0, r0, f1, r1}, 1e-6);
  expect_values(y[1], {f1, r0}, 1e-6);  // final states: forward after step 1, reverse after step 0
}

TEST(NnOpsRnn, StackedReluFeedsTheFirstLayerIntoTheSecond) {
  // Layer 0: I=1 -> H=1 (w0=2, u0=0.5), layer 1: H -> H (w1=1, u1=-1); one bias, layer
  // 0's i2h (0.5).
  const Tensor params = tensor({8}, {2, 0.5, 1, -1, 0.5, 0, 0, 0});
  const auto y = run("RNN", {tensor({2, 1, 1}, {1, 3}), params, tensor({2, 1, 1}, {0, 0})},
                     {{"mode", "rnn_relu"}, {"state_size", "1"}, {"num_layers", "2"}});
  // Layer 0: h = relu(2x + 0.5h + 0.5): 2.5, then relu(6 + 1.25 + 0.5) = 7.75.
  // Layer 1: h = relu(x - h): 2.5, then relu(7.75 - 2.5) = 5.25.
  expect_values(y[0], {2.5, 5.25});
  const auto one = run("RNN", {tensor({2, 1, 1}, {1, 3}), tensor({4}, {2, 0.5, 0.5, 0}), tensor({1, 1, 1}, {0})},
                       {{"mode", "rnn_relu"}, {"state_size", "1"}, {"num_layers", "1"}});
  expect_values(one[0], {2.5, 7.75});
}

// ---------------------------------------------------------------- Sockeye custom ops

TEST(NnOpsCustom, SockeyePositionalEncodings) {
  const auto y = run("Custom", {}, {{"op_type", "positional_encodings"}, {"length", "2"}, {"depth", "4"}});
  ASSERT_EQ(y[0].type(), f32({1, 2, 4}));
  // Position 1, channel 1: angle 1 / 10000^(2/4) = 0.01.
  expect_values(y[0], {0, 0, 1, 1, static_cast<float>(std::sin(1.0)), static_cast<float>(std::sin(0.01)),
                       static_cast<float>(std::cos(1.0)), static_cast<float>(std::cos(0.01))});
}

TEST(NnOpsCustom, SockeyeBiases) {
  const auto ar = run("Custom", {}, {{"op_type", "auto_regressive_bias"}, {"length", "3"}});
  const float big = -99999999.0f;  // -1e8 once in f32
  expect_values(ar[0], {0, big, big, 0, 0, big, 0, 0, 0});
  EXPECT_TRUE(std::signbit(runtime::to_f64_vector(ar[0])[0]));  // Sockeye's -1e8 * 0 is -0.0
  const auto vl =
      run("Custom", {tensor({4}, {2, 0, 3.7, 9})}, {{"op_type", "variable_length_bias"}, {"max_length", "3"}});
  ASSERT_EQ(vl[0].type(), f32({4, 3}));
  expect_values(vl[0], {0, 0, big, big, big, big, 0, 0, 0, 0, 0, 0});
}

}  // namespace
}  // namespace ampfuse
