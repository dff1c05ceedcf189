// Generated CPU kernels as a whole: the C8 chain at every size class, broadcast, transposed
// and scalar operands, the streaming loop, int64 offsets, parameters, several outputs and
// the non-finite flag. Expected values come from the reference evaluator or by hand.
#include "codegen_test_util.h"

#include <sys/mman.h>

namespace ampfuse::testing {
namespace {

const std::vector<int64_t> kSizes = {0, 1, 7, 31, 257, 1009, (1 << 20) + 3};

// docs/design.md's C8 chain: a=f32(x); b=f32(y); c=a*b; d=c+0.5; e=max(d,0); f=e*1.5; g=f-a.
ir::ScalarProgram c8_body() {
  ScalarBuilder b(2);
  const auto a = b.input(0), y = b.input(1);
  const auto c = b.mul(a, y);
  const auto d = b.add(c, b.constant(0.5));
  const auto e = b.max(d, b.constant(0));
  const auto f = b.mul(e, b.constant(1.5));
  return b.finish({b.sub(f, a)});
}

ir::ScalarProgram add_body() {
  ScalarBuilder b(2);
  return b.finish({b.add(b.input(0), b.input(1))});
}

TEST(CodegenKernel, C8ChainMatchesReferenceBitsAtEverySize) {
  runtime::KernelCache cache;
  for (int64_t n : kSizes) {
    const KernelSpec spec = dense_spec("c8", c8_body(), {DType::bf16, DType::bf16}, {DType::bf16}, {n});
    const Tensor x = random_tensor(DType::bf16, {n}, 1), y = random_tensor(DType::bf16, {n}, 2);
    EXPECT_TRUE(same_bits(run_jit(cache, spec, {&x, &y}).outputs[0], run_reference(spec, {&x, &y})[0])) << "n = " << n;
  }
  EXPECT_EQ(cache.stats().compilations, 1);
}

// Calls a C8 kernel over [begin, end) ranges that start off a 64-element boundary with
// args->streaming on: every element of the range right, none outside written.
void expect_ranges_with_streaming_on(const runtime::CompiledKernel& kernel) {
  const int64_t n = 5000;
  const KernelSpec spec = dense_spec("c8f32", c8_body(), {DType::f32, DType::f32}, {DType::f32}, {n});
  const Tensor x = random_tensor(DType::f32, {n}, 3), y = random_tensor(DType::f32, {n}, 4);
  const Tensor want = run_reference(spec, {&x, &y})[0];
  for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, n}, {5, n}, {70, 4100}, {3, 9}, {64, 128}}) {
    Tensor out = Tensor::zeros({DType::f32, {n}});
    void* data[] = {const_cast<void*>(x.raw()), const_cast<void*>(y.raw()), out.raw()};
    const int64_t shape[] = {n}, strides[] = {1, 1, 1};
    const codegen::KernelArgs args{data, shape, strides, nullptr, nullptr, 1};
    kernel.fn(begin, end, &args);
    for (int64_t i = 0; i < n; ++i) {
      if (i >= begin && i < end)
        ASSERT_TRUE(same_element(out, want, i)) << "range [" << begin << ", " << end << ") element " << i;
      else
        ASSERT_EQ(out.data<float>()[i], 0.0f) << "range [" << begin << ", " << end << ") wrote element " << i;
    }
  }
}

TEST(CodegenKernel, StreamingLoopMatchesReference) {
  // The launcher takes the streaming loop only for outputs past 32 MiB, and only the
  // kernels of such specs have one: called directly, with it on.
  runtime::KernelCache cache;
  const KernelSpec spec = dense_spec("c8f32", c8_body(), {DType::f32, DType::f32}, {DType::f32}, {5000});
  expect_ranges_with_streaming_on(*cache.get(streaming_sized(spec)));
}

TEST(CodegenKernel, KernelWithoutStreamingLoopIgnoresTheField) {
  // A small spec's kernel has no streaming loop; args->streaming set anyway (the
  // multi-tensor launcher sets it per group) must still run the plain one.
  runtime::KernelCache cache;
  const KernelSpec spec = dense_spec("c8f32", c8_body(), {DType::f32, DType::f32}, {DType::f32}, {5000});
  ASSERT_FALSE(codegen::signature(spec).streams);
  expect_ranges_with_streaming_on(*cache.get(spec));
}

TEST(CodegenKernel, BroadcastOperandsMatchReference) {
  // A per-channel bias [1,C,1,1], a row [W], a column [H,1] and a scalar over [N,C,H,W].
  runtime::KernelCache cache;
  const Shape shape = {3, 7, 5, 11};
  struct Case {
    Shape operand;
    std::vector<int64_t> strides;
  };
  const std::vector<Case> cases = {
      {{1, 7, 1, 1}, {0, 1, 0, 0}}, {{11}, {0, 0, 0, 1}}, {{5, 1}, {0, 0, 1, 0}}, {{}, {0, 0, 0, 0}}};
  for (const Case& c : cases) {
    KernelSpec spec = dense_spec("bias", add_body(), {DType::f32, DType::bf16}, {DType::f16}, shape);
    spec.inputs[1].strides = c.strides;
    const Tensor x = random_tensor(DType::f32, shape, 5), b = random_tensor(DType::bf16, c.operand, 6);
    EXPECT_TRUE(same_bits(run_jit(cache, spec, {&x, &b}).outputs[0], run_reference(spec, {&x, &b})[0]))
        << "operand " << ir::shape_str(c.operand);
  }
}

// The hand-written meaning of a cast + NCHW -> NHWC transpose.
Tensor nhwc_bf16(const Tensor& x) {
  const Shape& s = x.shape();
  Tensor y({DType::bf16, {s[0], s[2], s[3], s[1]}});
  int64_t i = 0;
  for (int64_t n = 0; n < s[0]; ++n)
    for (int64_t h = 0; h < s[2]; ++h)
      for (int64_t w = 0; w < s[3]; ++w)
        for (int64_t c = 0; c < s[1]; ++c)
          y.data<uint16_t>()[i++] = ir::f32_to_bf16_bits(x.data<float>()[((n * s[1] + c) * s[2] + h) * s[3] + w]);
  return y;
}

KernelSpec nchw_to_nhwc_spec(const Shape& nchw) {
  const int64_t c = nchw[1], h = nchw[2], w = nchw[3];
  ScalarBuilder b(1);
  KernelSpec spec;
  spec.name = "to_nhwc";
  spec.shape = {nchw[0], h, w, c};
  spec.inputs = {{"x", DType::f32, {c * h * w, w, 1, h * w}}};
  spec.outputs = {{"y", DType::bf16, codegen::row_major_strides(spec.shape)}};
  spec.body = b.finish({b.input(0)});
  return spec;
}

TEST(CodegenKernel, TransposedInputMatchesHandComputedResult) {
  runtime::KernelCache cache;
  for (const Shape& nchw : std::vector<Shape>{{2, 3, 4, 5}, {1, 64, 7, 7}, {3, 1, 13, 17}, {2, 5, 1, 1}}) {
    const Tensor x = random_tensor(DType::f32, nchw, 7);
    const KernelSpec spec = nchw_to_nhwc_spec(nchw);
    EXPECT_TRUE(same_bits(run_jit(cache, spec, {&x}).outputs[0], nhwc_bf16(x))) << ir::shape_str(nchw);
  }
  // Two strided kernels, C = 3 (narrow-column tiles) and C = 64 (square: codegen::TileShape);
  // with C = 1 or H = W = 1 the transpose is a plain copy and takes the flat kernel instead.
  EXPECT_EQ(cache.stats().compilations, 3);
}

TEST(CodegenKernel, TransposeSlabsAndPartialRowsOverAnyRange) {
  // Whole slabs ([W, C] planes) take the interchanged loops, the partial ones before and
  // after take rows: ranges starting and ending inside slabs must give the same elements.
  runtime::KernelCache cache;
  const Shape nchw = {3, 5, 4, 7};
  const int64_t n = 3 * 5 * 4 * 7;
  const KernelSpec spec = nchw_to_nhwc_spec(nchw);
  const Tensor x = random_tensor(DType::f32, nchw, 14);
  const Tensor want = nhwc_bf16(x);
  const auto kernel = cache.get(spec);
  for (auto [begin, end] : std::vector<std::pair<int64_t, int64_t>>{
           {0, n}, {1, n - 1}, {34, 36}, {35, 70}, {10, 300}, {69, 71}, {140, 141}, {0, 35}}) {
    Tensor out = Tensor::zeros({DType::bf16, spec.shape});
    void* data[] = {const_cast<void*>(x.raw()), out.raw()};
    std::vector<int64_t> strides = spec.inputs[0].strides;
    strides.insert(strides.end(), spec.outputs[0].strides.begin(), spec.outputs[0].strides.end());
    const codegen::KernelArgs args{data, spec.shape.data(), strides.data(), nullptr, nullptr, 0};
    kernel->fn(begin, end, &args);
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t expected = i >= begin && i < end ? want.data<uint16_t>()[i] : 0;
      ASSERT_EQ(out.data<uint16_t>()[i], expected) << "range [" << begin << ", " << end << ") element " << i;
    }
  }
}

TEST(CodegenKernel, TransposedOutputMatchesHandComputedResult) {
  // Iterate in the input's order and scatter into the NHWC output.
  runtime::KernelCache cache;
  const int64_t N = 2, C = 3, H = 5, W = 7;
  KernelSpec spec;
  spec.name = "scatter_nhwc";
  spec.shape = {N, C, H, W};
  spec.inputs = {{"x", DType::f32, codegen::row_major_strides(spec.shape)}};
  spec.outputs = {{"y", DType::bf16, {H * W * C, 1, W * C, C}}};
  ScalarBuilder b(1);
  spec.body = b.finish({b.input(0)});
  const Tensor x = random_tensor(DType::f32, {N, C, H, W}, 8);
  const JitRun r = run_jit(cache, spec, {&x}, {}, {{N, H, W, C}});
  EXPECT_TRUE(same_bits(r.outputs[0], nhwc_bf16(x)));
}

TEST(CodegenKernel, StridedPathAtEverySize) {
  // out[i, j] = x[j, i] * 2 for x of shape [2, n]: a transposed read whose rows have length 2.
  runtime::KernelCache cache;
  int64_t compilations_before_7 = 0;
  for (int64_t n : kSizes) {
    if (n == 7) compilations_before_7 = cache.stats().compilations;
    KernelSpec spec;
    spec.name = "transpose2";
    spec.shape = {n, 2};
    spec.inputs = {{"x", DType::f16, {1, n}}};
    spec.outputs = {{"y", DType::f32, {2, 1}}};
    ScalarBuilder b(1);
    spec.body = b.finish({b.mul(b.input(0), b.constant(2))});
    const Tensor x = random_tensor(DType::f16, {2, n}, 9);
    const Tensor y = run_jit(cache, spec, {&x}).outputs[0];
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < 2; ++j) {
        const float want = ir::f16_bits_to_f32(x.data<uint16_t>()[j * n + i]) * 2.0f;
        const float got = y.data<float>()[i * 2 + j];
        bad += !(got == want || (std::isnan(got) && std::isnan(want)));
      }
    EXPECT_EQ(bad, 0) << "n = " << n;
  }
  // n = 1 is a contiguous copy (a flat kernel); from 7 on, one strided kernel serves all.
  EXPECT_EQ(cache.stats().compilations, compilations_before_7 + 1);
}

TEST(CodegenKernel, Int64OffsetsReachPast2To31) {
  // An input whose rows lie 2^31 + 64 bytes apart: reserved address space, only two
  // pages touched. int32 offsets would wrap to a negative address.
  const int64_t row = (int64_t{1} << 31) + 64;
  const size_t bytes = static_cast<size_t>(2 * row);
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) GTEST_SKIP() << "cannot reserve 4 GiB of address space";
  auto* base = static_cast<uint8_t*>(mem);
  for (int j = 0; j < 3; ++j) base[j] = static_cast<uint8_t>(10 + j), base[row + j] = static_cast<uint8_t>(200 + j);

  KernelSpec spec;
  spec.name = "far_rows";
  spec.shape = {2, 3};
  spec.inputs = {{"x", DType::u8, {row, 1}}};
  spec.outputs = {{"y", DType::f32, {3, 1}}};
  spec.compute = DType::f64;
  ScalarBuilder b(1);
  spec.body = b.finish({b.add(b.input(0), b.constant(0.5))});
  ASSERT_TRUE(codegen::signature(spec).wide_index);
  runtime::KernelCache cache;
  Tensor y = Tensor::zeros({DType::f32, {2, 3}});
  void* data[] = {mem, y.raw()};
  runtime::run_kernel(*cache.get(spec), spec, data);
  munmap(mem, bytes);
  const float want[] = {10.5f, 11.5f, 12.5f, 200.5f, 201.5f, 202.5f};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(y.data<float>()[i], want[i]) << "element " << i;
}

TEST(CodegenKernel, ParametersChangeWithoutRecompiling) {
  // clip(x, lo, hi) with lo and hi as run-time parameters.
  ScalarBuilder b(3);
  const ir::ScalarProgram body = b.finish({b.min(b.max(b.input(0), b.input(1)), b.input(2))});
  runtime::KernelCache cache;
  const KernelSpec spec = dense_spec("clip", body, {DType::f32}, {DType::f32}, {4}, 2);
  Tensor x({DType::f32, {4}});
  const float xs[] = {-3.0f, 0.05f, 0.7f, 9.0f};
  for (int i = 0; i < 4; ++i) x.data<float>()[i] = xs[i];
  const Tensor r1 = run_jit(cache, spec, {&x}, {0.1, 1.0}).outputs[0];
  const Tensor r2 = run_jit(cache, spec, {&x}, {-5.0, 0.5}).outputs[0];
  const float want1[] = {0.1f, 0.1f, 0.7f, 1.0f}, want2[] = {-3.0f, 0.05f, 0.5f, 0.5f};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(r1.data<float>()[i], want1[i]) << i;  // 0.1 rounded to f32, as a constant would be
    EXPECT_EQ(r2.data<float>()[i], want2[i]) << i;
  }
  EXPECT_TRUE(same_bits(r1, run_reference(spec, {&x}, {0.1, 1.0})[0]));
  EXPECT_EQ(cache.stats().compilations, 1);
}

TEST(CodegenKernel, SeveralOutputsOfDifferentDtypes) {
  // amp_multicast-like: one f32 input, copies in bf16, f16, i8 and the sum in f32.
  ScalarBuilder b(2);
  const auto x = b.input(0), y = b.input(1);
  const ir::ScalarProgram body = b.finish({x, x, x, b.add(x, y)});
  runtime::KernelCache cache;
  const KernelSpec spec =
      dense_spec("multi", body, {DType::f32, DType::f32}, {DType::bf16, DType::f16, DType::i8, DType::f32}, {1009});
  const Tensor in0 = random_tensor(DType::f32, {1009}, 11), in1 = random_tensor(DType::f32, {1009}, 12);
  const JitRun got = run_jit(cache, spec, {&in0, &in1});
  const std::vector<Tensor> want = run_reference(spec, {&in0, &in1});
  for (size_t k = 0; k < want.size(); ++k) EXPECT_TRUE(same_bits(got.outputs[k], want[k])) << "output " << k;
}

TEST(CodegenKernel, RankZeroIsOneElement) {
  runtime::KernelCache cache;
  const KernelSpec spec = dense_spec("scalar", c8_body(), {DType::f32, DType::f32}, {DType::f32}, {});
  Tensor x({DType::f32, {}}), y({DType::f32, {}});
  x.data<float>()[0] = 2.0f, y.data<float>()[0] = 3.0f;
  // ((2*3 + 0.5) max 0) * 1.5 - 2 = 7.75
  EXPECT_EQ(run_jit(cache, spec, {&x, &y}).outputs[0].data<float>()[0], 7.75f);
}

// The overflow flag: f32 values stored to f16.
KernelSpec flagged_cast(int64_t n) {
  ScalarBuilder b(1);
  KernelSpec spec = dense_spec("to_f16", b.finish({b.input(0)}), {DType::f32}, {DType::f16}, {n});
  spec.flags = {{"input_nonfinite", {0}}, {"output_nonfinite", {1}}};
  return spec;
}

TEST(CodegenKernel, NonFiniteFlagSeesInputsAndStoredOutputs) {
  runtime::KernelCache cache;
  const int64_t n = 1009;
  Tensor x = Tensor::zeros({DType::f32, {n}});
  for (int64_t i = 0; i < n; ++i) x.data<float>()[i] = static_cast<float>(i % 100) - 50.0f;
  EXPECT_EQ(run_jit(cache, flagged_cast(n), {&x}).flags, (std::vector<int32_t>{0, 0})) << "clean data";

  x.data<float>()[n - 1] = 70000.0f;  // finite in f32, Inf once stored as f16
  EXPECT_EQ(run_jit(cache, flagged_cast(n), {&x}).flags, (std::vector<int32_t>{0, 1}));

  x.data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(run_jit(cache, flagged_cast(n), {&x}).flags, (std::vector<int32_t>{1, 1}));
  EXPECT_EQ(cache.stats().compilations, 1);
}

TEST(CodegenKernel, FlagOnlyKernelAcrossThreads) {
  // No outputs: a pure overflow check over a bf16 gradient, large enough to be split.
  const int64_t n = (1 << 20) + 3;
  ScalarBuilder b(1);
  b.input(0);
  KernelSpec spec;
  spec.name = "all_finite";
  spec.shape = {n};
  spec.inputs = {{"grad", DType::bf16, {1}}};
  spec.body = b.finish({});
  spec.flags = {{"overflow", {0}}};
  runtime::KernelCache cache;
  Tensor g = Tensor::zeros({DType::bf16, {n}});
  EXPECT_EQ(run_jit(cache, spec, {&g}).flags[0], 0);
  for (int64_t at : {int64_t{0}, n / 2 + 1, n - 1}) {
    Tensor h = g.clone();
    h.data<uint16_t>()[at] = 0xFF80;  // -Inf
    EXPECT_EQ(run_jit(cache, spec, {&h}).flags[0], 1) << "Inf at " << at;
  }
}

TEST(CodegenKernel, NonFiniteFlagOnTheStridedPath) {
  runtime::KernelCache cache;
  const Shape nchw = {2, 3, 4, 5};
  KernelSpec spec = nchw_to_nhwc_spec(nchw);
  spec.flags = {{"overflow", {0}}};
  Tensor x = random_tensor(DType::f32, nchw, 13);
  for (int64_t i = 0; i < x.size(); ++i)
    if (!std::isfinite(x.data<float>()[i])) x.data<float>()[i] = 1.0f;
  EXPECT_EQ(run_jit(cache, spec, {&x}).flags[0], 0);
  x.data<float>()[x.size() - 7] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(run_jit(cache, spec, {&x}).flags[0], 1);
}

TEST(CodegenKernel, LaunchErrorsNameTheKernel) {
  runtime::KernelCache cache;
  const KernelSpec spec = dense_spec("c8", c8_body(), {DType::f32, DType::f32}, {DType::f32}, {8});
  const auto kernel = cache.get(spec);
  Tensor x = Tensor::zeros({DType::f32, {8}});
  std::vector<void*> two = {x.raw(), x.raw()};
  try {
    runtime::run_kernel(*kernel, spec, two);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "kernel 'c8': 2 buffers given for 2 inputs and 1 outputs");
  }
  std::vector<void*> with_null = {x.raw(), nullptr, x.raw()};
  EXPECT_THROW(runtime::run_kernel(*kernel, spec, with_null), Error);
  std::vector<void*> three = {x.raw(), x.raw(), x.raw()};
  const double p[] = {1.0};
  EXPECT_THROW(runtime::run_kernel(*kernel, spec, three, p), Error);
}

}  // namespace
}  // namespace ampfuse::testing
