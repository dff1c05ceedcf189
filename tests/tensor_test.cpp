// runtime::Tensor over memory it does not own (Tensor::wrap): no copies in or out of the
// interpreter and the executor, the release callback exactly once, argument errors, and
// non-contiguous strides (element access and contiguous() only; dense data refused).
#include "engine/execution/executor.h"
#include "ir/builder.h"
#include "runtime/interpreter.h"
#include "runtime/tensor.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace ampfuse::runtime {
namespace {

using ir::DType;
using ir::ValueRef;

// y = 2x and the view x reshaped to [3,2], over x f32[2,3].
ir::Graph double_and_view() {
  ir::GraphBuilder b;
  const ValueRef x = b.input("x", {DType::f32, {2, 3}});
  b.output(b.op("_mul_scalar", {x}, {{"scalar", "2"}}));
  b.output(b.op("Reshape", {x}, {{"shape", "(3,2)"}}));
  return b.finish();
}

TEST(TensorWrap, RunsOnTheCallersMemoryWithoutACopy) {
  std::vector<float> x = {1, 2, 3, 4, 5, 6};
  const Tensor t = Tensor::wrap(x.data(), {DType::f32, {2, 3}});
  EXPECT_EQ(t.raw(), x.data());
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.capacity(), 6 * sizeof(float));
  // Written after wrapping: every run reads the vector itself.
  x[4] = 50;

  const ir::Graph g = double_and_view();
  const std::vector<Tensor> interpreted = interpret(g, {{"x", t}});
  const std::vector<Tensor> executed = engine::Executable::compile(g).run({{"x", t}});
  for (const std::vector<Tensor>& out : {interpreted, executed}) {
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0].get_f64(4), 100);
    EXPECT_EQ(out[0].get_f64(5), 12);
    EXPECT_EQ(out[1].get_f64(4), 50);
  }
  // The executor runs views as aliases: out comes the caller's memory again.
  EXPECT_EQ(executed[1].raw(), x.data());
  EXPECT_EQ(executed[1].shape(), (ir::Shape{3, 2}));
}

TEST(TensorWrap, ReleaseRunsOnceWhenTheLastSharingTensorIsGone) {
  std::vector<float> x(6, 1.0f);
  int released = 0;
  std::optional<Tensor> t = Tensor::wrap(x.data(), {DType::f32, {2, 3}}, [&] { ++released; });
  Tensor copy = *t;
  Tensor reshaped = t->reshaped({6});
  Tensor bytes = t->reinterpreted({DType::u8, {24}});
  std::vector<Tensor> interpreted = interpret(double_and_view(), {{"x", *t}});
  std::vector<Tensor> executed = engine::Executable::compile(double_and_view()).run({{"x", *t}});
  EXPECT_FALSE(t->sole_owner());

  t.reset();
  copy = Tensor();
  reshaped = Tensor();
  bytes = Tensor();
  interpreted.clear();
  EXPECT_EQ(released, 0);  // the executor's output view still holds the memory
  executed.clear();
  EXPECT_EQ(released, 1);
}

TEST(TensorWrap, WrappedMemoryIsNeverTheSoleOwnersToReuse) {
  std::vector<float> x(4);
  EXPECT_FALSE(Tensor::wrap(x.data(), {DType::f32, {4}}).sole_owner());
  EXPECT_TRUE(Tensor({DType::f32, {4}}).sole_owner());
}

TEST(TensorWrap, NoElementsNeedNoPointer) {
  int released = 0;
  {
    const Tensor t = Tensor::wrap(nullptr, {DType::f32, {0, 3}}, std::vector<int64_t>{7, 1}, [&] { ++released; });
    EXPECT_EQ(t.size(), 0);
    EXPECT_FALSE(t.empty_storage());
    EXPECT_TRUE(t.is_contiguous());
  }
  EXPECT_EQ(released, 1);
}

TEST(TensorWrap, InvalidArgumentsThrowWithoutRelease) {
  alignas(8) float data[8] = {};
  int released = 0;
  const auto count = [&] { ++released; };
  EXPECT_ERROR(Tensor::wrap(data, {DType::f32, {2, 3}}, std::vector<int64_t>{3}, count),
               "cannot wrap f32[2,3] with strides [3]: one stride per dimension needed");
  EXPECT_ERROR(Tensor::wrap(data, {DType::f32, {2, 3}}, std::vector<int64_t>{-3, 1}, count),
               "the stride of dimension 0 is negative");
  EXPECT_ERROR(Tensor::wrap(nullptr, {DType::f32, {2, 3}}, count), "f32[2,3] with strides [3,1]: the data pointer is null");
  EXPECT_ERROR(Tensor::wrap(reinterpret_cast<std::byte*>(data) + 2, {DType::f32, {2}}, count),
               "is not aligned to its 4-byte elements");
  EXPECT_ERROR(Tensor::wrap(data, {DType::f32, {2, -3}}, count), "negative");
  EXPECT_ERROR(Tensor::wrap(data, {DType::f32, {2, 3}}, std::vector<int64_t>{INT64_MAX / 2, 1}, count),
               "beyond the address space");
  EXPECT_EQ(released, 0);
}

TEST(TensorWrap, RowMajorStridesAreContiguousWhateverTheExtentOneStrides) {
  std::vector<float> x(6);
  // PyTorch gives [1,3] tensors strides like [3,1] or [1,1]: the same dense layout.
  const Tensor t = Tensor::wrap(x.data(), {DType::f32, {1, 2, 3}}, std::vector<int64_t>{1, 3, 1});
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.strides(), (std::vector<int64_t>{6, 3, 1}));
  EXPECT_EQ(t.raw(), x.data());
  EXPECT_EQ(t.contiguous().raw(), x.data());  // no copy
}

// The transpose of a row-major [2,3] buffer: a [3,2] tensor with strides [1,3].
TEST(TensorWrap, NonContiguousElementsReadAndWriteThroughTheStrides) {
  std::vector<float> x = {0, 1, 2, 10, 11, 12};
  Tensor t = Tensor::wrap(x.data(), {DType::f32, {3, 2}}, std::vector<int64_t>{1, 3});
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.strides(), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(t.capacity(), 6 * sizeof(float));
  std::vector<double> row_major;
  for (int64_t i = 0; i < t.size(); ++i) row_major.push_back(t.get_f64(i));
  EXPECT_EQ(row_major, (std::vector<double>{0, 10, 1, 11, 2, 12}));
  EXPECT_EQ(to_f64_vector(t), row_major);
  t.set_f64(3, -11);  // element [1,1]
  EXPECT_EQ(x[4], -11);
}

TEST(TensorWrap, NonContiguousTensorsAreMadeDenseExplicitly) {
  std::vector<uint16_t> x = {0, 1, 2, 10, 11, 12};  // bf16 bit patterns; the copy moves bits
  const Tensor t = Tensor::wrap(x.data(), {DType::bf16, {3, 2}}, std::vector<int64_t>{1, 3});
  const Tensor dense = t.contiguous();
  EXPECT_TRUE(dense.is_contiguous());
  EXPECT_NE(dense.raw(), x.data());
  const uint16_t* bits = dense.data<uint16_t>();
  EXPECT_EQ(std::vector<uint16_t>(bits, bits + 6), (std::vector<uint16_t>{0, 10, 1, 11, 2, 12}));
  EXPECT_EQ(to_f64_vector(t.clone()), to_f64_vector(dense));

  // Stride 0 repeats (a broadcast view): row [5,6,7] twice.
  std::vector<int32_t> row = {5, 6, 7};
  const Tensor rows = Tensor::wrap(row.data(), {DType::i32, {2, 3}}, std::vector<int64_t>{0, 1});
  EXPECT_FALSE(rows.is_contiguous());
  EXPECT_EQ(rows.capacity(), 3 * sizeof(int32_t));
  EXPECT_EQ(to_f64_vector(rows.contiguous()), (std::vector<double>{5, 6, 7, 5, 6, 7}));
}

TEST(TensorWrap, DenseDataOfANonContiguousTensorIsAnError) {
  std::vector<float> x(6);
  const Tensor t = Tensor::wrap(x.data(), {DType::f32, {3, 2}}, std::vector<int64_t>{1, 3});
  EXPECT_ERROR(t.raw(), "tensor f32[3,2] with strides [1,3] is not contiguous");
  EXPECT_ERROR(t.data<float>(), "pass contiguous()");
  EXPECT_ERROR(t.reshaped({6}), "not contiguous");
  EXPECT_ERROR(t.reinterpreted({DType::u8, {24}}), "not contiguous");

  ir::GraphBuilder b;
  b.output(b.op("_mul_scalar", {b.input("x", {DType::f32, {3, 2}})}, {{"scalar", "2"}}));
  const ir::Graph g = b.finish();
  const char* message = "variable 'x' is bound to a non-contiguous tensor (strides [1,3]); bind its contiguous()";
  EXPECT_ERROR(interpret(g, {{"x", t}}), message);
  EXPECT_ERROR(engine::Executable::compile(g).run({{"x", t}}), message);
  EXPECT_EQ(interpret(g, {{"x", t.contiguous()}}).at(0).size(), 6);
}

}  // namespace
}  // namespace ampfuse::runtime
