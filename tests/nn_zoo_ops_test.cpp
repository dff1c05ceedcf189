// The normalization, reduction, sorting, loss-head and linear-algebra ops of the model zoo
// (docs/ops.md): type inference and its refusals, AMP classes, and the interpreter against
// the outputs real MXNet 1.9.1 gives (tests/data/nn_zoo/gen_expected.py wrote them), in f32
// and from f16 / bf16 inputs, alone and in an imported MXNet graph.
#include "engine/execution/executor.h"
#include "ir/builder.h"
#include "ir/lowp.h"
#include "ir/mxnet_json.h"
#include "ir/op_registry.h"
#include "runtime/interpreter.h"
#include "runtime/tensor.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>

namespace ampfuse {
namespace {

using ir::DType;
using ir::Shape;
using ir::TensorType;
using runtime::Tensor;
using Attrs = std::map<std::string, std::string>;

struct NamedTensor {
  DType dtype;
  Shape shape;
  std::vector<double> values;
};

struct ZooCase {
  const char* name;
  const char* op;
  Attrs attrs;
  std::vector<NamedTensor> inputs;
  std::vector<NamedTensor> outputs;  // as MXNet computed them
  double tol;
};

const std::vector<ZooCase>& cases() {
  static const std::vector<ZooCase> all = {
#include "tests/data/nn_zoo/expected.inc"
  };
  return all;
}

Tensor make_tensor(const NamedTensor& t, DType dtype) {
  Tensor out(TensorType{dtype, t.shape});
  for (int64_t i = 0; i < out.size(); ++i) out.set_f64(i, t.values[static_cast<size_t>(i)]);
  return out;
}

// Runs one `op` node on `inputs` (converted to `dtype`) with the interpreter.
std::vector<Tensor> run_op(const ZooCase& c, DType dtype) {
  ir::GraphBuilder b;
  std::vector<ir::ValueRef> refs;
  runtime::Bindings vars;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const std::string name = fmt::format("in{}", i);
    refs.push_back(b.input(name, TensorType{dtype, c.inputs[i].shape}));
    vars.emplace(name, make_tensor(c.inputs[i], dtype));
  }
  for (ir::ValueRef r : b.op_multi(c.op, refs, c.attrs, "node")) b.output(r);
  return runtime::interpret(b.finish(), vars);
}

// Relative spacing of the significands: 2^-23, 2^-10, 2^-7.
double ulp_fraction(DType t) { return t == DType::f16 ? 0x1p-10 : t == DType::bf16 ? 0x1p-7 : 0x1p-23; }

// Each output against MXNet's: the same dtype (`lowp` replacing f32 when the op keeps its
// data's dtype) and shape, NaN where MXNet has NaN, values within the case's tolerance plus,
// for low-precision outputs, one unit in the last place of that type.
void expect_outputs(const ZooCase& c, const std::vector<Tensor>& got, std::optional<DType> lowp) {
  ASSERT_EQ(got.size(), c.outputs.size());
  for (size_t k = 0; k < got.size(); ++k) {
    SCOPED_TRACE(fmt::format("output {}", k));
    const NamedTensor& want = c.outputs[k];
    EXPECT_EQ(got[k].shape(), want.shape);
    const DType dtype = got[k].dtype();
    EXPECT_TRUE(dtype == want.dtype || (lowp && want.dtype == DType::f32 && dtype == *lowp)) << ir::dtype_name(dtype);
    if (got[k].shape() != want.shape) continue;
    const std::vector<double> values = runtime::to_f64_vector(got[k]);
    for (size_t i = 0; i < values.size(); ++i) {
      if (std::isnan(want.values[i])) {
        EXPECT_TRUE(std::isnan(values[i])) << "element " << i << " is " << values[i] << ", MXNet gives NaN";
        continue;
      }
      const double magnitude = std::abs(want.values[i]);
      const double tol = c.tol * std::max(1.0, magnitude) + ulp_fraction(dtype) * magnitude;
      EXPECT_NEAR(values[i], want.values[i], tol) << "element " << i;
    }
  }
}

TEST(NnZooOps, InterpreterMatchesMxnet) {
  for (const ZooCase& c : cases()) {
    SCOPED_TRACE(fmt::format("case {} ({})", c.name, c.op));
    expect_outputs(c, run_op(c, DType::f32), std::nullopt);
  }
}

// The inputs are exact in f16 and bf16, so an op that computes in f32 and rounds its
// outputs once gives MXNet's f32 results rounded to the low-precision type. Index outputs
// (topk, argsort: dtype f32 unless given) stay exact; argmax returns the data's dtype.
TEST(NnZooOps, LowPrecisionInputsComputeInF32AndRoundOnce) {
  for (DType lowp : {DType::f16, DType::bf16})
    for (const ZooCase& c : cases()) {
      SCOPED_TRACE(fmt::format("case {} ({}) in {}", c.name, c.op, ir::dtype_name(lowp)));
      expect_outputs(c, run_op(c, lowp), lowp);
    }
}

// Rows longer than 16 with a NaN: MXNet's std::sort has no defined order (nor bounds) there;
// these kernels put NaNs after the numbers, which keep their order.
TEST(NnZooOps, LongRowsWithNaNSortNaNsLast) {
  std::vector<double> row(20);
  for (size_t i = 0; i < row.size(); ++i) row[i] = static_cast<double>((i * 7) % 20);
  row[3] = row[11] = NAN;  // replaces 1 and 17
  const NamedTensor data{DType::f32, {1, 20}, row};
  for (const char* ascend : {"True", "False"}) {
    const ZooCase c{"nan row", "sort", {{"is_ascend", ascend}}, {data}, {}, 0};
    const std::vector<double> got = runtime::to_f64_vector(run_op(c, DType::f32).at(0));
    std::vector<double> numbers;
    for (double v : row)
      if (!std::isnan(v)) numbers.push_back(v);
    std::sort(numbers.begin(), numbers.end());
    if (std::string(ascend) == "False") std::reverse(numbers.begin(), numbers.end());
    for (size_t i = 0; i < numbers.size(); ++i) EXPECT_EQ(got[i], numbers[i]) << ascend << " element " << i;
    EXPECT_TRUE(std::isnan(got[18]) && std::isnan(got[19])) << ascend;
  }
}

// ---- type inference -----------------------------------------------------------------

struct Inferred {
  std::vector<TensorType> inputs, outputs;
};

// One `op` node on variables of `types` (nullopt: a param without a type), inferred.
Inferred infer(const std::string& op, const std::vector<std::optional<TensorType>>& types, const Attrs& attrs) {
  ir::GraphBuilder b;
  std::vector<ir::ValueRef> refs;
  for (size_t i = 0; i < types.size(); ++i)
    refs.push_back(types[i] ? b.input(fmt::format("in{}", i), *types[i]) : b.param(fmt::format("in{}", i)));
  for (ir::ValueRef r : b.op_multi(op, refs, attrs, "node")) b.output(r);
  const ir::Graph g = b.finish();
  Inferred r;
  for (size_t i = 0; i < types.size(); ++i) r.inputs.push_back(g.nodes[i].outputs.at(0));
  r.outputs = g.nodes.back().outputs;
  return r;
}

TensorType f32(Shape s) { return {DType::f32, std::move(s)}; }
TensorType f16(Shape s) { return {DType::f16, std::move(s)}; }

TEST(NnZooOpsInfer, OutputTypesFollowMxnet) {
  // topk: values in the data's dtype, indices in `dtype` (f32 by default), mask as the data.
  const Inferred both = infer("topk", {f16({2, 7})}, {{"k", "3"}, {"ret_typ", "both"}});
  EXPECT_EQ(both.outputs, (std::vector<TensorType>{f16({2, 3}), f32({2, 3})}));
  EXPECT_EQ(infer("topk", {f16({2, 7})}, {{"k", "3"}, {"ret_typ", "mask"}}).outputs[0], f16({2, 7}));
  EXPECT_EQ(infer("topk", {f32({2, 7})}, {{"k", "3"}, {"axis", "None"}, {"dtype", "int64"}}).outputs[0],
            (TensorType{DType::i64, {3}}));
  EXPECT_EQ(infer("argsort", {f16({4, 3})}, {{"axis", "0"}}).outputs[0], f32({4, 3}));
  EXPECT_EQ(infer("sort", {f16({4, 3})}, {{"axis", "None"}}).outputs[0], f16({12}));
  // argmax keeps the data's dtype, as MXNet does.
  EXPECT_EQ(infer("argmax", {f16({4, 3})}, {{"axis", "1"}}).outputs[0], f16({4}));
  EXPECT_EQ(infer("argmin", {f32({4, 3})}, {{"keepdims", "True"}}).outputs[0], f32({1, 1}));
  EXPECT_EQ(infer("argmax_channel", {f32({2, 3, 5})}, {}).outputs[0], f32({2, 5}));
  EXPECT_EQ(infer("norm", {f16({2, 3, 4})}, {{"axis", "(0, 2)"}, {"out_dtype", "float32"}}).outputs[0], f32({3}));
  EXPECT_EQ(infer("nansum", {f32({2, 3, 4})}, {{"axis", "1"}, {"exclude", "True"}}).outputs[0], f32({3}));
  // Parameters without a type get theirs from the data: GroupNorm's are per group.
  Inferred gn = infer("GroupNorm", {f32({2, 6, 5}), std::nullopt, std::nullopt},
                      {{"num_groups", "3"}, {"output_mean_var", "True"}});
  EXPECT_EQ(gn.inputs[1], f32({3}));
  EXPECT_EQ(gn.outputs, (std::vector<TensorType>{f32({2, 6, 5}), f32({2, 3}), f32({2, 3})}));
  EXPECT_EQ(infer("InstanceNorm", {f32({2, 6, 5}), std::nullopt, std::nullopt}, {}).inputs[2], f32({6}));
  // A regression output's label defaults to (N,) for (N, 1) data, else the data's shape.
  EXPECT_EQ(infer("LinearRegressionOutput", {f32({4, 1}), std::nullopt}, {}).inputs[1], f32({4}));
  EXPECT_EQ(infer("MAERegressionOutput", {f32({4, 2}), std::nullopt}, {}).inputs[1], f32({4, 2}));
  EXPECT_EQ(infer("_linalg_gemm2", {f32({2, 3, 5}), f32({2, 4, 5})}, {{"transpose_b", "True"}}).outputs[0],
            f32({2, 3, 4}));
  EXPECT_EQ(infer("linalg_gemm", {f32({3, 2}), f32({3, 4}), f32({2, 4})}, {{"transpose_a", "True"}}).outputs[0],
            f32({2, 4}));
  EXPECT_EQ(infer("make_loss", {f16({3})}, {}).outputs[0], f16({3}));
}

TEST(NnZooOpsInfer, RefusalsNameTheAttribute) {
  EXPECT_ERROR(infer("topk", {f32({2, 4})}, {{"k", "5"}}), "k=5 is more than the 4 elements along axis 1");
  EXPECT_ERROR(infer("topk", {f32({2, 4})}, {{"k", "9"}, {"axis", "None"}}),
               "k=9 is more than the 8 elements of the flattened data");
  EXPECT_ERROR(infer("topk", {f32({2, 4})}, {{"ret_typ", "values"}}), "ret_typ");
  EXPECT_ERROR(infer("topk", {f32({2, 4})}, {{"axis", "2"}}), "axis=2 is out of range");
  EXPECT_ERROR(infer("sort", {f32({2, 4})}, {{"axis", "last"}}), "axis='last' is neither an integer nor None");
  EXPECT_ERROR(infer("argsort", {f32({2, 4})}, {{"dtype", "int8"}}), "dtype=i8 cannot hold the indices");
  EXPECT_ERROR(infer("argmax", {f32({2, 4})}, {{"axis", "-3"}}), "axis=-3 is out of range");
  EXPECT_ERROR(infer("argmax_channel", {f32({4})}, {}), "channel axis");
  EXPECT_ERROR(infer("argmax", {f32({3, 0})}, {{"axis", "1"}}), "argmax of the data [3,0] has no element to pick");
  EXPECT_ERROR(infer("argmin", {f32({0, 2})}, {}), "argmin of the data [0,2] has no element");
  EXPECT_ERROR(infer("norm", {f32({2, 4})}, {{"ord", "3"}}), "ord=3 is not supported");
  EXPECT_ERROR(infer("norm", {f32({2, 4})}, {{"out_dtype", "int32"}}), "out_dtype=i32");
  EXPECT_ERROR(infer("norm", {f32({2, 4})}, {{"axis", "(1, 1)"}}), "names dim 1 twice");
  EXPECT_ERROR(infer("nansum", {f32({2, 4})}, {{"axis", "5"}}), "axis");
  EXPECT_ERROR(infer("GroupNorm", {f32({2, 4, 3}), std::nullopt, std::nullopt}, {{"num_groups", "3"}}),
               "num_groups=3 does not divide the 4 channels");
  EXPECT_ERROR(infer("GroupNorm", {f32({2, 4, 3}), f32({4}), f32({4})}, {{"num_groups", "2"}}),
               "input 1 (gamma) has shape [4] but [2] is needed");
  EXPECT_ERROR(infer("InstanceNorm", {f32({2, 4}), std::nullopt, std::nullopt}, {}), "needs rank 3 or more");
  EXPECT_ERROR(infer("L2Normalization", {f32({2, 4})}, {{"mode", "spatial"}}), "mode=spatial needs rank 3");
  EXPECT_ERROR(infer("L2Normalization", {f32({2, 4})}, {{"mode", "pixel"}}), "mode");
  EXPECT_ERROR(infer("LRN", {f32({2, 4, 3})}, {{"nsize", "3"}}), "needs rank 4");
  EXPECT_ERROR(infer("LRN", {f32({1, 2, 4, 3})}, {}), "nsize");
  EXPECT_ERROR(infer("LRN", {f32({1, 2, 4, 3})}, {{"nsize", "0"}}), "nsize=0 must be at least 1");
  EXPECT_ERROR(infer("SoftmaxActivation", {f32({2, 4})}, {{"mode", "channel"}}), "mode=channel needs data of rank 3");
  EXPECT_ERROR(infer("softmin", {f32({2, 4})}, {{"axis", "2"}}), "axis=2 is out of range");
  EXPECT_ERROR(infer("LinearRegressionOutput", {f32({4, 2}), f32({2, 4})}, {}), "input 1 (label) has shape [2,4]");
  EXPECT_ERROR(infer("_linalg_gemm2", {f32({2, 3}), f32({4, 5})}, {}), "has 3 columns but op(B)");
  EXPECT_ERROR(infer("_linalg_gemm2", {f32({2, 2, 3}), f32({3, 3, 4})}, {}), "same batch extents");
  EXPECT_ERROR(infer("_linalg_gemm2", {f32({2, 3}), f32({3, 4})}, {{"axis", "-3"}}), "axis=-3 is not supported");
  EXPECT_ERROR(infer("_linalg_gemm", {f32({2, 3}), f32({3, 4}), f32({4, 2})}, {}), "input 2 (C) has shape [4,2]");
}

// MXNet 1.9.1's lists per target (contrib/amp/lists/symbol_fp16.py, symbol_bf16.py).
TEST(NnZooOpsInfer, AmpClassesFromMxnetLists) {
  const ir::OpRegistry& r = ir::OpRegistry::global();
  const auto cls = [&](const char* op, DType target) { return r.get(op).amp_class(target); };
  for (const char* op : {"softmin", "SoftmaxActivation", "norm", "nansum", "nanprod", "topk", "argsort",
                         "InstanceNorm", "L2Normalization", "GroupNorm", "LinearRegressionOutput",
                         "LogisticRegressionOutput", "MAERegressionOutput", "MakeLoss", "_linalg_gemm2",
                         "_linalg_gemm"})
    for (DType t : {DType::f16, DType::bf16}) EXPECT_EQ(cls(op, t), ir::AmpClass::fp32) << op;
  for (const char* op : {"argmax", "argmin", "argmax_channel", "sort"}) {
    EXPECT_EQ(cls(op, DType::f16), ir::AmpClass::neutral) << op;  // FP16_FP32_FUNCS
    EXPECT_EQ(cls(op, DType::bf16), ir::AmpClass::fp32) << op;
  }
  EXPECT_EQ(cls("LRN", DType::f16), ir::AmpClass::fp32);
  EXPECT_EQ(cls("LRN", DType::bf16), ir::AmpClass::neutral);  // BF16_FP32_FUNCS
  // The loss heads' forward is elementwise: they fuse.
  EXPECT_TRUE(r.get("LogisticRegressionOutput").fusable);
  EXPECT_TRUE(r.get("MakeLoss").has_recipe({}));
}

// ---- an MXNet graph -------------------------------------------------------------------

#include "tests/data/nn_zoo/graph_expected.inc"

TEST(NnZooOps, ImportedMxnetGraphMatchesMxnet) {
  ir::MxnetImportOptions opts;
  opts.input_shapes = {{"data", kGraphInputs[0].second.shape}};
  const ir::Graph g = ir::load_mxnet_json_file(std::string(AMPFUSE_TESTDATA_DIR) + "/mxnet/nn_zoo_ops.json", opts);
  runtime::Bindings vars;
  for (const auto& [name, t] : kGraphInputs) vars.emplace(name, make_tensor(t, DType::f32));
  const ZooCase whole{"graph", "", {}, {}, kGraphOutputs, 1e-5};
  expect_outputs(whole, runtime::interpret(g, vars), std::nullopt);
  // Exported as MXNet JSON and imported again, the attributes (topk's string axis, norm's
  // None axis) come back and so do the values.
  const ir::Graph again = ir::import_mxnet_json(ir::export_mxnet_json(g), "exported.json");
  expect_outputs(whole, runtime::interpret(again, vars), std::nullopt);
}

// The loss heads fuse with the elementwise ops around them into one kernel, a (N,) label
// against (N, 1) data included, and give the interpreter's values (within a few f32 ulps:
// the fused exp of the sigmoid is within 1 ulp, codegen/vector_math.h).
TEST(NnZooOps, LossHeadsFuseIntoOneKernel) {
  ir::GraphBuilder b;
  const ir::ValueRef x = b.input("x", f32({6, 1}));
  const ir::ValueRef label = b.input("label", f32({6}));
  const ir::ValueRef r = b.op("Activation", {x}, {{"act_type", "relu"}});
  const ir::ValueRef head = b.op("LogisticRegressionOutput", {r, label});
  b.output(b.op("MakeLoss", {b.op("LinearRegressionOutput", {head, label})}));
  const ir::Graph g = b.finish();
  const engine::Executable exe = engine::Executable::compile(g);
  EXPECT_EQ(exe.compile_stats().kernels, 1);
  EXPECT_EQ(exe.compile_stats().fused_nodes, 4);
  const runtime::Bindings vars = runtime::random_bindings(g, 3);
  const std::vector<Tensor> want = runtime::interpret(g, vars), got = exe.run(vars);
  ASSERT_EQ(got.size(), 1u);
  for (int64_t i = 0; i < want[0].size(); ++i)
    EXPECT_NEAR(got[0].get_f64(i), want[0].get_f64(i), 4 * 0x1p-23 * std::abs(want[0].get_f64(i))) << "element " << i;
}

// Converted for bf16 AMP, the imported graph keeps every one of these ops in f32: nine are
// fp32-class for bf16 (Flatten too, as MXNet's bf16 list says), LRN (bf16-neutral) follows
// its f32 input. So the executor still
// gives MXNet's f32 results.
TEST(NnZooOps, ImportedGraphUnderAmpRunsInTheExecutor) {
  ir::MxnetImportOptions opts;
  opts.input_shapes = {{"data", kGraphInputs[0].second.shape}};
  const ir::Graph g = ir::load_mxnet_json_file(std::string(AMPFUSE_TESTDATA_DIR) + "/mxnet/nn_zoo_ops.json", opts);
  runtime::Bindings vars;
  for (const auto& [name, t] : kGraphInputs) vars.emplace(name, make_tensor(t, DType::f32));
  engine::ExecutorOptions exec;
  exec.amp = engine::AmpOptions{};
  const engine::Executable exe = engine::Executable::compile(g, exec);
  ASSERT_TRUE(exe.compile_stats().amp);
  EXPECT_EQ(exe.compile_stats().amp->lp16_nodes, 0);
  EXPECT_EQ(exe.compile_stats().amp->class_counts, (std::map<std::string, int>{{"fp32", 9}, {"neutral", 1}}));
  const ZooCase whole{"graph under AMP", "", {}, {}, kGraphOutputs, 1e-5};
  expect_outputs(whole, exe.run(vars), std::nullopt);
}

}  // namespace
}  // namespace ampfuse
