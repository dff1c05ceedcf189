// Special functions whose definition is MXNet's own code rather than the C library's, and
// the reentrant wrappers generated kernels call (ir/scalar_program.h, "library calls").
//
// Each is one C++ function: the reference interpreter calls it, and LLVM kernels call the
// same function by the symbol name given here, which runtime/jit.cpp resolves to it.
#pragma once

#include <span>
#include <string_view>

namespace ampfuse::ir {

// MXNet 1.9's erfinv (src/operator/contrib/erfinv-inl.h), evaluated in double: y / (2/sqrt(pi))
// for |y| < 1e-7, ndtri((y + 1) / 2) / sqrt(2) inside (-1, 1) with cephes' rational
// approximations of ndtri, +-Inf at +-1, NaN outside [-1, 1] and for NaN. MXNet computes it
// in double for every dtype and rounds once to the output: so does ampfuse.
double mxnet_erfinv(double y);

// Symbols generated kernels call besides the C library's (whose names the process already
// resolves): erfinv, and lgamma through lgamma_r, since lgamma writes the global signgam and
// kernels run on several threads at once.
inline constexpr std::string_view kErfinvSymbol = "ampfuse_erfinv";      // double(double)
inline constexpr std::string_view kLgammaF32Symbol = "ampfuse_lgammaf";  // float(float)
inline constexpr std::string_view kLgammaF64Symbol = "ampfuse_lgamma";   // double(double)

struct KernelHelperSymbol {
  std::string_view name;
  void* address;
};
// The three symbols above with their addresses, for the JIT's symbol table.
std::span<const KernelHelperSymbol> kernel_helper_symbols();

}  // namespace ampfuse::ir

extern "C" {
double ampfuse_erfinv(double y);
float ampfuse_lgammaf(float x);  // lgammaf_r, sign discarded
double ampfuse_lgamma(double x);
}
