// amp_options and amp_convert: op classes per target, overrides, and MXNet's AMP cases.
#include "engine/passes/amp_options.h"
#include "engine/lower.h"
#include "engine/passes/amp_convert.h"
#include "ir/builder.h"
#include "ir/op_registry.h"
#include "ir/text_format.h"
#include "tests/amp_counts.h"
#include "tests/filecheck.h"
#include "tests/test_util.h"
#include "runtime/interpreter.h"

#include <gtest/gtest.h>

#include <map>

namespace ampfuse::testing {
namespace {

using engine::AmpOptions;
using engine::AmpPolicy;
using ir::AmpClass;
using ir::DType;

AmpOptions options(DType target) {
  AmpOptions o;
  o.target = target;
  return o;
}

// Every registered op is in exactly one of the policy's lists, and op_class agrees.
void expect_partition(const AmpPolicy& p) {
  std::map<std::string, int> seen;
  for (AmpClass c : engine::kAmpClasses)
    for (const std::string& op : p.ops(c)) {
      ++seen[op];
      EXPECT_EQ(p.op_class(op), c) << op;
    }
  for (const std::string& op : ir::OpRegistry::global().names()) EXPECT_EQ(seen[op], 1) << op << " is in " << seen[op] << " lists";
  EXPECT_EQ(seen.size(), ir::OpRegistry::global().names().size());
}

TEST(AmpConvertLists, EveryOpHasExactlyOneClassPerTarget) {
  for (DType t : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(ir::dtype_name(t));
    expect_partition(AmpPolicy(options(t)));
  }
}

TEST(AmpConvertLists, OverridesMoveOpsOutOfTheirDefaultClass) {
  AmpOptions o = options(DType::f16);
  o.fp32_ops = {"Convolution"};
  o.lp16_ops = {"relu", "Pooling"};
  o.widest_ops = {"exp"};
  o.neutral_ops = {"FullyConnected"};
  o.conditional_fp32_ops = {{"Activation", "act_type", {"tanh"}}, {"Pooling", "pool_type", {"avg"}}};
  const AmpPolicy p(o);
  expect_partition(p);
  EXPECT_EQ(p.op_class("Convolution"), AmpClass::fp32);
  EXPECT_EQ(p.op_class("relu"), AmpClass::lowp);
  EXPECT_EQ(p.op_class("exp"), AmpClass::widest);
  EXPECT_EQ(p.op_class("FullyConnected"), AmpClass::neutral);
  EXPECT_EQ(p.op_class("Activation"), AmpClass::cond_fp32);
  EXPECT_EQ(p.op_class("Pooling"), AmpClass::cond_fp32);
  // The defaults are where they were for the ops nobody moved.
  const AmpPolicy d(options(DType::f16));
  EXPECT_EQ(d.op_class("Convolution"), AmpClass::lowp);
  EXPECT_EQ(d.op_class("exp"), AmpClass::fp32);
  EXPECT_EQ(p.op_class("Deconvolution"), AmpClass::lowp);
}

ir::Node node(const std::string& op, std::map<std::string, std::string> attrs, std::string name = "n") {
  ir::Node n;
  n.op = op;
  n.name = std::move(name);
  n.attrs = ir::parse_attrs(ir::OpRegistry::global().get(op), attrs);
  return n;
}

TEST(AmpConvertLists, ConditionalEntriesResolvePerNode) {
  const AmpPolicy d(options(DType::bf16));
  EXPECT_EQ(d.op_class("Activation"), AmpClass::cond_fp32);
  EXPECT_EQ(d.node_class(node("Activation", {{"act_type", "softrelu"}})), AmpClass::fp32);
  EXPECT_EQ(d.node_class(node("Activation", {{"act_type", "relu"}})), AmpClass::neutral);

  // A user entry replaces the registry's condition and falls back to the class chosen.
  AmpOptions o = options(DType::bf16);
  o.lp16_ops = {"Pooling"};
  o.conditional_fp32_ops = {{"Activation", "act_type", {"tanh", "sigmoid"}}, {"Pooling", "pool_type", {"avg"}}};
  const AmpPolicy p(o);
  EXPECT_EQ(p.node_class(node("Activation", {{"act_type", "sigmoid"}})), AmpClass::fp32);
  EXPECT_EQ(p.node_class(node("Activation", {{"act_type", "softrelu"}})), AmpClass::neutral);
  EXPECT_EQ(p.node_class(node("Pooling", {{"pool_type", "avg"}, {"kernel", "(2,2)"}})), AmpClass::fp32);
  EXPECT_EQ(p.node_class(node("Pooling", {{"pool_type", "max"}, {"kernel", "(2,2)"}})), AmpClass::lowp);
}

TEST(AmpConvertLists, ExclusionByNameAndByHint) {
  AmpOptions o = options(DType::bf16);
  o.excluded_nodes = {"fc_skip"};
  const AmpPolicy p(o);
  ir::Node fc = node("FullyConnected", {{"num_hidden", "4"}}, "fc");
  EXPECT_EQ(p.node_class(fc), AmpClass::lowp);
  ir::Node named = fc;
  named.name = "fc_skip";
  EXPECT_EQ(p.node_class(named), AmpClass::fp32);
  ir::Node hinted = fc;
  hinted.hints[engine::kAmpDisableHint] = "1";
  EXPECT_EQ(p.node_class(hinted), AmpClass::fp32);
  hinted.hints[engine::kAmpDisableHint] = "0";
  EXPECT_EQ(p.node_class(hinted), AmpClass::lowp);
  ir::Node mxnet = fc;  // HybridBlock.OptConstraint.Flag.DisableAMP is bit 0
  mxnet.hints[engine::kMxnetOptConstraintHint] = "3";
  EXPECT_EQ(p.node_class(mxnet), AmpClass::fp32);
  mxnet.hints[engine::kMxnetOptConstraintHint] = "2";
  EXPECT_EQ(p.node_class(mxnet), AmpClass::lowp);
}

TEST(AmpConvertLists, BadOptionsAreErrors) {
  AmpOptions o = options(DType::f32);
  EXPECT_ERROR(AmpPolicy{o}, "float16 or bfloat16, not float32");
  o = options(DType::bf16);
  o.fp32_ops = {"Convolutoin"};
  EXPECT_ERROR(AmpPolicy{o}, "fp32_ops: unknown op 'Convolutoin' (did you mean 'Convolution'?)");
  o = options(DType::bf16);
  o.fp32_ops = {"relu"};
  o.lp16_ops = {"relu"};
  EXPECT_ERROR(AmpPolicy{o}, "op 'relu' is in both lp16_ops and fp32_ops");
  o = options(DType::bf16);
  o.conditional_fp32_ops = {{"Activation", "kind", {"tanh"}}};
  EXPECT_ERROR(AmpPolicy{o}, "op 'Activation' has no attribute 'kind'");
  o.conditional_fp32_ops = {{"Activation", "act_type", {}}};
  EXPECT_ERROR(AmpPolicy{o}, "lists no values");
}

// ---------------------------------------------------------------------------------------
// MXNet's AMP cases (tests/python/amp/common.py), counted as tests/amp_counts.h explains,
// on the graph convert_for_amp returns (amp-convert, cast-fold, dce), for both targets.

AmpCounts convert_and_count(const char* text, AmpOptions o, ir::Graph* out = nullptr) {
  ir::Graph g = engine::convert_for_amp(ir::parse_graph(text), o);
  EXPECT_TRUE(repeated_casts(g).empty()) << ir::print_graph(g);
  if (out) *out = g;
  return count_amp(g, o.target);
}

// net = Dense(4) -> Dense(4) -> reshape((-1, 2, 2)).
const char* kBasicUse = R"(graph {
  %data = var input : f32[4,4]
  %fc1_weight = var param
  %fc1_bias = var param
  %fc2_weight = var param
  %fc2_bias = var param
  %fc1 = FullyConnected(%data, %fc1_weight, %fc1_bias) {num_hidden=4}
  %fc2 = FullyConnected(%fc1, %fc2_weight, %fc2_bias) {num_hidden=4}
  %reshape = Reshape(%fc2) {shape=[-1,2,2]}
  return %reshape
})";

TEST(AmpConvertMxnetCases, BasicUse) {
  // lp16 casts: data, fc1 weight and bias, fc2 weight and bias (5); other: the output.
  // lp16 tensors: those 5 casts, fc1, fc2 and (fp16, where Reshape is neutral) reshape.
  // MXNet 1.9.1's bf16 list has Reshape in FP32_FUNCS: fc2 is cast back before it instead.
  // (MXNet 1.9.1's convert_symbol gives these counts for both targets.)
  ir::Graph g;
  EXPECT_EQ(convert_and_count(kBasicUse, options(DType::f16), &g), (AmpCounts{8, 5, 1}));
  EXPECT_FILECHECK(ir::print_graph(g), R"(
    CHECK: %data_amp_cast_float16 = amp_cast(%data) {dtype=f16} hints={"__amp_inserted__":"1"} : f16[4,4]
    CHECK: %fc1 = FullyConnected(%data_amp_cast_float16, %fc1_weight_amp_cast_float16, %fc1_bias_amp_cast_float16)
    CHECK-SAME: : f16[4,4]
    CHECK: %fc2 = FullyConnected(%fc1, %fc2_weight_amp_cast_float16, %fc2_bias_amp_cast_float16)
    CHECK: %reshape = Reshape(%fc2) {{.*}} : f16[4,2,2]
    CHECK-NEXT: %reshape_output_amp_cast_float32 = amp_cast(%reshape) {dtype=f32} {{.*}} : f32[4,2,2]
    CHECK-NEXT: return %reshape_output_amp_cast_float32)");
  EXPECT_EQ(convert_and_count(kBasicUse, options(DType::bf16), &g), (AmpCounts{7, 5, 1}));
  EXPECT_FILECHECK(ir::print_graph(g), R"(
    CHECK: %fc2 = FullyConnected(%fc1, %fc2_weight_amp_cast_bfloat16, %fc2_bias_amp_cast_bfloat16)
    CHECK-SAME: : bf16[4,4]
    CHECK-NEXT: %fc2_output_amp_cast_float32 = amp_cast(%fc2) {dtype=f32} {{.*}} : f32[4,4]
    CHECK-NEXT: %reshape = Reshape(%fc2_output_amp_cast_float32) {{.*}} : f32[4,2,2]
    CHECK-NEXT: return %reshape)");
}

// Conv2D(4, 3) -> Conv2DTranspose(4, 3) -> reshape(N, -1) -> Dense(4) with AMP disabled.
const char* kOfflineCasting = R"(graph {
  %data = var input : f32[4,3,16,16]
  %lp16_op1_weight = var param
  %lp16_op1_bias = var param
  %lp16_op2_weight = var param
  %lp16_op2_bias = var param
  %fp32_op_weight = var param
  %fp32_op_bias = var param
  %lp16_op1 = Convolution(%data, %lp16_op1_weight, %lp16_op1_bias) {kernel=[3,3], num_filter=4}
  %lp16_op2 = Deconvolution(%lp16_op1, %lp16_op2_weight, %lp16_op2_bias) {kernel=[3,3], num_filter=4, no_bias=false}
  %reshape = Reshape(%lp16_op2) {shape=[4,-1]}
  %fp32_op = FullyConnected(%reshape, %fp32_op_weight, %fp32_op_bias) {num_hidden=4} hints={"__amp_disable__":"1"}
  return %fp32_op
})";

DType var_type(const ir::Graph& g, const std::string& name) { return g.nodes.at(*g.find_var(name)).outputs.at(0).dtype; }

TEST(AmpConvertMxnetCases, OfflineCasting) {
  for (DType t : {DType::bf16, DType::f16}) {
    AmpOptions o = options(t);
    o.cast_params_offline = true;
    ir::Graph g;
    if (t == DType::f16) {
      // lp16: the data cast, both convolutions, the reshape; the one other cast takes the
      // reshape back to f32 for the disabled Dense. Params are stored low, not cast.
      EXPECT_EQ(convert_and_count(kOfflineCasting, o, &g), (AmpCounts{4, 1, 1}));
      for (const char* p : {"lp16_op1_weight", "lp16_op1_bias", "lp16_op2_weight", "lp16_op2_bias"})
        EXPECT_EQ(var_type(g, p), t) << p;
      // Without offline casting the four params are cast instead (and counted).
      EXPECT_EQ(convert_and_count(kOfflineCasting, options(t)), (AmpCounts{8, 5, 1}));
    } else {
      // MXNet 1.9.1's bf16 list has Deconvolution and Reshape in FP32_FUNCS: lp16 are the data
      // cast and the convolution, whose output is cast back for the Deconvolution; only the
      // convolution's params are stored low.
      EXPECT_EQ(convert_and_count(kOfflineCasting, o, &g), (AmpCounts{2, 1, 1}));
      for (const char* p : {"lp16_op1_weight", "lp16_op1_bias"}) EXPECT_EQ(var_type(g, p), t) << p;
      for (const char* p : {"lp16_op2_weight", "lp16_op2_bias"}) EXPECT_EQ(var_type(g, p), DType::f32) << p;
      // Without offline casting the convolution's two params are cast (MXNet 1.9.1: the same).
      EXPECT_EQ(convert_and_count(kOfflineCasting, options(t)), (AmpCounts{4, 3, 1}));
    }
    for (const char* p : {"fp32_op_weight", "fp32_op_bias"}) EXPECT_EQ(var_type(g, p), DType::f32) << p;
  }
}

// Two Dense share a weight; the AMP-disabled Dense shares the second one's bias; concat.
const char* kSharedParams = R"(graph {
  %data = var input : f32[4,4]
  %weight = var param
  %lp16_op1_bias = var param
  %lp16_op2_bias = var param
  %fp32_op_weight = var param
  %lp16_op1 = FullyConnected(%data, %weight, %lp16_op1_bias) {num_hidden=4}
  %lp16_op2 = FullyConnected(%lp16_op1, %weight, %lp16_op2_bias) {num_hidden=4}
  %fp32_op = FullyConnected(%lp16_op1, %fp32_op_weight, %lp16_op2_bias) {num_hidden=4} hints={"__amp_disable__":"1"}
  %concat = Concat(%lp16_op2, %fp32_op) {num_args=2, dim=1}
  return %concat
})";

TEST(AmpConvertMxnetCases, OfflineCastingSharedParams) {
  for (DType t : {DType::bf16, DType::f16}) {
    AmpOptions o = options(t);
    o.cast_params_offline = true;
    // lp16 casts: data, and the shared bias (the disabled Dense reads it in f32, so it
    // stays f32 and is cast for lp16_op2). Other casts: lp16_op1's output for the disabled
    // Dense, and for fp16, lp16_op2's output for the concat, which (widest) runs in f32 as
    // one input is f32. lp16 tensors: the two casts and the two low Dense outputs.
    // MXNet 1.9.1's bf16 list has Concat neutral: it runs low, as one input is, so the
    // disabled Dense's output is cast down for it and its result back up (MXNet 1.9.1's own
    // pass fails on this graph in bf16: "Non-uniform data type in Concat").
    ir::Graph g;
    EXPECT_EQ(convert_and_count(kSharedParams, o, &g), (t == DType::f16 ? AmpCounts{4, 2, 2} : AmpCounts{6, 3, 2}));
    EXPECT_EQ(var_type(g, "weight"), t);
    EXPECT_EQ(var_type(g, "lp16_op1_bias"), t);
    EXPECT_EQ(var_type(g, "lp16_op2_bias"), DType::f32);
    EXPECT_EQ(var_type(g, "fp32_op_weight"), DType::f32);
  }
}

// x = 2**x, then a neutral op and a low-precision op on x, in both orders.
const char* kOrderFlattenFirst = R"(graph {
  %data = var input : f32[4,16]
  %weight = var param
  %bias = var param
  %pow = _rpower_scalar(%data) {scalar=2}
  %flatten = Flatten(%pow)
  %dense = FullyConnected(%pow, %weight, %bias) {num_hidden=4}
  return %flatten, %dense
})";
const char* kOrderDenseFirst = R"(graph {
  %data = var input : f32[4,16]
  %weight = var param
  %bias = var param
  %pow = _rpower_scalar(%data) {scalar=2}
  %dense = FullyConnected(%pow, %weight, %bias) {num_hidden=4}
  %flatten = Flatten(%pow)
  return %flatten, %dense
})";

TEST(AmpConvertMxnetCases, NeutralOpsDoNotDependOnOrder) {
  for (DType t : {DType::bf16, DType::f16}) {
    AmpOptions o = options(t);
    o.cast_params_offline = true;
    // The Dense casts 2**x down once; the Flatten finds that cast whichever comes first and
    // runs low too. lp16: the cast, dense, flatten; other casts: both outputs back to f32.
    // MXNet 1.9.1's bf16 list has Flatten in FP32_FUNCS: it reads 2**x in f32 in either
    // order, and only the Dense's output is cast back.
    const AmpCounts want = t == DType::f16 ? AmpCounts{3, 1, 2} : AmpCounts{2, 1, 1};
    const DType flatten_runs_in = t == DType::f16 ? t : DType::f32;
    ir::Graph a, b;
    EXPECT_EQ(convert_and_count(kOrderFlattenFirst, o, &a), want);
    EXPECT_EQ(convert_and_count(kOrderDenseFirst, o, &b), want);
    const auto flatten_type = [](const ir::Graph& g) {
      for (const ir::Node& n : g.nodes)
        if (n.op == "Flatten") return n.outputs[0].dtype;
      return DType::f64;
    };
    EXPECT_EQ(flatten_type(a), flatten_runs_in);
    EXPECT_EQ(flatten_type(b), flatten_runs_in);
  }
}

// A neutral op whose input exists low only because of a Dense further down, feeding a
// widest op whose other input exists low only because of another Dense: one forward sweep
// in the first order would run both in f32.
const char* kLateEvidenceFirst = R"(graph {
  %x = var input : f32[4,8]
  %y = var input : f32[4,8]
  %w = var param : f32[8,8]
  %r = relu(%x)
  %sum = elemwise_add(%r, %y)
  %fy = FullyConnected(%y, %w) {num_hidden=8, no_bias=true}
  %fx = FullyConnected(%x, %w) {num_hidden=8, no_bias=true}
  return %sum, %fy, %fx
})";
const char* kLateEvidenceLast = R"(graph {
  %x = var input : f32[4,8]
  %y = var input : f32[4,8]
  %w = var param : f32[8,8]
  %fx = FullyConnected(%x, %w) {num_hidden=8, no_bias=true}
  %fy = FullyConnected(%y, %w) {num_hidden=8, no_bias=true}
  %r = relu(%x)
  %sum = elemwise_add(%r, %y)
  return %sum, %fy, %fx
})";

TEST(AmpConvertMxnetCases, DecisionsWaitForEvidenceFromLaterNodes) {
  for (const char* text : {kLateEvidenceFirst, kLateEvidenceLast}) {
    ir::Graph g;
    // Casts down: x, y, w; back up: the three outputs. Low: those, r, sum, fy, fx.
    EXPECT_EQ(convert_and_count(text, options(DType::bf16), &g), (AmpCounts{7, 3, 3}));
    EXPECT_FILECHECK(ir::print_graph(g), R"(
      CHECK-DAG: %r = relu(%x_amp_cast_bfloat16) : bf16[4,8]
      CHECK-DAG: %sum = elemwise_add(%r, %y_amp_cast_bfloat16) : bf16[4,8])");
  }
}

// Two FullyConnected share data, weight and bias; fc1 carries MXNet's DisableAMP flag.
const char* kNodeExcluding = R"(graph {
  %data = var input : f32[4,16]
  %weights = var param
  %bias = var param
  %fc1 = FullyConnected(%data, %weights, %bias) {num_hidden=4} hints={"__opt_constraint__":"1"}
  %fc2 = FullyConnected(%data, %weights, %bias) {num_hidden=4}
  return %fc1, %fc2
})";

TEST(AmpConvertMxnetCases, NodeExcluding) {
  for (DType t : {DType::bf16, DType::f16}) {
    // fc2 alone runs low: casts of data, weights and bias, its output, and one cast back.
    EXPECT_EQ(convert_and_count(kNodeExcluding, options(t)), (AmpCounts{4, 3, 1}));
    AmpOptions o = options(t);
    o.excluded_nodes = {"fc1", "fc2"};
    EXPECT_EQ(convert_and_count(kNodeExcluding, o), (AmpCounts{0, 0, 0}));
  }
}

// #19463: concatenating a low-precision Dense output with an f32 input gives f32.
const char* kConcatMixed = R"(graph {
  %data = var input : f32[4,8]
  %other = var input : f32[4,4]
  %weight = var param
  %bias = var param
  %dense = FullyConnected(%data, %weight, %bias) {num_hidden=4}
  %concat = Concat(%dense, %other) {num_args=2, dim=1}
  return %concat
})";

TEST(AmpConvertWidest, ConcatOfLowAndF32StaysF32) {
  ir::Graph g;
  convert_and_count(kConcatMixed, options(DType::f16), &g);
  EXPECT_FILECHECK(ir::print_graph(g), R"(
    CHECK: %dense = FullyConnected({{.*}} : f16[4,4]
    CHECK-NEXT: %dense_output_amp_cast_float32 = amp_cast(%dense) {dtype=f32}
    CHECK-NEXT: %concat = Concat(%dense_output_amp_cast_float32, %other) {{.*}} : f32[4,8]
    CHECK-NEXT: return %concat)");
}

TEST(AmpConvertWidest, CastNarrowRunsMixedInputsLow) {
  AmpOptions o = options(DType::f16);
  o.cast_narrow = true;
  ir::Graph g;
  convert_and_count(kConcatMixed, o, &g);
  EXPECT_FILECHECK(ir::print_graph(g), R"(
    CHECK: %other_amp_cast_float16 = amp_cast(%other) {dtype=f16}
    CHECK: %concat = Concat(%dense, %other_amp_cast_float16) {{.*}} : f16[4,8]
    CHECK-NEXT: %concat_output_amp_cast_float32 = amp_cast(%concat) {dtype=f32})");
}

TEST(AmpConvertWidest, AllLowInputsRunLowWithoutCasts) {
  ir::Graph g;
  convert_and_count(R"(graph {
    %data = var input : f32[4,8]
    %w1 = var param
    %w2 = var param
    %a = FullyConnected(%data, %w1) {num_hidden=4, no_bias=true}
    %b = FullyConnected(%data, %w2) {num_hidden=4, no_bias=true}
    %sum = elemwise_add(%a, %b)
    return %sum
  })",
                    options(DType::bf16), &g);
  EXPECT_FILECHECK(ir::print_graph(g), R"(
    CHECK-NOT: amp_cast(%a)
    CHECK-NOT: amp_cast(%b)
    CHECK: %sum = elemwise_add(%a, %b) : bf16[4,4]
    CHECK-NEXT: %sum_output_amp_cast_float32 = amp_cast(%sum) {dtype=f32}
    CHECK-NEXT: return %sum_output_amp_cast_float32)");
}

TEST(AmpConvertClasses, Fp32AndConditionalOpsReadTheOriginalType) {
  ir::Graph g;
  convert_and_count(R"(graph {
    %data = var input : f32[4,8]
    %w = var param
    %fc = FullyConnected(%data, %w) {num_hidden=4, no_bias=true}
    %soft = Activation(%fc) {act_type="softrelu"}
    %relu = Activation(%fc) {act_type="relu"}
    %e = exp(%relu)
    return %soft, %e
  })",
                    options(DType::bf16), &g);
  EXPECT_FILECHECK(ir::print_graph(g), R"(
    CHECK: %fc_output_amp_cast_float32 = amp_cast(%fc) {dtype=f32}
    CHECK-NEXT: %soft = Activation(%fc_output_amp_cast_float32) {{.*}} : f32[4,4]
    CHECK-NEXT: %relu = Activation(%fc) {{.*}} : bf16[4,4]
    CHECK-NEXT: %relu_output_amp_cast_float32 = amp_cast(%relu) {dtype=f32}
    CHECK-NEXT: %e = exp(%relu_output_amp_cast_float32) : f32[4,4]
    CHECK-NEXT: return %soft, %e)");
}

TEST(AmpConvertClasses, NeutralOpsWithOnlyF32InputsStayF32) {
  ir::Graph g;
  EXPECT_EQ(convert_and_count(R"(graph {
    %data = var input : f32[4,8]
    %r = relu(%data)
    %t = tanh(%r)
    return %t
  })",
                              options(DType::bf16), &g),
            (AmpCounts{0, 0, 0}));
}

TEST(AmpConvertClasses, Bf16BatchNormKeepsItsParamsF32) {
  ir::Graph g;
  convert_and_count(R"(graph {
    %data = var input : f32[1,3,8,8]
    %w = var param
    %gamma = var param
    %beta = var param
    %mean = var aux
    %var = var aux
    %conv = Convolution(%data, %w) {kernel=[3,3], num_filter=4, no_bias=true}
    %bn = BatchNorm(%conv, %gamma, %beta, %mean, %var) {fix_gamma=false}
    return %bn
  })",
                    options(DType::bf16), &g);
  EXPECT_FILECHECK(ir::print_graph(g), R"(
    CHECK: %conv = Convolution({{.*}} : bf16[1,4,6,6]
    CHECK-NEXT: %bn = BatchNorm(%conv, %gamma, %beta, %mean, %var) {{.*}} : bf16[1,4,6,6]
    CHECK-NOT: %gamma_amp_cast)");
}

TEST(AmpConvertClasses, FanOutIsCastOnceAndOutputsKeepTheirTypes) {
  ir::Graph g;
  const AmpCounts c = convert_and_count(R"(graph {
    %data = var input : f32[2,8]
    %w = var param
    %a = FullyConnected(%data, %w) {num_hidden=8, no_bias=true}
    %b = FullyConnected(%data, %w) {num_hidden=8, no_bias=true}
    %c = FullyConnected(%data, %w) {num_hidden=8, no_bias=true}
    return %a, %b, %c, %data
  })",
                                        options(DType::f16), &g);
  // Casts: data and w once each, three outputs back; the input returned as is.
  EXPECT_EQ(c, (AmpCounts{5, 2, 3}));
  for (ir::ValueRef o : g.outputs) EXPECT_EQ(g.type(o).dtype, DType::f32);
}

TEST(AmpConvertClasses, ExistingCastsAreKeptAndReadTheNewType) {
  ir::Graph g = ir::parse_graph(R"(graph {
    %data = var input : f32[2,8]
    %w = var param
    %fc = FullyConnected(%data, %w) {num_hidden=8, no_bias=true}
    %half = Cast(%fc) {dtype=f16}
    return %half
  })");
  engine::amp_convert(g, options(DType::f16));
  EXPECT_FILECHECK(ir::print_graph(g), R"(
    CHECK: %fc = FullyConnected({{.*}} : f16[2,8]
    CHECK-NEXT: %half = Cast(%fc) {dtype=f16} : f16[2,8]
    CHECK-NEXT: return %half)");
}

const char* kSources = R"(graph {
  %data = var input : f32[2,8]
  %w = var param
  %zeros = _zeros() {shape=[2,8]}
  %half = _full() {shape=[2,8], value=0.5}
  %third = _full() {shape=[2,8], value=0.333333333333}
  %a = FullyConnected(%zeros, %w) {num_hidden=8, no_bias=true}
  %b = FullyConnected(%half, %w) {num_hidden=8, no_bias=true}
  %c = FullyConnected(%third, %w) {num_hidden=8, no_bias=true}
  %e = exp(%half)
  return %a, %b, %c, %e
})";

TEST(AmpConvertClasses, LowPrecisionSourcesAreMadeInTheTypeTheirReadersWant) {
  // MXNet's bf16 list has _zeros and _full in FP32_FUNCS; moved to the low-precision class,
  // a source has no input to cast, so it is made in the type its readers want.
  AmpOptions o = options(DType::bf16);
  o.lp16_ops = {"_zeros", "_full"};
  ir::Graph g;
  const AmpCounts c = convert_and_count(kSources, o, &g);
  // zeros: all readers low, made in bf16; 0.5 is read low and in f32, so a bf16 copy is
  // made beside it; 1/3 is not an f32 value: a cast. Low tensors: the two made sources,
  // the two casts (w, the third) and the three Dense outputs, which are cast back.
  EXPECT_EQ(c, (AmpCounts{7, 2, 3}));
  EXPECT_FILECHECK(ir::print_graph(g), R"(
    CHECK: %zeros = _zeros() {dtype=bf16, shape=[2,8]} : bf16[2,8]
    CHECK: %half = _full() {dtype=f32, shape=[2,8], value=0.5} : f32[2,8]
    CHECK: %a = FullyConnected(%zeros,
    CHECK: %half_bfloat16 = _full() {dtype=bf16, shape=[2,8], value=0.5} : bf16[2,8]
    CHECK-NEXT: %b = FullyConnected(%half_bfloat16,
    CHECK: %third_output_amp_cast_bfloat16 = amp_cast(%third)
    CHECK: %e = exp(%half))");
}

TEST(AmpConvertClasses, SourcesOfTheDefaultClassesMakeF32AndAreCast) {
  // As MXNet's convert_symbol: neutral (fp16) or fp32 (bf16) sources make f32, cast for
  // each low reader. Low tensors: 4 casts (w, zeros, half, third) and the 3 Dense outputs.
  for (DType t : {DType::bf16, DType::f16}) {
    ir::Graph g;
    EXPECT_EQ(convert_and_count(kSources, options(t), &g), (AmpCounts{7, 4, 3})) << ir::dtype_name(t);
    EXPECT_FILECHECK(ir::print_graph(g), R"(
      CHECK: %zeros = _zeros() {dtype=f32, shape=[2,8]} : f32[2,8]
      CHECK: %zeros_output_amp_cast_{{b?float16}} = amp_cast(%zeros))");
  }
  // A legacy begin state with a 0 extent, which its reader decides: the cast would hide the
  // reader, so the inferred shape is written into the source.
  ir::Graph g;
  convert_and_count(R"(graph {
    %data = var input : f32[2,8]
    %w = var param
    %zeros = _zeros() {shape=[0,8]}
    %sum = elemwise_add(%zeros, %data)
    %fc = FullyConnected(%zeros, %w) {num_hidden=8, no_bias=true}
    return %fc, %sum
  })",
                    options(DType::f16), &g);
  EXPECT_FILECHECK(ir::print_graph(g), R"(
    CHECK: %zeros = _zeros() {dtype=f32, shape=[2,8]} : f32[2,8]
    CHECK: amp_cast(%zeros) {dtype=f16})");
}

TEST(AmpConvertClasses, UntypedGraphIsInferredFirstAndBadGraphsFail) {
  ir::Graph g = ir::parse_graph(kBasicUse);
  EXPECT_EQ(engine::amp_convert(g, options(DType::bf16)), 6);
  ir::Graph bad = ir::parse_graph(R"(graph {
    %data = var input
    %r = relu(%data)
    return %r
  })");
  EXPECT_ERROR(engine::amp_convert(bad, options(DType::bf16)), "node 1 'r' (relu): the type of input 0 is unknown");
}

TEST(AmpConvertPipeline, StatsCountCastsNodesAndClasses) {
  engine::AmpStats stats;
  engine::convert_for_amp(ir::parse_graph(kBasicUse), options(DType::bf16), &stats);
  EXPECT_EQ(stats.casts_inserted, 6);
  EXPECT_EQ(stats.casts_removed, 0);
  EXPECT_EQ(stats.casts_final, 6);
  EXPECT_EQ(stats.lp16_nodes, 2);  // fc1, fc2
  EXPECT_EQ(stats.fp32_nodes, 1);  // reshape: MXNet's bf16 list has Reshape in FP32_FUNCS
  EXPECT_EQ(stats.params_offline, 0);
  EXPECT_EQ(stats.class_counts, (std::map<std::string, int>{{"lowp", 2}, {"fp32", 1}}));

  // A cast the user already had duplicates the one amp-convert adds; cast-fold keeps one.
  engine::AmpOptions o = options(DType::bf16);
  o.cast_params_offline = true;
  const ir::Graph g = engine::convert_for_amp(ir::parse_graph(R"(graph {
    %data = var input : f32[2,8]
    %w = var param
    %mine = amp_cast(%data) {dtype=bf16}
    %fc = FullyConnected(%data, %w) {num_hidden=8, no_bias=true}
    %e = exp(%fc)
    return %mine, %e
  })"), o, &stats);
  EXPECT_EQ(stats.casts_inserted, 2);  // data down, fc back up for exp
  EXPECT_EQ(stats.casts_removed, 1);
  EXPECT_EQ(stats.params_offline, 1);
  EXPECT_EQ(stats.lp16_nodes, 1);
  EXPECT_EQ(stats.fp32_nodes, 1);
  EXPECT_EQ(stats.class_counts, (std::map<std::string, int>{{"fp32", 1}, {"lowp", 1}, {"neutral", 1}}));
  EXPECT_TRUE(repeated_casts(g).empty());
}

TEST(AmpConvertPipeline, LayoutOptionRunsLayoutOptimize) {
  engine::AmpOptions o = options(DType::f16);
  o.layout = "nhwc";
  const ir::Graph g = engine::convert_for_amp(ir::parse_graph(R"(graph {
    %data = var input : f32[1,3,8,8]
    %w = var param : f32[4,3,3,3]
    %conv = Convolution(%data, %w) {kernel=[3,3], num_filter=4, no_bias=true}
    return %conv
  })"), o);
  // Casts do not care about layout: the transposes move through them to the graph's edges
  // (the fusion planner folds each into the cast beside it).
  EXPECT_FILECHECK(ir::print_graph(g), R"(
    CHECK: %data_NHWC = transpose(%data) {axes=[0,2,3,1]} : f32[1,8,8,3]
    CHECK: amp_cast(%data_NHWC) {dtype=f16} {{.*}}: f16[1,8,8,3]
    CHECK: %conv = Convolution({{.*}}layout="NHWC"{{.*}} : f16[1,6,6,4]
    CHECK-NEXT: amp_cast(%conv) {dtype=f32} {{.*}}: f32[1,6,6,4]
    CHECK-NEXT: transpose({{.*}}) {axes=[0,3,1,2]} : f32[1,4,6,6]
    CHECK-NEXT: return)");
  o.layout = "nchw4c";
  EXPECT_ERROR(engine::convert_for_amp(ir::parse_graph(R"(graph {
    %data = var input : f32[1,3,8,8]
    return %data
  })"), o), "layout 'nchw4c' is not supported");
}

// ---------------------------------------------------------------------------------------
// An LSTM unrolled over many steps: every step reads the same four weights, which must be
// cast once for the whole graph (MXNet #19019 re-cast them per step).

ir::Graph unrolled_lstm(int steps, int64_t batch, int64_t features, int64_t hidden) {
  ir::GraphBuilder b;
  const ir::ValueRef data = b.input("data", {DType::f32, {steps, batch, features}});
  ir::ValueRef h = b.input("begin_h", {DType::f32, {batch, hidden}});
  ir::ValueRef c = b.input("begin_c", {DType::f32, {batch, hidden}});
  const ir::ValueRef wi = b.param("i2h_weight"), bi = b.param("i2h_bias");
  const ir::ValueRef wh = b.param("h2h_weight"), bh = b.param("h2h_bias");
  const std::string gates_n = std::to_string(4 * hidden);
  const auto xs = b.op_multi("SliceChannel", {data},
                             {{"num_outputs", std::to_string(steps)}, {"axis", "0"}, {"squeeze_axis", "True"}}, "steps");
  for (int t = 0; t < steps; ++t) {
    const std::string s = std::to_string(t);
    const ir::ValueRef i2h = b.op("FullyConnected", {xs[t], wi, bi}, {{"num_hidden", gates_n}}, "i2h" + s);
    const ir::ValueRef h2h = b.op("FullyConnected", {h, wh, bh}, {{"num_hidden", gates_n}}, "h2h" + s);
    const ir::ValueRef gates = b.op("elemwise_add", {i2h, h2h}, {}, "gates" + s);
    const auto g = b.op_multi("SliceChannel", {gates}, {{"num_outputs", "4"}}, "slice" + s);
    const ir::ValueRef in = b.op("sigmoid", {g[0]}), forget = b.op("sigmoid", {g[1]});
    const ir::ValueRef cell = b.op("tanh", {g[2]}), out = b.op("sigmoid", {g[3]});
    c = b.op("elemwise_add", {b.op("elemwise_mul", {forget, c}), b.op("elemwise_mul", {in, cell})}, {}, "c" + s);
    h = b.op("elemwise_mul", {out, b.op("tanh", {c})}, {}, "h" + s);
  }
  b.output(h);
  b.output(c);
  return b.finish();
}

constexpr const char* kLstmWeights[] = {"i2h_weight", "i2h_bias", "h2h_weight", "h2h_bias"};

TEST(AmpConvertRecurrent, UnrolledLstmCastsEachWeightOnce) {
  constexpr int kSteps = 100;
  ir::Graph g = unrolled_lstm(kSteps, 2, 8, 8);
  engine::amp_convert(g, options(DType::bf16));
  EXPECT_TRUE(repeated_casts(g).empty());
  for (const char* w : kLstmWeights) {
    SCOPED_TRACE(w);
    const int32_t var = *g.find_var(w);
    std::vector<int32_t> readers;
    for (int32_t i = 0; i < static_cast<int32_t>(g.nodes.size()); ++i)
      for (ir::ValueRef in : g.nodes[i].inputs)
        if (in.node == var) readers.push_back(i);
    ASSERT_EQ(readers.size(), 1u);
    const ir::Node& cast = g.nodes[readers[0]];
    EXPECT_EQ(cast.op, "amp_cast");
    EXPECT_EQ(cast.outputs[0].dtype, DType::bf16);
    int fc_reads = 0;
    for (const ir::Node& n : g.nodes)
      for (ir::ValueRef in : n.inputs) fc_reads += in.node == readers[0] && n.op == "FullyConnected";
    EXPECT_EQ(fc_reads, kSteps);
  }
}

TEST(AmpConvertRecurrent, UnrolledLstmStoresWeightsLowOffline) {
  ir::Graph g = unrolled_lstm(100, 2, 8, 8);
  AmpOptions o = options(DType::f16);
  o.cast_params_offline = true;
  engine::amp_convert(g, o);
  for (const char* w : kLstmWeights) {
    EXPECT_EQ(var_type(g, w), DType::f16) << w;
    for (const ir::Node& n : g.nodes)
      for (ir::ValueRef in : n.inputs)
        if (in.node == *g.find_var(w)) {
          EXPECT_EQ(n.op, "FullyConnected") << w << " read by " << n.name;
        }
  }
}

TEST(AmpConvertRecurrent, UnrolledLstmStaysCloseToF32) {
  const ir::Graph f32 = unrolled_lstm(100, 2, 8, 8);
  const ir::Graph low = engine::convert_for_amp(f32, options(DType::bf16));
  const runtime::Bindings vars = runtime::random_bindings(f32, 11);
  const auto want = runtime::interpret(f32, vars);
  const auto got = runtime::interpret(low, vars);
  ASSERT_EQ(got.size(), 2u);
  // h is in (-1, 1) and c grows slowly; bf16 keeps 8 significant bits (2^-9 relative
  // rounding), and the cell state, read by widest ops next to an f32 input, stays f32.
  for (size_t o = 0; o < 2; ++o) {
    ASSERT_EQ(got[o].type(), want[o].type());
    for (int64_t i = 0; i < want[o].size(); ++i) EXPECT_NEAR(got[o].get_f64(i), want[o].get_f64(i), 0.03) << o << ":" << i;
  }
}

}  // namespace
}  // namespace ampfuse::testing
