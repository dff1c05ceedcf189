// oneDNN external ops against the reference kernels (the semantic definition), f32, bf16 and
// f16, channels-first and channels-last; refusals; the primitive cache; and the external ops
// of real models (the embedded default, cifar_resnet20) in f32 and after bf16 AMP.
#include "engine/lower.h"
#include "models/default_model.h"
#include "ir/builder.h"
#include "ir/mxnet_json.h"
#include "ir/error.h"
#include "ir/op_registry.h"
#include "runtime/onednn/onednn_ops.h"
#include "runtime/reference/reference_kernels.h"
#include "tests/onednn_check.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>

namespace ampfuse::runtime {
namespace {

using ir::DType;
using ir::TensorType;
using namespace onednn_check;

TEST(Onednn, ConvolutionMatchesReference) {
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    const double tol = tolerance(t);
    check_against_reference("Convolution", {{t, {2, 8, 9, 9}}, {t, {16, 8, 3, 3}}, {t, {16}}},
                            {{"kernel", "(3,3)"}, {"num_filter", "16"}, {"pad", "(1,1)"}, {"stride", "(2,2)"}}, tol);
    check_against_reference("Convolution", {{t, {1, 8, 10, 10}}, {t, {8, 4, 3, 3}}},
                            {{"kernel", "(3,3)"}, {"num_filter", "8"}, {"num_group", "2"}, {"dilate", "(2,2)"},
                             {"no_bias", "True"}},
                            tol);
    check_against_reference("Convolution", {{t, {2, 9, 9, 8}}, {t, {16, 3, 3, 8}}, {t, {16}}},
                            {{"kernel", "(3,3)"}, {"num_filter", "16"}, {"pad", "(1,1)"}, {"layout", "NHWC"}}, tol);
    check_against_reference("Convolution", {{t, {2, 9, 9, 8}}, {t, {8, 3, 3, 4}}},
                            {{"kernel", "(3,3)"}, {"num_filter", "8"}, {"num_group", "2"}, {"stride", "(2,2)"},
                             {"layout", "NHWC"}, {"no_bias", "True"}},
                            tol);
    check_against_reference("Convolution", {{t, {2, 4, 17}}, {t, {6, 4, 5}}, {t, {6}}},
                            {{"kernel", "(5,)"}, {"num_filter", "6"}}, tol);
    check_against_reference("Convolution", {{t, {1, 3, 5, 6, 7}}, {t, {4, 3, 3, 3, 3}}},
                            {{"kernel", "(3,3,3)"}, {"num_filter", "4"}, {"no_bias", "True"}, {"pad", "(1,1,1)"}}, tol);
  }
  // AMP may leave the bias wider than the data: bf16 data and weight, f32 bias.
  check_against_reference("Convolution",
                          {{DType::bf16, {2, 8, 9, 9}}, {DType::bf16, {16, 8, 3, 3}}, {DType::f32, {16}}},
                          {{"kernel", "(3,3)"}, {"num_filter", "16"}, {"pad", "(1,1)"}}, tolerance(DType::bf16));
}

TEST(Onednn, MatrixProductsMatchReference) {
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    const double tol = tolerance(t);
    check_against_reference("FullyConnected", {{t, {3, 4, 5}}, {t, {7, 20}}, {t, {7}}}, {{"num_hidden", "7"}}, tol);
    check_against_reference("FullyConnected", {{t, {3, 4, 5}}, {t, {7, 5}}},
                            {{"num_hidden", "7"}, {"flatten", "False"}, {"no_bias", "True"}}, tol);
    check_against_reference("batch_dot", {{t, {2, 3, 4}}, {t, {2, 5, 4}}}, {{"transpose_b", "True"}}, tol);
    check_against_reference("batch_dot", {{t, {2, 4, 3}}, {t, {2, 4, 5}}}, {{"transpose_a", "True"}}, tol);
    check_against_reference("batch_dot", {{t, {2, 2, 3, 4}}, {t, {2, 2, 4, 5}}}, {}, tol);
    check_against_reference("dot", {{t, {3, 4}}, {t, {4, 5}}}, {}, tol);
    check_against_reference("dot", {{t, {4, 3}}, {t, {5, 4}}}, {{"transpose_a", "True"}, {"transpose_b", "True"}}, tol);
    check_against_reference("dot", {{t, {2, 3, 4}}, {t, {4, 5}}}, {}, tol);  // N-D: rows flattened
  }
  check_against_reference("FullyConnected", {{DType::bf16, {3, 20}}, {DType::bf16, {7, 20}}, {DType::f32, {7}}},
                          {{"num_hidden", "7"}}, tolerance(DType::bf16));
}

TEST(Onednn, PoolingSoftmaxLayerNormMatchReference) {
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    const double tol = tolerance(t);
    check_against_reference("Pooling", {{t, {2, 3, 9, 9}}},
                            {{"kernel", "(3,3)"}, {"stride", "(2,2)"}, {"pool_type", "max"}, {"pooling_convention", "full"}}, tol);
    check_against_reference("Pooling", {{t, {2, 3, 8, 8}}},
                            {{"kernel", "(2,2)"}, {"stride", "(2,2)"}, {"pool_type", "avg"}}, tol);
    check_against_reference("Pooling", {{t, {2, 3, 7, 7}}}, {{"kernel", "(1,1)"}, {"global_pool", "True"}, {"pool_type", "avg"}}, tol);
    check_against_reference("Pooling", {{t, {2, 9, 9, 8}}},
                            {{"kernel", "(3,3)"}, {"stride", "(2,2)"}, {"pad", "(1,1)"}, {"pool_type", "max"}, {"layout", "NHWC"}},
                            tol);
    check_against_reference("Pooling", {{t, {2, 8, 9, 9}}},
                            {{"kernel", "(3,3)"}, {"stride", "(2,2)"}, {"pad", "(1,1)"}, {"pool_type", "avg"},
                             {"count_include_pad", "False"}},
                            tol);
    check_against_reference("softmax", {{t, {4, 33}}}, {{"axis", "-1"}}, tol);
    // Not over the innermost axis: oneDNN 2.6 has only "ref:any" for that on AVX2 (the run
    // report flags it); still correct.
    check_against_reference("softmax", {{t, {4, 5, 6}}}, {{"axis", "1"}}, tol, /*hot=*/false);
    // Channels-first pooling runs in oneDNN's channel-blocked layout (its plain NCHW loop
    // is slow): odd channel counts (padded blocks), 1-D and 3-D windows.
    check_against_reference("Pooling", {{t, {1, 13, 7, 8, 9}}},
                            {{"kernel", "(2,3,3)"}, {"stride", "(1,2,2)"}, {"pad", "(0,1,1)"}, {"pool_type", "max"}}, tol);
    check_against_reference("Pooling", {{t, {2, 5, 17}}}, {{"kernel", "(3,)"}, {"stride", "(2,)"}, {"pool_type", "avg"}}, tol);
    // oneDNN 2.6 has only "simple_layer_normalization" here (run reports flag it).
    check_against_reference("LayerNorm", {{t, {6, 40}}, {t, {40}}, {t, {40}}}, {}, tol, /*hot=*/false);
  }
  check_against_reference("LayerNorm", {{DType::f32, {2, 3, 40}}, {DType::f32, {40}}, {DType::f32, {40}}}, {{"eps", "1e-3"}},
                          1e-5, /*hot=*/false);
}

// What oneDNN cannot run is refused with a reason, and onednn_run names the node.
TEST(Onednn, RefusesWhatItCannotDo) {
  struct Refused {
    std::string op;
    std::vector<TensorType> in;
    std::map<std::string, std::string> attrs;
    std::string reason;
  };
  const std::vector<Refused> cases = {
      {"Convolution", {{DType::f64, {1, 4, 5, 5}}, {DType::f64, {4, 4, 3, 3}}},
       {{"kernel", "(3,3)"}, {"num_filter", "4"}, {"no_bias", "True"}}, "f64"},
      {"Pooling", {{DType::f32, {1, 2, 6, 6}}}, {{"kernel", "(2,2)"}, {"pool_type", "sum"}}, "sum or lp"},
      {"Pooling", {{DType::f32, {1, 2, 8, 8}}},
       {{"kernel", "(3,3)"}, {"stride", "(2,2)"}, {"pool_type", "avg"}, {"pooling_convention", "full"}}, "past the padding"},
      {"softmax", {{DType::f32, {2, 5}}}, {{"temperature", "2.0"}}, "temperature"},
      {"LayerNorm", {{DType::f32, {2, 5, 3}}, {DType::f32, {5}}, {DType::f32, {5}}}, {{"axis", "1"}}, "last axis"},
      {"LayerNorm", {{DType::f32, {2, 5}}, {DType::f32, {5}}, {DType::f32, {5}}}, {{"output_mean_var", "True"}},
       "output_mean_var"},
      {"relu", {{DType::f32, {2, 5}}}, {}, "does not run relu"},
  };
  for (const Refused& c : cases) {
    ir::GraphBuilder b;
    std::vector<ir::ValueRef> ins;
    for (size_t i = 0; i < c.in.size(); ++i) ins.push_back(b.input("in" + std::to_string(i), c.in[i]));
    b.output(b.op(c.op, ins, c.attrs, "refused"));
    ir::Graph g = b.finish();
    const ir::Node& node = g.nodes.back();
    EXPECT_FALSE(onednn_supports(node, c.in)) << c.op << " " << c.reason;
    EXPECT_NE(onednn_refusal(node, c.in).find(c.reason), std::string::npos) << onednn_refusal(node, c.in);
    EXPECT_EQ(onednn_impl_name(node, c.in), "");
    std::vector<Tensor> in, out;
    for (size_t i = 0; i < c.in.size(); ++i) in.push_back(filled(c.in[i], i + 1));
    for (const TensorType& t : node.outputs) out.emplace_back(t);
    try {
      onednn_run(node, in, out);
      ADD_FAILURE() << c.op << ": expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("node 'refused'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.reason), std::string::npos) << e.what();
    }
  }
}

// bf16 through oneDNN keeps what the reference keeps: a subnormal product stays subnormal
// on the f32-compute path (ir/lowp.h rounding). A native bf16 kernel (AVX-512) may flush it.
TEST(Onednn, LowPrecisionRoundsLikeTheReference) {
  const std::vector<TensorType> types = {{DType::bf16, {1, 4}}, {DType::bf16, {1, 4}}};
  ir::GraphBuilder b;
  auto x = b.input("x", types[0]);
  auto w = b.input("w", types[1]);
  b.output(b.op("FullyConnected", {x, w}, {{"num_hidden", "1"}, {"no_bias", "True"}}, "fc"));
  ir::Graph g = b.finish();
  const ir::Node& node = g.nodes.back();
  ASSERT_TRUE(onednn_supports(node, types)) << onednn_refusal(node, types);
  Tensor in(types[0]), wt(types[1]), got(node.outputs[0]), want(node.outputs[0]);
  for (int i = 0; i < 4; ++i) in.set_f64(i, i == 0 ? 0x1p-70 : 0.0), wt.set_f64(i, i == 0 ? 0x1p-60 : 1.0);
  onednn_run(node, std::vector<Tensor>{in, wt}, std::span<Tensor>(&got, 1));
  (*find_reference_kernel("FullyConnected"))(node, std::vector<Tensor>{in, wt}, std::span<Tensor>(&want, 1));
  EXPECT_EQ(want.get_f64(0), 0x1p-130);
  if (onednn_impl_name(node, types).find("as f32") != std::string::npos) {
    EXPECT_EQ(got.get_f64(0), want.get_f64(0));
  }
}

TEST(Onednn, PrimitivesAreCreatedOncePerShape) {
  std::vector<TensorType> types = {{DType::f32, {2, 6}}, {DType::f32, {3, 6}}};
  ir::GraphBuilder b;
  auto x = b.input("x", types[0]);
  auto w = b.input("w", types[1]);
  b.output(b.op("FullyConnected", {x, w}, {{"num_hidden", "3"}, {"no_bias", "True"}}, "fc"));
  ir::Graph g = b.finish();
  std::vector<Tensor> in = {filled(types[0], 1), filled(types[1], 2)};
  std::vector<Tensor> out = {Tensor(g.nodes.back().outputs[0])};
  onednn_run(g.nodes.back(), in, out);
  const size_t created = onednn_primitives_created();
  for (int i = 0; i < 3; ++i) onednn_run(g.nodes.back(), in, out);
  EXPECT_EQ(onednn_primitives_created(), created);
}

// OnednnPrefetch makes the primitives that onednn_primitive then only looks up, each key once
// (two nodes of one shape share a primitive), and leaves a node oneDNN refuses to
// onednn_primitive, which reports it as before.
TEST(Onednn, PrefetchMakesThePrimitivesOnednnPrimitiveFinds) {
  std::vector<TensorType> x = {{DType::f32, {1, 5, 23, 23}}, {DType::f32, {7, 5, 3, 3}}};
  ir::GraphBuilder b;
  auto in = b.input("x", x[0]);
  auto w = b.input("w", x[1]);
  const std::map<std::string, std::string> conv = {{"kernel", "(3,3)"}, {"num_filter", "7"}, {"no_bias", "True"}};
  std::map<std::string, std::string> padded = conv;
  padded["pad"] = "(1,1)";
  auto c1 = b.op("Convolution", {in, w}, conv, "c1");
  auto c2 = b.op("Convolution", {in, w}, conv, "c2");  // c1's key
  auto c3 = b.op("Convolution", {in, w}, padded, "c3");
  auto t = b.op("tanh", {c3});  // no oneDNN primitive
  b.output(b.op("Pooling", {c1}, {{"kernel", "(2,2)"}, {"pool_type", "avg"}}, "pool"));
  b.output(c2);
  b.output(t);
  ir::Graph g = b.finish();
  std::vector<OnednnPrefetch::Item> items;
  std::vector<std::vector<TensorType>> types;
  for (const ir::Node& n : g.nodes) {
    if (n.is_var()) continue;
    std::vector<TensorType> in_types;
    for (ir::ValueRef v : n.inputs) in_types.push_back(g.type(v));
    items.push_back({&n, in_types});
    types.push_back(in_types);
  }
  const size_t before = onednn_primitives_created();
  OnednnPrefetch(items).wait();
  EXPECT_EQ(onednn_primitives_created() - before, 3u) << "c1 (= c2), c3 and the pooling";
  size_t i = 0, made = 0;
  for (const ir::Node& n : g.nodes) {
    if (n.is_var()) continue;
    made += onednn_primitive(n, types[i++]) != nullptr;
  }
  EXPECT_EQ(made, 4u);
  EXPECT_EQ(onednn_primitives_created() - before, 3u) << "onednn_primitive made one more";
}

// Every external op of a real model runs on oneDNN, in f32 and after bf16 AMP (bf16 data,
// weights and biases as the AMP pass leaves them), and matches the reference kernel.
void check_model_external_ops(const ir::Graph& f32_graph, const std::string& model) {
  engine::AmpOptions amp;
  amp.target = DType::bf16;
  const ir::Graph bf16_graph = engine::convert_for_amp(f32_graph, amp);
  for (const ir::Graph* g : {&f32_graph, &bf16_graph}) {
    int checked = 0, lowp = 0;
    for (const ir::Node& node : g->nodes) {
      if (node.op != "Convolution" && node.op != "FullyConnected" && node.op != "Pooling" && node.op != "LayerNorm" &&
          node.op != "softmax")
        continue;
      SCOPED_TRACE(fmt::format("{}: node '{}' ({})", model, node.name, node.op));
      std::vector<Tensor> inputs;
      for (size_t i = 0; i < node.inputs.size(); ++i) inputs.push_back(filled(g->type(node.inputs[i]), i + 7));
      const DType out = node.outputs[0].dtype;
      compare_node(node, inputs, tolerance(out) * 4, /*hot=*/node.op != "LayerNorm");
      ++checked;
      lowp += out == DType::bf16;
    }
    EXPECT_GT(checked, 0) << model;
    if (g == &bf16_graph) {
      EXPECT_GT(lowp, 0) << model << ": AMP left no external op in bf16";
    }
  }
}

TEST(Onednn, DefaultModelExternalOpsRunOnOnednn) {
  check_model_external_ops(models::build_default_model(2), "default model");
}

TEST(Onednn, CifarResnetExternalOpsRunOnOnednn) {
  const std::string path = std::string(AMPFUSE_MODELS_DIR) + "/cifar_resnet20_v2-gluoncv-symbol.json";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no model at " << path;
  ir::MxnetImportOptions opts;
  opts.input_shapes = {{"data", {2, 3, 32, 32}}};
  check_model_external_ops(ir::load_mxnet_json_file(path, opts), "cifar_resnet20_v2");
}

}  // namespace
}  // namespace ampfuse::runtime
