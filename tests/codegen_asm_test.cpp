// What the generated code looks like: vector registers in the contiguous main loop, F16C
// conversions, no FMA contraction, integer bf16 rounding, non-temporal stores in the
// streaming loop, and the AMPFUSE_DUMP listings.
#include "codegen/llvm_emitter.h"
#include "codegen/llvm_target.h"
#include "codegen_test_util.h"
#include "filecheck.h"

#include <cstdlib>
#include <regex>

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

TEST(CodegenAsm, ContiguousMainLoopUsesVectorRegisters) {
  const std::string bf16 = assembly(dense_spec("c8", c8_body(), {DType::bf16, DType::bf16}, {DType::bf16}, {64}));
  EXPECT_TRUE(has(bf16, R"(vmulps\s+%[yz]mm\d+, %[yz]mm\d+, %[yz]mm\d+)")) << bf16;
  const std::string f64 = assembly(dense_spec("c8", c8_body(), {DType::f64, DType::f64}, {DType::f64}, {64}));
  EXPECT_TRUE(has(f64, R"(vmulpd\s+%[yz]mm\d+, %[yz]mm\d+, %[yz]mm\d+)")) << f64;
}

TEST(CodegenAsm, TranscendentalFunctionsVectorize) {
  for (ScalarOp op : {ScalarOp::exp, ScalarOp::log, ScalarOp::tanh, ScalarOp::erf}) {
    ScalarBuilder b(1);
    const std::string text =
        assembly(dense_spec("f", b.finish({b.unary(op, b.input(0))}), {DType::f32}, {DType::f32}, {64}));
    EXPECT_TRUE(has(text, R"(v(mul|add)ps\s+.*%[yz]mm)")) << ir::scalar_op_name(op) << "\n" << text;
    EXPECT_FALSE(has(text, R"(call.*(exp|log|tanh|erf))")) << ir::scalar_op_name(op);
  }
}

TEST(CodegenAsm, F16ConversionsUseF16C) {
  // Packed conversions (the cost model may pick xmm for them), no library calls.
  const std::string widen = assembly(dense_spec("cast", cast_body(), {DType::f16}, {DType::f32}, {64}));
  EXPECT_TRUE(has(widen, R"(vcvtph2ps\s+-?\d*\(%)")) << "packed, straight from memory:\n" << widen;
  const std::string narrow = assembly(dense_spec("cast", cast_body(), {DType::f32}, {DType::f16}, {64}));
  EXPECT_TRUE(has(narrow, R"(vcvtps2ph\s+\$4, %[xyz]mm)")) << "nearest even (the MXCSR mode):\n" << narrow;
  EXPECT_TRUE(has(narrow, R"(vmov(dqu|ups|ntdq|ntps)\s+%[xyz]mm\d+, -?\d*\()")) << "vector stores:\n" << narrow;
  EXPECT_FALSE(has(widen + narrow, "__truncsfhf2|__extendhfsf2"));
}

TEST(CodegenAsm, Bf16UsesIntegerRoundingNotLibcalls) {
  const KernelSpec spec = dense_spec("cast", cast_body(), {DType::f32}, {DType::bf16}, {64});
  const std::string ir = ir_of(spec);
  EXPECT_FALSE(has(ir, "bfloat")) << ir;
  const std::string text = assembly(spec);
  EXPECT_FALSE(has(text, "__truncsfbf2|vcvtneps2bf16")) << text;
  EXPECT_TRUE(has(text, R"(vpadd[dw]\s+.*%[yz]mm)")) << "the +0x7FFF rounding, vectorized:\n" << text;
}

TEST(CodegenAsm, NoFmaContraction) {
  // x * y + z must round twice; the host has FMA, so only the options prevent it.
  ScalarBuilder b(3);
  const auto r = b.add(b.mul(b.input(0), b.input(1)), b.input(2));
  const KernelSpec spec = dense_spec("muladd", b.finish({r}), {DType::f32, DType::f32, DType::f32}, {DType::f32}, {64});
  const std::string text = assembly(spec);
  EXPECT_TRUE(has(text, "vmulps")) << text;
  EXPECT_FALSE(has(text, "vfmadd|vfmsub|vfnmadd")) << text;
  EXPECT_FALSE(has(ir_of(spec), "contract|fmuladd"));
}

TEST(CodegenAsm, StreamingLoopUsesNonTemporalStores) {
  const std::string text = assembly(dense_spec("c8", c8_body(), {DType::f32, DType::f32}, {DType::f32}, {64}));
  EXPECT_TRUE(has(text, R"(vmovntps\s+%[yz]mm)")) << text;
  // The regular loop keeps ordinary stores.
  EXPECT_TRUE(has(text, R"(vmovups\s+%[yz]mm\d+, )")) << text;
}

TEST(CodegenAsm, StridedKernelKeepsAnInnerLoop) {
  // A bias broadcast per channel: rows of W contiguous elements.
  ScalarBuilder b(2);
  KernelSpec spec = dense_spec("bias", b.finish({b.add(b.input(0), b.input(1))}), {DType::f32, DType::f32},
                               {DType::f32}, {2, 3, 8, 8});
  spec.inputs[1].strides = {0, 1, 0, 0};
  EXPECT_FILECHECK(ir_of(spec), R"(
CHECK-LABEL: define void @k(
CHECK: row:
CHECK: vector.body:
CHECK: fadd <{{[0-9]+}} x float>
CHECK: store <{{[0-9]+}} x float>
CHECK-NOT: nontemporal
CHECK: row.end:
)");
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
