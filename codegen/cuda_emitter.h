// The CUDA C++ emitter: one KernelSignature -> the source of one `extern "C" __global__`
// kernel, compiled at run time by NVRTC (runtime/cuda/nvrtc_compiler.h).
//
// Same meaning as the LLVM CPU emitter (codegen/kernel_emitter.h) and the reference
// evaluator (runtime/scalar_eval.cpp), bit for bit for the exact ops:
//  - f16/bf16 loads and stores convert in integer code (ir/lowp.h's algorithms), never
//    through cuda_fp16 intrinsics, so subnormals are kept and ties go to even; f64 values
//    narrow through f32 with round-to-odd first, as on the CPU.
//  - float -> integer stores truncate and saturate, NaN -> 0, written out explicitly
//    (a C++ cast of an out-of-range value is undefined and NVVM may exploit it).
//  - add/sub/mul/div/sqrt are IEEE round-to-nearest: compile with --fmad=false
//    --prec-div=true --prec-sqrt=true --ftz=false (kNvrtcMathOptions).
//  - exp, log, log1p, expm1, erf, tanh, pow call CUDA's math library (libdevice __nv_*),
//    non-fast versions. Their maximum errors from the CUDA C++ Programming Guide, appendix
//    "Mathematical Functions", in ulp of the correctly rounded result:
//      f32: expf 2, logf 1, log1pf 1, expm1f 1, erff 2, tanhf 2, powf 4
//      f64: exp 1, log 1, log1p 1, expm1 1, erf 2, tanh 1, pow 2
//    The interpreter uses glibc (<= 1 ulp for these), so a fused GPU result is within the
//    sum of both bounds of the interpreter's (kCudaTranscendentalUlp).
//  - round and fmod are exact (roundf, fmodf). The library-call ops (ir/scalar_program.h)
//    call CUDA's function of the same name, non-fast (erfinv: erfinvf/erfinv, not MXNet's
//    algorithm). The same guide's table gives at most 4 ulp for the trigonometric,
//    hyperbolic, log2/log10 and cbrt functions in f32 and f64, and more for tgamma (f32 5,
//    f64 10), f64 erfinv (5) and lgamma (6 / 4 away from its zeros in (-11, -2.26), no ulp
//    bound near them). Against the interpreter (glibc; MXNet's erfinv in double) add an ulp:
//    tgamma, lgamma and erfinv can exceed kCudaTranscendentalUlp, the others stay within it.
//  - philox_bits24 is integer code (af_philox_bits24 in the prelude) of the flat iteration
//    index, which the element function then takes as an argument: exact. philox_bits24_at
//    computes its counter offset from the step value first (af_step_offset), in the same
//    integer arithmetic as the interpreter (ir::philox_step_offset).
//
// Kernel ABI (runtime/cuda/cuda_driver.cpp builds them; cuda_index_arguments() gives the scalars):
//   NAME(long long count,                  element count, > 0
//        T0* op0, ..., Tk* opk,             inputs then outputs, element pointers
//        long long e0..e{rank-1},           extents (strided kernels only)
//        long long s<k>_<d> ...,             the `general` strides of strided operands,
//                                           operand-major, in elements
//        double p0..p{num_params-1},        parameters, rounded to the compute type inside
//        int* flags)                        when there are flags: one int per flag, set to 1
//                                           by at most one thread per block; never cleared
// Loops are grid-stride over flat row-major indices. Flat kernels (every operand
// contiguous or scalar) move V elements per step with 128-bit loads and stores of the
// widest contiguous operand (V = 16 / its size) when every contiguous pointer is aligned
// to its vector width, checked at run time, then finish with a scalar tail; unaligned
// pointers (slices) take the scalar loop. Strided kernels count and divide in unsigned
// 32-bit arithmetic and offset in int32 unless wide_index, then in int64; flat kernels
// count in int64 (they never divide, and their element count is not in the signature).
// Non-finite flags: each thread ORs what it saw, then __syncthreads_or per block and one
// plain store of 1 by thread 0 of a block that saw one: no atomics, no contention.
#pragma once

#include "codegen/kernel_spec.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ampfuse::codegen {

inline constexpr int kCudaBlockSize = 256;
// Upper bound on |GPU - interpreter| for one transcendental op, in ulp (see above).
inline constexpr int kCudaTranscendentalUlp = 5;

// Helpers every kernel uses (conversions, saturation, packs). Emit once per translation
// unit, before any kernel.
std::string cuda_prelude();

// One kernel named `name` (a C identifier), without the prelude; several may share a
// translation unit when their names differ.
std::string emit_cuda_kernel(const KernelSignature& sig, const std::string& name);

// cuda_prelude() + emit_cuda_kernel(): a whole translation unit. With AMPFUSE_DUMP=code
// it is printed to stderr.
std::string emit_cuda_source(const KernelSignature& sig, const std::string& name);

// The signature's key without what only CPU code depends on, its tile shape
// (KernelSignature::tile, for the staged transposes) and whether it streams: the CUDA
// source is the same either way, so specs that differ only there share one CUDA kernel
// (its name and its NVRTC build's cache key).
std::string cuda_signature_key(const KernelSignature& sig);

// A C identifier for a signature: "ampfuse_" and 16 hex digits of a hash of
// cuda_signature_key().
std::string cuda_kernel_name(const KernelSignature& sig);

// Elements one loop step of a flat kernel handles per thread (1 for strided kernels).
int cuda_vector_width(const KernelSignature& sig);

// The kernel's scalar arguments after the operand pointers, in ABI order: extents and
// general strides (as int64) for strided kernels. Throws for a spec whose signature differs.
std::vector<int64_t> cuda_index_arguments(const KernelSpec& spec);

struct CudaDeviceLimits {
  int multiprocessors = 1;
  int max_threads_per_multiprocessor = 2048;
  int max_threads_per_block = 1024;
  int max_grid_x = 2147483647;
};

struct CudaLaunchConfig {
  unsigned grid = 1;
  unsigned block = kCudaBlockSize;
};

// Enough blocks to fill every multiprocessor once (grid-stride loops do the rest), fewer
// when `elements` / `vector_width` steps need fewer. `elements` > 0.
CudaLaunchConfig cuda_launch_config(int64_t elements, int vector_width, const CudaDeviceLimits& device);

}  // namespace ampfuse::codegen
