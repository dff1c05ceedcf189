// What the generated code looks like, for whichever target AMPFUSE_CPU selects (ctest runs
// this suite for x86-64-v3 and x86-64-v4 too): loops vectorized to the target's full width,
// with no library calls, F16C conversions, no FMA contraction, integer bf16 rounding,
// non-temporal stores in the streaming loops, and the AMPFUSE_DUMP listings. The checks look
// at what matters, never at LLVM's label names or block order.
#include "codegen/llvm_emitter.h"
#include "codegen/llvm_target.h"
#include "codegen_test_util.h"
#include "filecheck.h"

#include <cstdlib>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace ampfuse::testing {
namespace {

ir::ScalarProgram c8_body() {
  ScalarBuilder b(2);
  const auto a = b.input(0), y = b.input(1);
  const auto d = b.add(b.mul(a, y), b.constant(0.5));
  const auto f = b.mul(b.max(d, b.constant(0)), b.constant(1.5));
  return b.finish({b.sub(f, a)});
}

ir::ScalarProgram cast_body() {
  ScalarBuilder b(1);
  return b.finish({b.input(0)});
}

std::string assembly(const KernelSpec& spec) {
  return codegen::target_assembly(codegen::build_kernel_module(spec, "k"));
}
std::string ir_of(const KernelSpec& spec) { return codegen::ir_text(codegen::build_kernel_module(spec, "k")); }

bool has(const std::string& text, const std::string& regex) { return std::regex_search(text, std::regex(regex)); }

// "%zmm" where the loop vectorizer forms 512-bit vectors for the target (AMPFUSE_CPU),
// "%ymm" for 256: the registers of a loop vectorized to the target's full width.
std::string full_width() {
  const int bits = codegen::target_vector_bits();
  return bits >= 512 ? "%zmm" : bits == 256 ? "%ymm" : "%xmm";
}

// An assembly listing and its loops: each runs from a label to the last branch back to it.
// The names of labels (.LBB0_16) and the order of blocks vary with the target and LLVM's
// version; a backward branch is what a loop is on all of them. A jump to a function's own
// symbol is a tail call (the dispatcher's `jmp k.loop`), not a loop.
struct Listing {
  struct Loop {
    size_t first, last;  // line indices
    bool contains(const Loop& other) const {
      return first <= other.first && other.last <= last && (first != other.first || last != other.last);
    }
  };
  std::vector<std::string> lines;
  std::vector<Loop> loops;

  explicit Listing(const std::string& text) {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    const std::regex label(R"(^([.\w$]+):)"), branch(R"(^\s+j[a-z]+\s+([.\w$]+)\s*$)"),
        function(R"(^\s+\.type\s+([.\w$]+),\s*@function)");
    std::set<std::string> functions;
    std::map<std::string, size_t> label_line;
    std::map<std::string, size_t> last_branch_back;
    std::smatch m;
    for (size_t i = 0; i < lines.size(); ++i) {
      if (std::regex_search(lines[i], m, function)) functions.insert(m[1]);
      if (std::regex_search(lines[i], m, label) && !functions.count(m[1])) label_line[m[1]] = i;
      if (std::regex_search(lines[i], m, branch) && label_line.count(m[1])) last_branch_back[m[1]] = i;
    }
    for (const auto& [name, last] : last_branch_back) loops.push_back({label_line[name], last});
  }

  bool loop_has(const Loop& loop, const std::string& regex) const {
    const std::regex r(regex);
    for (size_t i = loop.first; i <= loop.last; ++i)
      if (std::regex_search(lines[i], r)) return true;
    return false;
  }
  // Some loop has an instruction that matches.
  bool in_loop(const std::string& regex) const {
    for (const Loop& loop : loops)
      if (loop_has(loop, regex)) return true;
    return false;
  }
};

TEST(CodegenAsm, ContiguousMainLoopUsesFullWidthVectors) {
  const std::string bf16 =
      assembly(dense_spec("c8", c8_body(), {DType::bf16, DType::bf16}, {DType::bf16}, {64}));
  EXPECT_TRUE(Listing(bf16).in_loop(R"(vmulps\s.*)" + full_width())) << bf16;
  const std::string f64 = assembly(dense_spec("c8", c8_body(), {DType::f64, DType::f64}, {DType::f64}, {64}));
  EXPECT_TRUE(Listing(f64).in_loop(R"(vmulpd\s.*)" + full_width())) << f64;
}

TEST(CodegenAsm, TranscendentalFunctionsVectorize) {
  for (ScalarOp op : {ScalarOp::exp, ScalarOp::log, ScalarOp::tanh, ScalarOp::erf}) {
    ScalarBuilder b(1);
    const std::string text =
        assembly(dense_spec("f", b.finish({b.unary(op, b.input(0))}), {DType::f32}, {DType::f32}, {64}));
    const Listing listing(text);
    EXPECT_TRUE(listing.in_loop(R"(v(mul|add)ps\s.*)" + full_width())) << ir::scalar_op_name(op) << "\n" << text;
    EXPECT_FALSE(listing.in_loop(R"(\scall)")) << ir::scalar_op_name(op) << ": no library calls\n" << text;
  }
}

TEST(CodegenAsm, F16ConversionsArePacked) {
  // Packed conversions (the cost model may pick xmm for them), no library calls: F16C's
  // vcvtph2ps / vcvtps2ph, or on CPUs with AVX512-FP16 its x forms (vcvtps2phx with a width
  // suffix when it reads memory), which LLVM prefers there.
  const std::string widen = assembly(dense_spec("cast", cast_body(), {DType::f16}, {DType::f32}, {64}));
  EXPECT_TRUE(Listing(widen).in_loop(R"(vcvtph2psx?\s+-?\d*\(%)")) << "packed, straight from memory:\n" << widen;
  const std::string narrow = assembly(dense_spec("cast", cast_body(), {DType::f32}, {DType::f16}, {64}));
  const Listing narrow_listing(narrow);
  // Nearest even: F16C's immediate 4 (the MXCSR mode), or the x form, which always uses it.
  EXPECT_TRUE(narrow_listing.in_loop(R"((vcvtps2ph\s+\$4, %[xyz]mm|vcvtps2phx[xyz]?\s))"))
      << "nearest even (the MXCSR mode):\n" << narrow;
  EXPECT_TRUE(narrow_listing.in_loop(R"(vmov(dqu|ups|ntdq|ntps)\s+%[xyz]mm\d+, -?\d*\()")) << "vector stores:\n"
                                                                                          << narrow;
  EXPECT_FALSE(has(widen + narrow, "__truncsfhf2|__extendhfsf2"));
}

TEST(CodegenAsm, Bf16UsesIntegerRoundingNotLibcalls) {
  const KernelSpec spec = dense_spec("cast", cast_body(), {DType::f32}, {DType::bf16}, {64});
  const std::string ir = ir_of(spec);
  EXPECT_FALSE(has(ir, "bfloat")) << ir;
  const std::string text = assembly(spec);
  // AVX512-BF16's conversion treats subnormal inputs as zero: never used, even where present.
  EXPECT_FALSE(has(text, "__truncsfbf2|vcvtneps2bf16")) << text;
  EXPECT_TRUE(Listing(text).in_loop(R"(vpadd[dw]\s.*)" + full_width())) << "the +0x7FFF rounding, vectorized:\n"
                                                                         << text;
}

TEST(CodegenAsm, NoFmaContraction) {
  // x * y + z must round twice; every target has FMA, so only the options prevent it.
  ScalarBuilder b(3);
  const auto r = b.add(b.mul(b.input(0), b.input(1)), b.input(2));
  const KernelSpec spec = dense_spec("muladd", b.finish({r}), {DType::f32, DType::f32, DType::f32}, {DType::f32}, {64});
  ASSERT_TRUE(codegen::jit_target().has("fma")) << codegen::jit_target().features;
  const std::string text = assembly(spec);
  EXPECT_TRUE(Listing(text).in_loop(R"(vmulps\s.*)" + full_width())) << text;
  EXPECT_FALSE(has(text, "vfmadd|vfmsub|vfnmadd")) << text;
  EXPECT_FALSE(has(ir_of(spec), "contract|fmuladd"));
}

TEST(CodegenAsm, StreamingLoopUsesNonTemporalStores) {
  const KernelSpec small = dense_spec("c8", c8_body(), {DType::f32, DType::f32}, {DType::f32}, {64});
  const std::string text = assembly(streaming_sized(small));
  const Listing listing(text);
  EXPECT_TRUE(listing.in_loop(R"(vmovntps\s+)" + full_width())) << text;
  // The regular loop keeps ordinary stores.
  EXPECT_TRUE(listing.in_loop(R"(vmovups\s+)" + full_width() + R"(\d+, )")) << text;
}

TEST(CodegenAsm, SmallOutputsGetNoStreamingLoop) {
  // Outputs under 32 MiB never stream, so their kernels are compiled without the loop (half
  // of a small kernel's compile time); the staged transposes likewise.
  const std::string flat = assembly(dense_spec("c8", c8_body(), {DType::f32, DType::f32}, {DType::f32}, {64}));
  EXPECT_TRUE(Listing(flat).in_loop(R"(vmovups\s+)" + full_width() + R"(\d+, )")) << flat;
  EXPECT_FALSE(has(flat, "vmovnt")) << flat;
  KernelSpec nhwc = dense_spec("nhwc", cast_body(), {DType::f32}, {DType::bf16}, {2, 256, 64});
  nhwc.inputs[0].strides = {64 * 256, 1, 256};
  const std::string staged = assembly(nhwc);
  EXPECT_FALSE(has(staged, "vmovnt")) << staged;
}

TEST(CodegenAsm, StreamingLoopStores16BitOutputsNonTemporally) {
  // A 16-bit output narrowed from vectors of LLVM's preferred width is a truncating store,
  // which has no non-temporal form (on Sapphire Rapids, where LLVM prefers 256 bits, no
  // bf16 output was streamed): the streaming loops of flat kernels and staged transposes
  // alike must stream them.
  for (const DType out : {DType::bf16, DType::f16}) {
    const std::string flat = assembly(streaming_sized(dense_spec("cast", cast_body(), {DType::f32}, {out}, {64})));
    EXPECT_TRUE(Listing(flat).in_loop(R"(vmovnt(dq|ps)\s+%[xyz]mm)")) << ir::dtype_name(out) << "\n" << flat;
    // f32 NCHW -> NHWC, read through permuted strides.
    KernelSpec nhwc = dense_spec("nhwc", cast_body(), {DType::f32}, {out}, {2, 256, 64});
    nhwc.inputs[0].strides = {64 * 256, 1, 256};
    const std::string staged = assembly(streaming_sized(nhwc));
    EXPECT_TRUE(Listing(staged).in_loop(R"(vmovnt(dq|ps)\s+%[xyz]mm)")) << ir::dtype_name(out) << "\n" << staged;
  }
}

TEST(CodegenAsm, BodiesCallingTheCLibraryGetNoWidthHint) {
  // A width hint on a loop LLVM cannot vectorize prints "loop not vectorized" on stderr.
  // Bodies calling the C library (sin in f32, every transcendental in f64: log1p, which
  // LLVM has no vector form of) stay scalar, so the streaming loops of 16-bit outputs must
  // not ask for lanes there (the fuzzer found an f64 softrelu that did).
  ScalarBuilder f32(1);
  ScalarBuilder f64(1);
  const std::vector<KernelSpec> specs = {
      dense_spec("sin", f32.finish({f32.unary(ScalarOp::sin, f32.input(0))}), {DType::f32}, {DType::bf16}, {64}),
      dense_spec("log1p", f64.finish({f64.unary(ScalarOp::log1p, f64.input(0))}), {DType::f64}, {DType::bf16}, {64})};
  for (const KernelSpec& flat : specs) {
    KernelSpec nhwc = flat;
    nhwc.shape = {2, 256, 64};
    nhwc.inputs[0].strides = {64 * 256, 1, 256};
    nhwc.outputs[0].strides = codegen::row_major_strides(nhwc.shape);
    for (const KernelSpec& spec : {streaming_sized(flat), streaming_sized(nhwc)}) {
      ::testing::internal::CaptureStderr();
      codegen::build_kernel_module(spec, "k");
      const std::string printed = ::testing::internal::GetCapturedStderr();
      EXPECT_EQ(printed.find("remark"), std::string::npos) << spec.name << " rank " << spec.shape.size() << ":\n" << printed;
    }
  }
}

TEST(CodegenAsm, StridedKernelVectorizesItsInnerLoop) {
  // A bias broadcast per channel: rows of W contiguous elements, walked by an outer loop
  // over rows and an inner loop along each row, which must be the vectorized one.
  ScalarBuilder b(2);
  KernelSpec spec = dense_spec("bias", b.finish({b.add(b.input(0), b.input(1))}), {DType::f32, DType::f32},
                               {DType::f32}, {2, 3, 8, 8});
  spec.inputs[1].strides = {0, 1, 0, 0};
  const std::string text = assembly(spec);
  const Listing listing(text);
  bool nested_vector_loop = false;
  for (const Listing::Loop& inner : listing.loops) {
    if (!listing.loop_has(inner, R"(vaddps\s.*)" + full_width()) ||
        !listing.loop_has(inner, R"(vmovups\s+)" + full_width() + R"(\d+, )"))
      continue;
    for (const Listing::Loop& outer : listing.loops) nested_vector_loop |= outer.contains(inner);
  }
  EXPECT_TRUE(nested_vector_loop) << "a full-width vector loop inside the row loop:\n" << text;
  EXPECT_FALSE(has(text, "vmovnt")) << "strided kernels have no streaming loop:\n" << text;
}

TEST(CodegenAsm, DumpPrintsSpecIrAndAssembly) {
  const KernelSpec spec = dense_spec("c8", c8_body(), {DType::bf16, DType::bf16}, {DType::bf16}, {64});
  ::setenv("AMPFUSE_DUMP", "plan,code", 1);
  ::testing::internal::CaptureStderr();
  codegen::build_kernel_module(spec, "dumped");
  const std::string code = ::testing::internal::GetCapturedStderr();
  ::setenv("AMPFUSE_DUMP", "code,asm", 1);
  ::testing::internal::CaptureStderr();
  codegen::build_kernel_module(spec, "dumped");
  const std::string with_asm = ::testing::internal::GetCapturedStderr();
  ::setenv("AMPFUSE_DUMP", "ir", 1);
  ::testing::internal::CaptureStderr();
  codegen::build_kernel_module(spec, "dumped");
  const std::string other = ::testing::internal::GetCapturedStderr();
  ::unsetenv("AMPFUSE_DUMP");

  EXPECT_FILECHECK(code, R"(
CHECK: === kernel dumped
CHECK-NEXT: kernel 'c8' over [64] (64 elements), compute f32
CHECK: = mul %0, %1
CHECK: === LLVM IR (optimized)
CHECK: define void @dumped(
)");
  EXPECT_EQ(code.find("assembly"), std::string::npos);
  EXPECT_FILECHECK(with_asm, R"(
CHECK: define void @dumped(
CHECK: === dumped assembly
CHECK: dumped:
)");
  EXPECT_EQ(other, "") << "AMPFUSE_DUMP=ir is not for codegen";
}

}  // namespace
}  // namespace ampfuse::testing
