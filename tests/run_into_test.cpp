// Executable::run_into (engine/execution/executor.h): results go straight into the caller's
// buffers, as a framework's output tensors need. Where the plan can compute an output in the
// caller's memory it does (no copy, no allocation); where it cannot (strided buffer, buffer
// overlapping an input, the same value twice, an output that is a variable) the result is
// copied in and counted. Every case is checked against run().
#include "engine/execution/executor.h"
#include "ir/exception.h"
#include "ir/text_format.h"
#include "ir/type_inference.h"
#include "runtime/device_api.h"
#include "runtime/interpreter.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace ampfuse::engine {
namespace {

using runtime::Tensor;

ir::Graph parse(const char* text) {
  ir::Graph g = ir::parse_graph(text);
  ir::infer_types(g);
  return g;
}

// Bit-for-bit equal element by element (strided buffers included).
void expect_same(const Tensor& want, const Tensor& got, const char* what) {
  ASSERT_EQ(want.type(), got.type()) << what;
  for (int64_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(want.get_f64(i), got.get_f64(i)) << what << ": element " << i;
}

// x -> exp -> *2 -> bf16 (one fused kernel), plus a reshape of a second output.
constexpr const char* kTwoOutputs = R"(graph {
  %x = var input : f32[7,33]
  %e = exp(%x)
  %m = _mul_scalar(%e) {scalar=2}
  %c = amp_cast(%m) {dtype=bf16}
  %s = sigmoid(%x)
  %r = Reshape(%s) {shape=[33,7]}
  return %c, %r
})";

TEST(RunInto, WritesTheCallersBuffersWithoutCopiesOrAllocations) {
  const ir::Graph g = parse(kTwoOutputs);
  runtime::CpuDevice device;
  ExecutorOptions opts;
  opts.device = &device;
  const Executable exe = Executable::compile(g, opts);
  const runtime::Bindings vars = runtime::random_bindings(g, 3);
  const std::vector<Tensor> want = exe.run(vars);

  std::vector<uint16_t> c_memory(7 * 33, 0xFFFF);
  std::vector<float> r_memory(33 * 7, -1.0f);
  std::vector<Tensor> into = {Tensor::wrap(c_memory.data(), want[0].type()),
                              Tensor::wrap(r_memory.data(), want[1].type())};
  RunStats rs;
  exe.run_into(vars, into, &rs);
  EXPECT_EQ(rs.output_copies, 0);
  expect_same(want[0], into[0], "bf16 output");
  expect_same(want[1], into[1], "reshaped output");
  EXPECT_NE(c_memory[0], 0xFFFF) << "written in the caller's memory";

  const int64_t tensors_before = runtime::tensor_buffer_allocations();
  const int64_t device_before = device.allocations();
  exe.run_into(vars, into, &rs);
  EXPECT_EQ(rs.allocations, 0);
  EXPECT_EQ(runtime::tensor_buffer_allocations(), tensors_before);
  EXPECT_EQ(device.allocations(), device_before);
  expect_same(want[0], into[0], "second run");
}

TEST(RunInto, StridedBufferGetsACopy) {
  const ir::Graph g = parse(kTwoOutputs);
  const Executable exe = Executable::compile(g);
  const runtime::Bindings vars = runtime::random_bindings(g, 4);
  const std::vector<Tensor> want = exe.run(vars);

  // Output 1 (33x7 f32) in a column-major buffer: element (i, j) at j*33 + i.
  std::vector<uint16_t> c_memory(7 * 33);
  std::vector<float> r_memory(33 * 7, -1.0f);
  const std::vector<int64_t> column_major = {1, 33};
  std::vector<Tensor> into = {Tensor::wrap(c_memory.data(), want[0].type()),
                              Tensor::wrap(r_memory.data(), want[1].type(), column_major)};
  RunStats rs;
  exe.run_into(vars, into, &rs);
  EXPECT_EQ(rs.output_copies, 1);
  expect_same(want[0], into[0], "dense output");
  expect_same(want[1], into[1], "strided output");
  EXPECT_EQ(r_memory[33], want[1].get_f64(1)) << "element (0,1) lies at 1*33";
}

// An output buffer that is also the input: kernels would read what they already wrote.
TEST(RunInto, OutputOverlappingAnInputIsComputedAsideAndCopied) {
  const ir::Graph g = parse(R"(graph {
    %x = var input : f32[4,64]
    %t = transpose(%x) {axes=[1,0]}
    %r = Reshape(%t) {shape=[4,64]}
    %y = _plus_scalar(%r) {scalar=1}
    return %y
  })");
  const Executable exe = Executable::compile(g);
  std::vector<float> memory(4 * 64);
  for (size_t i = 0; i < memory.size(); ++i) memory[i] = static_cast<float>(i);
  const ir::TensorType type{ir::DType::f32, {4, 64}};
  runtime::Bindings vars;
  vars["x"] = Tensor::wrap(memory.data(), type);
  const std::vector<Tensor> want = runtime::interpret(g, {{"x", vars["x"].clone()}});

  std::vector<Tensor> into = {Tensor::wrap(memory.data(), type)};
  RunStats rs;
  exe.run_into(vars, into, &rs);
  EXPECT_EQ(rs.output_copies, 1);
  expect_same(want[0], into[0], "in place of its input");
}

// The same value twice, and a variable passed through: computed once, copied where needed.
TEST(RunInto, RepeatedValuesAndVariablesAreCopied) {
  const ir::Graph g = parse(R"(graph {
    %x = var input : f32[5,3]
    %y = tanh(%x)
    return %y, %y, %x
  })");
  const Executable exe = Executable::compile(g);
  const runtime::Bindings vars = runtime::random_bindings(g, 5);
  const std::vector<Tensor> want = exe.run(vars);
  std::vector<Tensor> into;
  for (const Tensor& t : want) into.push_back(Tensor::zeros(t.type()));
  RunStats rs;
  exe.run_into(vars, into, &rs);
  EXPECT_EQ(rs.output_copies, 2) << "the second %y and %x";
  for (size_t i = 0; i < want.size(); ++i) expect_same(want[i], into[i], "output");
}

TEST(RunInto, BuffersOfTheWrongTypeOrCountAreRefused) {
  const ir::Graph g = parse(kTwoOutputs);
  const Executable exe = Executable::compile(g);
  const runtime::Bindings vars = runtime::random_bindings(g, 6);
  std::vector<Tensor> one = {Tensor(ir::TensorType{ir::DType::bf16, {7, 33}})};
  try {
    exe.run_into(vars, one);
    FAIL() << "one buffer for two outputs";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("1 output buffers given for a graph with 2 outputs"), std::string::npos) << e.what();
  }
  std::vector<Tensor> wrong = {Tensor(ir::TensorType{ir::DType::f32, {7, 33}}),
                               Tensor(ir::TensorType{ir::DType::f32, {33, 7}})};
  try {
    exe.run_into(vars, wrong);
    FAIL() << "f32 buffer for a bf16 output";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("output 0 (node 'c') is bf16[7,33], its buffer is f32[7,33]"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ampfuse::engine
