// Transposed operands through the staged tiles of codegen/tiled_loops.cpp: NCHW <-> NHWC
// with casts, every tile shape (square, narrow columns, narrow rows) and its remainders,
// against the reference evaluator bit for bit.
#include "codegen_test_util.h"

#include <set>
#include <tuple>

namespace ampfuse::testing {
namespace {

// The operand as the reference evaluator needs it: a dense tensor of the iteration space,
// element idx read from x at sum(idx[d] * strides[d]).
Tensor gather(const Tensor& x, const Shape& shape, const std::vector<int64_t>& strides) {
  Tensor t(ir::TensorType{x.dtype(), shape});
  const size_t bytes = ir::dtype_size(x.dtype());
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t i = 0; i < t.size(); ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < shape.size(); ++d) off += idx[d] * strides[d];
    std::memcpy(static_cast<char*>(t.raw()) + i * bytes, static_cast<const char*>(x.raw()) + off * bytes, bytes);
    for (size_t d = shape.size(); d-- > 0;)
      if (++idx[d] < shape[d]) break;
      else idx[d] = 0;
  }
  return t;
}

// Runs spec on the stored inputs (addressed through the spec's strides) and the reference
// on their dense views; whether every output agrees bit for bit.
::testing::AssertionResult matches_reference(runtime::KernelCache& cache, const KernelSpec& spec,
                                             const std::vector<Tensor>& stored) {
  std::vector<const Tensor*> raw;
  std::vector<Tensor> dense;
  for (size_t k = 0; k < stored.size(); ++k) {
    raw.push_back(&stored[k]);
    dense.push_back(gather(stored[k], spec.shape, spec.inputs[k].strides));
  }
  std::vector<const Tensor*> dense_ptrs;
  for (const Tensor& t : dense) dense_ptrs.push_back(&t);
  const std::vector<Tensor> want = run_reference(spec, dense_ptrs);
  const JitRun got = run_jit(cache, spec, raw);
  for (size_t o = 0; o < want.size(); ++o) {
    ::testing::AssertionResult r = same_bits(got.outputs[o], want[o]);
    if (!r) return r << " (output " << o << ")";
  }
  return ::testing::AssertionSuccess();
}

KernelSpec cast_spec(const std::string& name, const Shape& shape, const std::vector<int64_t>& in_strides, DType in,
                     DType out) {
  ScalarBuilder b(1);
  KernelSpec spec;
  spec.name = name;
  spec.shape = shape;
  spec.inputs = {{"x", in, in_strides}};
  // An empty iteration space still needs strides validate() accepts: those of extents of 1.
  Shape dense = shape;
  for (int64_t& e : dense) e = std::max<int64_t>(e, 1);
  spec.outputs = {{"y", out, codegen::row_major_strides(dense)}};
  spec.compute = ir::compute_type({in, out});
  spec.body = b.finish({b.input(0)});
  return spec;
}

struct Casts {
  DType in, out;
};
const std::vector<Casts> kCasts = {
    {DType::f32, DType::bf16}, {DType::bf16, DType::f32}, {DType::f16, DType::f32}, {DType::f32, DType::f16}};
const std::vector<int64_t> kChannels = {1, 3, 7, 8, 16, 64, 67};
const std::vector<int64_t> kPixels = {0, 1, 7, 13, 257};

std::string describe(const Casts& c, int64_t channels, int64_t pixels) {
  return fmt::format("{} -> {}, C = {}, H*W = {}", ir::dtype_name(c.in), ir::dtype_name(c.out), channels, pixels);
}

TEST(CodegenTranspose, NchwToNhwcMatchesReference) {
  // [N, H, W, C] read from NCHW, and the same with H and W as one dimension.
  runtime::KernelCache cache;
  const int64_t n = 2;
  for (const Casts& cast : kCasts)
    for (int64_t c : kChannels)
      for (int64_t hw : kPixels) {
        const Tensor x = random_tensor(cast.in, {n, c, hw}, static_cast<uint64_t>(c * 1000 + hw));
        const int64_t h = hw == 7 ? 7 : 1, w = hw / h;  // [7, 1]: a W of one
        EXPECT_TRUE(matches_reference(
            cache, cast_spec("to_nhwc3", {n, hw, c}, {c * hw, 1, hw}, cast.in, cast.out), {x}))
            << describe(cast, c, hw) << ", [N, HW, C]";
        if (hw == 0) continue;
        EXPECT_TRUE(matches_reference(
            cache, cast_spec("to_nhwc4", {n, h, w, c}, {c * hw, w, 1, hw}, cast.in, cast.out), {x}))
            << describe(cast, c, hw) << ", [N, H, W, C]";
      }
}

TEST(CodegenTranspose, NhwcToNchwMatchesReference) {
  // [N, C, HW] read from NHWC: the transposed operand's rows are the channels.
  runtime::KernelCache cache;
  const int64_t n = 2;
  for (const Casts& cast : kCasts)
    for (int64_t c : kChannels)
      for (int64_t hw : kPixels) {
        const Tensor x = random_tensor(cast.in, {n, hw, c}, static_cast<uint64_t>(c * 1000 + hw + 1));
        EXPECT_TRUE(matches_reference(
            cache, cast_spec("to_nchw3", {n, c, hw}, {hw * c, 1, c}, cast.in, cast.out), {x}))
            << describe(cast, c, hw);
      }
}

TEST(CodegenTranspose, SparseColumnsAndRowsOfOneTile) {
  // A transposed operand whose columns are not dense (stride larger than the rows: a
  // slice of a wider tensor), with narrow and square tiles.
  runtime::KernelCache cache;
  for (int64_t rows : {2, 3, 4, 5, 8, 16, 33})
    for (int64_t cols : {2, 3, 4, 9, 16, 40}) {
      const int64_t stride = rows + 3;
      const Tensor x = random_tensor(DType::f32, {cols, stride}, static_cast<uint64_t>(rows * 100 + cols));
      EXPECT_TRUE(matches_reference(cache, cast_spec("sparse", {rows, cols}, {1, stride}, DType::f32, DType::bf16),
                                    {x}))
          << rows << " x " << cols;
    }
}

TEST(CodegenTranspose, LargeTransposesBothWays) {
  // Past 2^20 elements: several threads, slabs split between them, many blocks.
  runtime::KernelCache cache;
  for (auto [c, hw] : std::vector<std::pair<int64_t, int64_t>>{{64, 16900}, {3, 349525}}) {
    const Tensor x = random_tensor(DType::f32, {1, c, hw}, 77);
    EXPECT_TRUE(matches_reference(cache, cast_spec("big_nhwc", {1, hw, c}, {c * hw, 1, hw}, DType::f32, DType::bf16),
                                  {x}))
        << "NCHW -> NHWC, C = " << c;
    const Tensor y = random_tensor(DType::bf16, {1, hw, c}, 78);
    EXPECT_TRUE(matches_reference(cache, cast_spec("big_nchw", {1, c, hw}, {hw * c, 1, c}, DType::bf16, DType::f32),
                                  {y}))
        << "NHWC -> NCHW, C = " << c;
  }
}

TEST(CodegenTranspose, TransposedInputWithBroadcastBiasAndChain) {
  // y = max(x * 1.5 + bias[c], 0) - x, x read from NCHW into NHWC, bias broadcast over the
  // pixels: the bias is staged by the plain copy, x by the tiles.
  runtime::KernelCache cache;
  for (int64_t c : {3, 16, 67})
    for (int64_t hw : {7, 257}) {
      const int64_t n = 2;
      ScalarBuilder b(2);
      const auto x = b.input(0), bias = b.input(1);
      const auto e = b.max(b.add(b.mul(x, b.constant(1.5)), bias), b.constant(0));
      KernelSpec spec;
      spec.name = "bias_chain";
      spec.shape = {n, hw, c};
      spec.inputs = {{"x", DType::f32, {c * hw, 1, hw}}, {"bias", DType::bf16, {0, 0, 1}}};
      spec.outputs = {{"y", DType::bf16, codegen::row_major_strides(spec.shape)}};
      spec.compute = DType::f32;
      spec.body = b.finish({b.sub(e, x)});
      const Tensor xt = random_tensor(DType::f32, {n, c, hw}, 5), bt = random_tensor(DType::bf16, {c}, 6);
      EXPECT_TRUE(matches_reference(cache, spec, {xt, bt})) << "C = " << c << ", H*W = " << hw;
    }
}

TEST(CodegenTranspose, StreamingStoresOverAnyRange) {
  // With args->streaming, each output stretch's aligned part stores non-temporally; ranges
  // that start and end inside slabs and blocks must still give exactly their elements. The
  // kernel is the one compiled for outputs past 32 MiB (small ones have no streaming part).
  runtime::KernelCache cache;
  struct Case {
    KernelSpec spec;
    Shape stored;
  };
  const int64_t n = 2, hw = 1500;
  std::vector<Case> cases;
  for (int64_t c : {3, 64}) {
    cases.push_back({cast_spec("s_nhwc", {n, hw, c}, {c * hw, 1, hw}, DType::f32, DType::bf16), {n, c, hw}});
    cases.push_back({cast_spec("s_nchw", {n, c, hw}, {hw * c, 1, c}, DType::bf16, DType::f32), {n, hw, c}});
  }
  for (const Case& cs : cases) {
    const KernelSpec& spec = cs.spec;
    const Tensor x = random_tensor(spec.inputs[0].dtype, cs.stored, 21);
    const Tensor dense = gather(x, spec.shape, spec.inputs[0].strides);
    const Tensor want = run_reference(spec, {&dense})[0];
    const auto kernel = cache.get(streaming_sized(spec));
    ASSERT_EQ(codegen::signature(streaming_sized(spec)).tile, codegen::signature(spec).tile) << spec.name;
    const int64_t total = want.size();
    for (auto [begin, end] : std::vector<std::pair<int64_t, int64_t>>{
             {0, total}, {64, total - 64}, {1, total - 1}, {4500, 4600}, {5, 9}, {hw * 3 - 7, hw * 3 + 4200}}) {
      Tensor out = Tensor::zeros({spec.outputs[0].dtype, spec.shape});
      ASSERT_EQ(reinterpret_cast<uintptr_t>(out.raw()) % 64, 0u);
      void* data[] = {const_cast<void*>(x.raw()), out.raw()};
      std::vector<int64_t> strides = spec.inputs[0].strides;
      strides.insert(strides.end(), spec.outputs[0].strides.begin(), spec.outputs[0].strides.end());
      const codegen::KernelArgs args{data, spec.shape.data(), strides.data(), nullptr, nullptr, 1};
      kernel->fn(begin, end, &args);
      for (int64_t i = 0; i < total; ++i) {
        if (i >= begin && i < end)
          ASSERT_TRUE(same_element(out, want, i)) << spec.name << " range [" << begin << ", " << end << ") element " << i;
        else
          ASSERT_EQ(out.get_f64(i), 0.0) << spec.name << " range [" << begin << ", " << end << ") wrote element " << i;
      }
    }
  }
}

TEST(CodegenTranspose, NonFiniteFlagSeesEveryStagedElement) {
  // The flag over the transposed input and the output: one NaN anywhere (inside a whole
  // tile, in the remainder rows or columns) sets it; finite values leave it clear.
  runtime::KernelCache cache;
  for (auto [c, hw] : std::vector<std::pair<int64_t, int64_t>>{{3, 1000}, {67, 300}}) {
    KernelSpec spec = cast_spec("flagged", {2, hw, c}, {c * hw, 1, hw}, DType::f32, DType::bf16);
    spec.flags = {{"nonfinite", {0, 1}}};
    Tensor x({DType::f32, {2, c, hw}});
    for (int64_t i = 0; i < x.size(); ++i) x.data<float>()[i] = static_cast<float>(i % 97) - 48.0f;
    EXPECT_EQ(run_jit(cache, spec, {&x}).flags[0], 0) << "C = " << c << ", all finite";
    for (int64_t at : {int64_t{0}, hw + 5, c * hw - 1, 2 * c * hw - 1, c * hw + hw / 2}) {
      Tensor y = x.clone();
      y.data<float>()[at] = std::numeric_limits<float>::quiet_NaN();
      EXPECT_EQ(run_jit(cache, spec, {&y}).flags[0], 1) << "C = " << c << ", NaN at " << at;
    }
  }
}

// NCHW read into [N, H*W, C] and NHWC into [N, C, H*W]: NCHW <-> NHWC as the planner lowers
// them (coalesce_dimensions merges H and W).
KernelSpec to_nhwc(int64_t n, int64_t c, int64_t hw, DType in = DType::f32, DType out = DType::bf16) {
  return cast_spec("to_nhwc", {n, hw, c}, {c * hw, 1, hw}, in, out);
}
KernelSpec to_nchw(int64_t n, int64_t c, int64_t hw, DType in = DType::bf16, DType out = DType::f32) {
  return cast_spec("to_nchw", {n, c, hw}, {hw * c, 1, c}, in, out);
}

TEST(CodegenTranspose, TileShapeIsKeyedAndOtherSizesAreNot) {
  using codegen::TileShape;
  const auto tile = [](const KernelSpec& s) {
    const codegen::KernelSignature sig = codegen::signature(s);
    return std::pair(sig.tile, sig.tile_extent);
  };
  for (int64_t c : {2, 3, 4}) {
    EXPECT_EQ(tile(to_nhwc(2, c, 49)), std::pair(TileShape::narrow_columns, static_cast<int>(c))) << "C = " << c;
    EXPECT_EQ(tile(to_nchw(2, c, 49)), std::pair(TileShape::narrow_rows, static_cast<int>(c))) << "C = " << c;
  }
  for (int64_t c : {5, 16, 64, 65}) {
    EXPECT_EQ(tile(to_nhwc(2, c, 49)), std::pair(TileShape::square, 0)) << "C = " << c;
    EXPECT_EQ(tile(to_nchw(2, c, 49)), std::pair(TileShape::square, 0)) << "C = " << c;
  }
  // An H*W of 2..4 is a narrow count too (of rows NCHW -> NHWC, its columns dense).
  EXPECT_EQ(tile(to_nhwc(2, 64, 3)), std::pair(TileShape::narrow_rows, 3));
  EXPECT_EQ(tile(to_nchw(2, 64, 3)), std::pair(TileShape::narrow_columns, 3));
  // Narrow rows whose columns are not dense (a slice) have no narrow tile: square, which
  // copies them element by element.
  EXPECT_EQ(tile(cast_spec("sparse", {3, 40}, {1, 6}, DType::f32, DType::bf16)), std::pair(TileShape::square, 0));
  EXPECT_EQ(tile(cast_spec("dense", {3, 40}, {1, 3}, DType::f32, DType::bf16)), std::pair(TileShape::narrow_rows, 3));
  // Not staged: contiguous, a transposed output (interchanged loops), C = 1 (a copy).
  EXPECT_EQ(tile(cast_spec("copy", {4, 5}, {5, 1}, DType::f32, DType::bf16)).first, TileShape::none);
  KernelSpec out_transposed = cast_spec("out_t", {4, 5}, {5, 1}, DType::f32, DType::bf16);
  out_transposed.outputs[0].strides = {1, 4};
  EXPECT_EQ(tile(out_transposed).first, TileShape::none);
  EXPECT_EQ(out_transposed.cache_key().find("|t"), std::string::npos) << out_transposed.cache_key();
  EXPECT_EQ(tile(to_nhwc(2, 1, 49)).first, TileShape::none);

  // One key per tile shape: narrow columns and rows of 2, 3, 4, and square, which serves
  // both directions (the same strides but for their sizes, so the same code).
  std::set<std::string> keys;
  for (int64_t c : {2, 3, 4, 64}) {
    keys.insert(to_nhwc(2, c, 49, DType::f32, DType::bf16).cache_key());
    keys.insert(to_nchw(2, c, 49, DType::f32, DType::bf16).cache_key());
  }
  EXPECT_EQ(keys.size(), 7u);
  EXPECT_EQ(to_nhwc(2, 64, 49, DType::f32, DType::bf16).cache_key(), to_nchw(2, 64, 49, DType::f32, DType::bf16).cache_key());
  // ...and neither the batch nor H*W (past 4) nor a wide C changes it, but outputs past
  // 32 MiB, whose kernels have the streaming part.
  for (int64_t c : {3, 64}) {
    EXPECT_EQ(to_nhwc(2, c, 49).cache_key(), to_nhwc(16, c, 3136).cache_key()) << "C = " << c;
    EXPECT_EQ(to_nhwc(2, c, 49).cache_key(), to_nhwc(5, c, 5).cache_key()) << "C = " << c;
    EXPECT_EQ(to_nchw(2, c, 49).cache_key(), to_nchw(16, c, 3136).cache_key()) << "C = " << c;
    EXPECT_EQ(to_nchw(2, c, 49).cache_key(), to_nchw(3, c, 7).cache_key()) << "C = " << c;
    EXPECT_NE(to_nchw(64, c, 50176).cache_key().find("|r3s|"), std::string::npos) << "C = " << c;
  }
  EXPECT_EQ(to_nhwc(2, 64, 49).cache_key(), to_nhwc(2, 5, 49).cache_key());
  EXPECT_EQ(to_nchw(2, 64, 49).cache_key(), to_nchw(2, 65, 49).cache_key());
  // The planner's path: [N, H, W, C] coalesced to [N, H*W, C] keys as the 3-d spec does.
  for (int64_t c : {3, 64}) {
    KernelSpec four = cast_spec("to_nhwc", {8, 5, 7, c}, {c * 35, 7, 1, 35}, DType::f32, DType::bf16);
    codegen::coalesce_dimensions(four);
    EXPECT_EQ(four.cache_key(), to_nhwc(2, c, 49).cache_key()) << "C = " << c;
  }
}

TEST(CodegenTranspose, EveryTileShapeMatchesReferenceAtOddSizes) {
  // Both directions, coalesced as the planner does, C and H*W through every tile shape
  // (narrow 2..4 either way, square) and their remainders; a batch of one is a rank-2
  // spec whose slab threads split.
  runtime::KernelCache cache;
  std::set<std::pair<codegen::TileShape, int>> shapes;
  for (int64_t n : {1, 3})
    for (int64_t c : {1, 2, 3, 4, 5, 64, 65})
      for (int64_t hw : {0, 1, 2, 3, 4, 7, 13, 31, 257}) {
        for (bool forward : {true, false}) {
          const DType in = forward ? DType::f32 : DType::bf16, out = forward ? DType::bf16 : DType::f32;
          KernelSpec spec = forward ? to_nhwc(n, c, hw, in, out) : to_nchw(n, c, hw, in, out);
          const Tensor x = random_tensor(in, forward ? Shape{n, c, hw} : Shape{n, hw, c},
                                         static_cast<uint64_t>(n * 100000 + c * 1000 + hw));
          codegen::coalesce_dimensions(spec);
          const codegen::KernelSignature sig = codegen::signature(spec);
          shapes.insert({sig.tile, sig.tile_extent});
          EXPECT_TRUE(matches_reference(cache, spec, {x}))
              << (forward ? "NCHW -> NHWC" : "NHWC -> NCHW") << ", N = " << n << ", C = " << c << ", H*W = " << hw;
        }
      }
  for (int k = 2; k <= 4; ++k) {
    EXPECT_TRUE(shapes.count({codegen::TileShape::narrow_columns, k})) << k;
    EXPECT_TRUE(shapes.count({codegen::TileShape::narrow_rows, k})) << k;
  }
  EXPECT_TRUE(shapes.count({codegen::TileShape::square, 0}));
}

TEST(CodegenTranspose, OtherTileShapeCompilesItsOwnKernel) {
  // One cache, C = 64 first: C = 3, 2, 4 must not reuse its kernel (nor each other's), and
  // must still be right; C = 65 and another batch and H*W do reuse it.
  runtime::KernelCache cache;
  for (bool forward : {true, false}) {
    const auto spec_of = [&](int64_t n, int64_t c, int64_t hw) { return forward ? to_nhwc(n, c, hw) : to_nchw(n, c, hw); };
    const auto input_of = [&](int64_t n, int64_t c, int64_t hw) {
      return random_tensor(forward ? DType::f32 : DType::bf16, forward ? Shape{n, c, hw} : Shape{n, hw, c},
                           static_cast<uint64_t>(c * 7 + hw));
    };
    const std::string dir = forward ? "NCHW -> NHWC" : "NHWC -> NCHW";
    std::set<const runtime::CompiledKernel*> kernels;
    for (int64_t c : {64, 3, 2, 4}) {
      const KernelSpec spec = spec_of(2, c, 300);
      bool compiled = false;
      kernels.insert(cache.get(spec, &compiled).get());
      EXPECT_TRUE(compiled) << dir << ", C = " << c;
      EXPECT_TRUE(matches_reference(cache, spec, {input_of(2, c, 300)})) << dir << ", C = " << c;
    }
    EXPECT_EQ(kernels.size(), 4u) << dir;
    for (auto [n, c, hw] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{2, 65, 300}, {5, 3, 77}, {3, 4, 1000}}) {
      const KernelSpec spec = spec_of(n, c, hw);
      bool compiled = false;  // get() sets it only when it compiles
      EXPECT_TRUE(kernels.count(cache.get(spec, &compiled).get())) << dir << ", C = " << c;
      EXPECT_FALSE(compiled) << dir << ", C = " << c;
      EXPECT_TRUE(matches_reference(cache, spec, {input_of(n, c, hw)})) << dir << ", C = " << c;
    }
  }
}

TEST(CodegenTranspose, NarrowKernelStaysRightForOtherExtents) {
  // A kernel keyed for one tile shape, called with another's sizes (which its key would
  // never give it), takes its element copies: slower, never wrong.
  runtime::KernelCache cache;
  for (bool forward : {true, false}) {
    const auto spec_of = [&](int64_t c) { return forward ? to_nhwc(2, c, 61) : to_nchw(2, c, 61); };
    for (int64_t keyed : {3, 4, 64})
      for (int64_t c : {2, 3, 5, 64}) {
        if (c == keyed) continue;
        const auto kernel = cache.get(spec_of(keyed));
        const KernelSpec spec = spec_of(c);
        const Tensor x = random_tensor(forward ? DType::f32 : DType::bf16, forward ? Shape{2, c, 61} : Shape{2, 61, c}, 9);
        const Tensor dense = gather(x, spec.shape, spec.inputs[0].strides);
        const Tensor want = run_reference(spec, {&dense})[0];
        Tensor got = Tensor::zeros({spec.outputs[0].dtype, spec.shape});
        void* data[] = {const_cast<void*>(x.raw()), got.raw()};
        std::vector<int32_t> flags;
        runtime::run_kernel(*kernel, spec, data, {}, flags);
        EXPECT_TRUE(same_bits(got, want)) << (forward ? "NCHW -> NHWC" : "NHWC -> NCHW") << ", kernel for C = " << keyed
                                          << " run with C = " << c;
      }
  }
}

TEST(CodegenTranspose, CoalesceDimensionsMergesWhatEveryOperandWalksAsOne) {
  // NCHW read into [N, H, W, C]: H and W merge, nothing else does.
  KernelSpec spec = cast_spec("c", {2, 5, 7, 3}, {105, 7, 1, 35}, DType::f32, DType::bf16);
  codegen::coalesce_dimensions(spec);
  EXPECT_EQ(spec.shape, (Shape{2, 35, 3}));
  EXPECT_EQ(spec.inputs[0].strides, (std::vector<int64_t>{105, 1, 35}));
  EXPECT_EQ(spec.outputs[0].strides, (std::vector<int64_t>{105, 3, 1}));
  // A contiguous spec becomes one dimension; extents of 1 fold into their neighbours.
  KernelSpec flat = cast_spec("f", {4, 1, 6}, {6, 6, 1}, DType::f32, DType::f32);
  codegen::coalesce_dimensions(flat);
  EXPECT_EQ(flat.shape, (Shape{24}));
  EXPECT_EQ(flat.inputs[0].strides, (std::vector<int64_t>{1}));
  // A per-channel bias over [N, C, HW] keeps C apart (stride 1 between zeros).
  KernelSpec bias = cast_spec("b", {2, 3, 10}, {0, 1, 0}, DType::f32, DType::f32);
  codegen::coalesce_dimensions(bias);
  EXPECT_EQ(bias.shape, (Shape{2, 3, 10}));
  // Empty iteration spaces are left alone.
  KernelSpec empty = cast_spec("e", {2, 0, 3}, {0, 3, 1}, DType::f32, DType::f32);
  codegen::coalesce_dimensions(empty);
  EXPECT_EQ(empty.shape, (Shape{2, 0, 3}));
}

}  // namespace
}  // namespace ampfuse::testing
