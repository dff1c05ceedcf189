// KernelSpec (codegen/kernel_spec.h): validation messages, layout classification, cache keys
// that ignore sizes but nothing else, and the printed form.
#include "codegen_test_util.h"
#include "filecheck.h"
#include "test_util.h"

namespace ampfuse::testing {
namespace {

using codegen::Layout;
using codegen::StrideClass;

ir::ScalarProgram add_body() {
  ScalarBuilder b(2);
  return b.finish({b.add(b.input(0), b.input(1))});
}

KernelSpec add_spec(const Shape& shape) {
  return dense_spec("add", add_body(), {DType::f32, DType::f32}, {DType::f32}, shape);
}

// out[n,h,w,c] = bf16(in[n,c,h,w]): the iteration space is the output's, the input is
// read through permuted strides.
KernelSpec nchw_to_nhwc(int64_t n, int64_t c, int64_t h, int64_t w) {
  ScalarBuilder b(1);
  KernelSpec spec;
  spec.name = "to_nhwc";
  spec.shape = {n, h, w, c};
  spec.inputs = {{"x", DType::f32, {c * h * w, w, 1, h * w}}};
  spec.outputs = {{"y", DType::bf16, codegen::row_major_strides(spec.shape)}};
  spec.body = b.finish({b.input(0)});
  return spec;
}

TEST(CodegenSpec, ValidSpecPasses) {
  EXPECT_NO_THROW(add_spec({2, 3}).validate());
  EXPECT_NO_THROW(nchw_to_nhwc(2, 3, 4, 5).validate());
  EXPECT_NO_THROW(add_spec({}).validate());  // rank 0: one element
}

TEST(CodegenSpec, ValidationNamesTheProblem) {
  KernelSpec s = add_spec(Shape(9, 1));
  EXPECT_ERROR(s.validate(), "kernel 'add': rank 9 exceeds the maximum of 8");

  s = add_spec({2, 3});
  s.inputs[1].strides = {1};
  EXPECT_ERROR(s.validate(), "input 1 'in1' has 1 strides for rank 2");

  s = add_spec({2, 3});
  s.inputs[0].strides = {-3, 1};
  EXPECT_ERROR(s.validate(), "input 0 'in0' has negative stride -3 in dimension 0");

  s = add_spec({2, 3});
  s.outputs[0].strides = {0, 1};
  EXPECT_ERROR(s.validate(), "output 0 'out0' broadcasts (stride 0) along dimension 0 of extent 2");

  s = add_spec({2, 3});
  s.num_params = 1;
  EXPECT_ERROR(s.validate(), "the body reads 2 inputs but the kernel has 2 operands and 1 parameters");

  s = add_spec({2, 3});
  s.outputs.push_back(s.outputs[0]);
  EXPECT_ERROR(s.validate(), "the body has 1 results for 2 outputs");

  s = add_spec({2, 3});
  s.body.instrs[2].b = 5;
  EXPECT_ERROR(s.validate(), "body instruction %2 (add) uses %5, which is not defined before it");

  s = add_spec({2, 3});
  s.flags = {{"overflow", {0, 3}}};
  EXPECT_ERROR(s.validate(), "flag 'overflow' names operand 3 of 3");

  s = add_spec({2, 3});
  s.compute = DType::i32;
  EXPECT_ERROR(s.validate(), "compute type i32 is not f32 or f64");

  s = add_spec({2, 3});
  s.outputs.clear();
  s.body.results.clear();
  EXPECT_ERROR(s.validate(), "kernel 'add' has neither outputs nor flags");
}

TEST(CodegenSpec, LayoutsIgnoreExtentOneDimensions) {
  // [2,1,3]: the middle stride never moves the address, whatever it is.
  KernelSpec s = add_spec({2, 1, 3});
  s.inputs[0].strides = {3, 99, 1};
  s.inputs[1].strides = {0, 0, 0};
  const codegen::KernelSignature sig = codegen::signature(s);
  EXPECT_EQ(sig.inputs[0].layout, Layout::contiguous);
  EXPECT_EQ(sig.inputs[1].layout, Layout::scalar);
  EXPECT_TRUE(sig.flat());
  EXPECT_EQ(sig.rank, 0);
}

TEST(CodegenSpec, StridedOperandsRecordTheirStrideClasses) {
  const codegen::KernelSignature sig = codegen::signature(nchw_to_nhwc(2, 3, 4, 5));
  ASSERT_FALSE(sig.flat());
  EXPECT_EQ(sig.rank, 4);
  EXPECT_EQ(sig.inputs[0].layout, Layout::strided);
  EXPECT_EQ(sig.inputs[0].strides,
            (std::vector<StrideClass>{StrideClass::general, StrideClass::general, StrideClass::unit,
                                      StrideClass::general}));
  EXPECT_EQ(sig.outputs[0].layout, Layout::contiguous);
  EXPECT_FALSE(sig.wide_index);

  // A per-channel operand [1,C,1,1] over [N,C,H,W]: zero strides where it broadcasts.
  KernelSpec bias = add_spec({2, 3, 4, 5});
  bias.inputs[1].strides = {0, 1, 0, 0};
  const codegen::KernelSignature b = codegen::signature(bias);
  EXPECT_EQ(b.inputs[1].strides, (std::vector<StrideClass>{StrideClass::zero, StrideClass::unit, StrideClass::zero,
                                                           StrideClass::zero}));
}

TEST(CodegenSpec, CacheKeyIgnoresSizes) {
  EXPECT_EQ(add_spec({2, 3}).cache_key(), add_spec({64, 1000}).cache_key());
  // A transpose's channels only where they choose its tiles (narrow 2..4: their own key).
  EXPECT_EQ(nchw_to_nhwc(1, 3, 224, 224).cache_key(), nchw_to_nhwc(32, 3, 7, 9).cache_key());
  EXPECT_EQ(nchw_to_nhwc(1, 64, 224, 224).cache_key(), nchw_to_nhwc(32, 67, 7, 9).cache_key());
  EXPECT_NE(nchw_to_nhwc(1, 3, 224, 224).cache_key(), nchw_to_nhwc(1, 64, 224, 224).cache_key());
  KernelSpec small = add_spec({8, 16}), large = add_spec({128, 16});
  small.inputs[1].strides = large.inputs[1].strides = {0, 1};  // a row broadcast down the batch
  EXPECT_EQ(small.cache_key(), large.cache_key());
  // Flat loops do not depend on rank either.
  EXPECT_EQ(add_spec({6}).cache_key(), add_spec({2, 3}).cache_key());
}

TEST(CodegenSpec, CacheKeySeesStructure) {
  const std::string base = add_spec({4, 8}).cache_key();
  KernelSpec dtype = add_spec({4, 8});
  dtype.inputs[0].dtype = DType::bf16;
  EXPECT_NE(dtype.cache_key(), base);

  KernelSpec broadcast = add_spec({4, 8});
  broadcast.inputs[1].strides = {0, 1};
  EXPECT_NE(broadcast.cache_key(), base);
  KernelSpec column = add_spec({4, 8});
  column.inputs[1].strides = {1, 0};
  EXPECT_NE(column.cache_key(), broadcast.cache_key());

  KernelSpec transposed = add_spec({4, 8});
  transposed.inputs[0].strides = {1, 4};
  EXPECT_NE(transposed.cache_key(), base);

  ScalarBuilder b(2);
  KernelSpec body = add_spec({4, 8});
  body.body = b.finish({b.sub(b.input(0), b.input(1))});
  EXPECT_NE(body.cache_key(), base);

  ScalarBuilder c1(1), c2(1);
  KernelSpec k1 = dense_spec("k", c1.finish({c1.mul(c1.input(0), c1.constant(0.1))}), {DType::f32}, {DType::f32}, {4});
  KernelSpec k2 = dense_spec("k", c2.finish({c2.mul(c2.input(0), c2.constant(0.1 + 1e-17))}), {DType::f32},
                             {DType::f32}, {4});
  EXPECT_NE(k1.cache_key(), k2.cache_key()) << "constants must be keyed exactly";

  KernelSpec flagged = add_spec({4, 8});
  flagged.flags = {{"overflow", {2}}};
  EXPECT_NE(flagged.cache_key(), base);
}

// The key is the disk cache's key text too: written piece by piece into one buffer (it is
// computed for every kernel of every compile), it must spell exactly what the format
// strings below spell, the form the cache's entries were keyed by before.
std::string reference_key(const codegen::KernelSignature& s) {
  const auto operand = [](const codegen::OperandSignature& o) {
    std::string k = fmt::format("{}:{}", ir::dtype_name(o.dtype),
                                o.layout == Layout::contiguous ? 'c' : o.layout == Layout::scalar ? 's' : 'g');
    for (StrideClass c : o.strides) k += c == StrideClass::zero ? '0' : c == StrideClass::unit ? '1' : 'n';
    return k;
  };
  std::vector<std::string> in, out, fl;
  for (const auto& o : s.inputs) in.push_back(operand(o));
  for (const auto& o : s.outputs) out.push_back(operand(o));
  for (const auto& f : s.flags) fl.push_back(fmt::format("{}", fmt::join(f, ",")));
  std::string body;
  for (const ir::ScalarInstr& i : s.body.instrs) {
    body += ir::scalar_op_name(i.op);
    switch (i.op) {
      case ir::ScalarOp::input: body += fmt::format(" {}", i.index); break;
      case ir::ScalarOp::constant: body += fmt::format(" {:a}", i.value); break;
      case ir::ScalarOp::round_to: body += fmt::format(" {} {}", i.a, ir::dtype_name(i.dtype)); break;
      case ir::ScalarOp::philox_bits24: body += fmt::format(" {} {}", i.seed, i.offset); break;
      case ir::ScalarOp::philox_bits24_at: body += fmt::format(" {} {} {} {}", i.a, i.seed, i.offset, i.stride); break;
      default: {
        const int n = ir::scalar_op_arity(i.op);
        body += fmt::format(" {}", i.a);
        if (n > 1) body += fmt::format(",{}", i.b);
        if (n > 2) body += fmt::format(",{}", i.c);
      }
    }
    body += ';';
  }
  body += fmt::format("=>{}", fmt::join(s.body.results, ","));
  std::string tile;
  switch (s.tile) {
    case codegen::TileShape::none: break;
    case codegen::TileShape::square: tile = "|ts"; break;
    case codegen::TileShape::narrow_columns: tile = fmt::format("|tc{}", s.tile_extent); break;
    case codegen::TileShape::narrow_rows: tile = fmt::format("|tr{}", s.tile_extent); break;
  }
  return fmt::format("{}|r{}{}{}{}|p{}|in {}|out {}|flags {}|{}", ir::dtype_name(s.compute), s.rank,
                     s.wide_index ? "w" : "", s.streams ? "s" : "", tile, s.num_params, fmt::join(in, " "), fmt::join(out, " "),
                     fmt::join(fl, ";"), body);
}

TEST(CodegenSpec, CacheKeySpellsEveryPieceAsItsFormatWould) {
  ScalarBuilder b(3);  // two operands and a parameter
  const auto x = b.input(0), y = b.input(1);
  const auto scaled = b.mul(b.add(x, b.constant(-0.0)), b.mul(b.input(2), b.constant(-2.5)));
  const auto tiny = b.add(scaled, b.constant(4.9e-324));        // subnormal: "0x0.0000000000001p-1022"
  const auto big = b.mul(tiny, b.constant(1.7976931348623157e308));
  const auto noisy = b.add(big, b.philox_bits24_at(y, 0xfedcba9876543210ull, 12345678901234567890ull, 3));
  const auto picked = b.select(b.binary(ir::ScalarOp::max, x, y), noisy, b.philox_bits24(1, 2));
  KernelSpec spec = dense_spec("k", b.finish({b.round_to(picked, DType::bf16), b.constant(0.1)}),
                               {DType::f32, DType::bf16}, {DType::f32, DType::f32}, {3, 4}, /*num_params=*/1);
  spec.inputs[1].strides = {0, int64_t{1} << 32};  // strided, broadcast, past 2^31: rank and "w"
  spec.flags = {{"a", {0, 2}}, {"b", {3}}};
  const codegen::KernelSignature sig = codegen::signature(spec);
  ASSERT_TRUE(sig.wide_index);
  EXPECT_EQ(spec.cache_key(), reference_key(sig));
  EXPECT_NE(spec.cache_key().find("|r2w|p1|in f32:c bf16:g0n|out f32:c f32:c|flags 0,2;3|"), std::string::npos)
      << spec.cache_key();
  EXPECT_NE(spec.cache_key().find("const 0x0.0000000000001p-1022;"), std::string::npos) << spec.cache_key();

  // And the plain kernels of the other tests.
  EXPECT_EQ(add_spec({4, 8}).cache_key(), reference_key(codegen::signature(add_spec({4, 8}))));
  EXPECT_EQ(nchw_to_nhwc(1, 3, 5, 7).cache_key(), reference_key(codegen::signature(nchw_to_nhwc(1, 3, 5, 7))));
  EXPECT_NE(nchw_to_nhwc(1, 3, 5, 7).cache_key().find("|r4|tc3|p0|"), std::string::npos);
  EXPECT_NE(nchw_to_nhwc(1, 8, 5, 7).cache_key().find("|r4|ts|p0|"), std::string::npos);
}

TEST(CodegenSpec, OnlyOutputsPast32MiBStream) {
  // The launcher streams outputs of more than kStreamingOutputBytes together; only such
  // specs compile the streaming loops, and their key says so.
  const int64_t limit_f32 = codegen::kStreamingOutputBytes / 4;
  EXPECT_FALSE(codegen::signature(add_spec({limit_f32})).streams);
  EXPECT_TRUE(codegen::signature(add_spec({limit_f32 + 1})).streams);
  EXPECT_NE(add_spec({limit_f32}).cache_key(), add_spec({limit_f32 + 1}).cache_key());
  EXPECT_NE(add_spec({limit_f32 + 1}).cache_key().find("|r0s|"), std::string::npos) << add_spec({limit_f32 + 1}).cache_key();
  // Two f32 outputs of half the limit each pass it together.
  ScalarBuilder b(2);
  const auto sum = b.add(b.input(0), b.input(1));
  const KernelSpec two = dense_spec("two", b.finish({sum, sum}), {DType::f32, DType::f32}, {DType::f32, DType::f32},
                                    {limit_f32 / 2 + 1});
  EXPECT_TRUE(codegen::signature(two).streams);
  // A staged transpose over 16 M bf16 elements and one element more.
  EXPECT_FALSE(codegen::signature(nchw_to_nhwc(1024, 64, 16, 16)).streams);
  EXPECT_TRUE(codegen::signature(nchw_to_nhwc(1025, 64, 16, 16)).streams);
  // A shape past any memory neither overflows nor fails.
  EXPECT_TRUE(codegen::signature(add_spec({int64_t{1} << 62})).streams);
  // Nothing to write, nothing to stream.
  EXPECT_FALSE(codegen::signature(add_spec({0})).streams);
}

TEST(CodegenSpec, CacheKeySeesIndexWidth) {
  // The input's offsets reach past 2^31 although the iteration space is small.
  KernelSpec narrow = add_spec({2, 3}), wide = add_spec({2, 3});
  narrow.inputs[0].strides = {1 << 20, 1};
  wide.inputs[0].strides = {int64_t{1} << 32, 1};
  EXPECT_FALSE(codegen::signature(narrow).wide_index);
  EXPECT_TRUE(codegen::signature(wide).wide_index);
  EXPECT_NE(narrow.cache_key(), wide.cache_key());
}

TEST(CodegenSpec, PrintedFormShowsOperandsAndBody) {
  KernelSpec s = nchw_to_nhwc(2, 3, 4, 5);
  s.flags = {{"overflow", {0, 1}}};
  EXPECT_FILECHECK(codegen::print_kernel_spec(s), R"(
CHECK: kernel 'to_nhwc' over [2,4,5,3] (120 elements), compute f32, 0 parameter(s), int32 indexing, narrow-column tiles of 3
CHECK-NEXT: in  'x': f32 strides [60,5,1,20] strided
CHECK-NEXT: out 'y': bf16 strides [60,15,3,1] contiguous
CHECK-NEXT: flag 'overflow': any non-finite over operands 0, 1
CHECK-NEXT: %0 = input 0
CHECK-NEXT: results 0
)");
}

}  // namespace
}  // namespace ampfuse::testing
