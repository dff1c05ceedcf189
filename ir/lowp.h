// Exact conversions between f32 and the two 16-bit float formats.
//
// These are the definition every backend must match bit for bit (docs/design.md, "Semantics").
// f32 -> f16 / bf16: round to nearest, ties to even; overflow gives +-Inf; NaN stays NaN
// (quiet, sign kept); subnormal results are produced, never flushed. The widening
// directions are exact.
//
// Algorithm (bf16): bf16 is the top half of an f32, so add 0x7FFF plus the lowest kept bit
// to the f32 bits and drop the low 16 bits: a carry out of the dropped half is exactly
// "round up", and the kept-bit term breaks ties towards even. Overflow rounds into the
// exponent field, which gives Inf on its own. NaN is tested first so the carry cannot
// turn it into Inf.
//
// Algorithm (f16): split by the magnitude of the input:
//   |x| >= 65520 (the first value that rounds past the largest f16) -> Inf;
//   normal f16 range -> rebias the exponent, then round the 13 dropped mantissa bits
//     the same way as bf16 (add 0xFFF + lowest kept bit, shift);
//   below 2^-14 -> subnormal: add the f32 value 0.5 (a magic number whose ulp is 2^-24,
//     the f16 subnormal step), so the FPU's own round-to-nearest-even does the rounding,
//     and read the low bits.
//
// The f16 conversions compute every case and then select one, without branches, so that
// loops over them vectorize (the loss scaler's unscale, engine/api/loss_scaler.cpp; GCC
// vectorizes the float add of the subnormal case only with -fno-trapping-math). The cases
// not selected may compute garbage from the input (the rebias of a NaN, 0.5 + a huge
// value); it is discarded, and no FP exception flag is read anywhere.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace ampfuse::ir {

inline uint16_t f32_to_bf16_bits(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float bf16_bits_to_f32(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

inline uint16_t f32_to_f16_bits(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7FFFFFFFu;
  // Subnormal (or zero): 0.5f + |x| rounds |x| to a multiple of 2^-24 with the FPU's RNE.
  const uint32_t subnormal = std::bit_cast<uint32_t>(std::bit_cast<float>(a) + 0.5f) - 0x3F000000u;
  // Normal: rebias the exponent, round the 13 dropped bits to nearest even.
  uint32_t r = a - ((127u - 15u) << 23);
  r += 0xFFFu + ((r >> 13) & 1u);
  const uint32_t normal = r >> 13;
  const uint32_t nan = 0x7E00u | ((a >> 13) & 0x1FFu);  // quiet, top payload bits kept
  uint32_t v = subnormal;
  v = a >= 0x38800000u ? normal : v;   // >= 2^-14: normal f16
  v = a >= 0x477FF000u ? 0x7C00u : v;  // >= 65520 rounds to Inf (Inf included)
  v = a > 0x7F800000u ? nan : v;
  return static_cast<uint16_t>(sign | v);
}

inline float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t man = h & 0x3FFu;
  const uint32_t inf_nan = sign | 0x7F800000u | (man << 13);
  const uint32_t normal = sign | ((exp + 112u) << 23) | (man << 13);
  // Zero or subnormal: man * 2^-24, exact in f32 (converted as a signed int, which
  // vectorizes where an unsigned conversion does not).
  const uint32_t subnormal = sign | std::bit_cast<uint32_t>(static_cast<float>(static_cast<int32_t>(man)) * 0x1p-24f);
  uint32_t bits = subnormal;
  bits = exp != 0 ? normal : bits;
  bits = exp == 0x1Fu ? inf_nan : bits;
  return std::bit_cast<float>(bits);
}

// f64 -> f16 / bf16 without double rounding: narrow to f32 with round-to-odd (truncate,
// then set the lowest bit when inexact), which keeps enough information for the second
// rounding to be correct because f32 carries more than two extra bits over either format.
inline float f64_to_f32_round_to_odd(double d) {
  float f = static_cast<float>(d);
  if (static_cast<double>(f) == d || d != d) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(f) | 1u);
}
inline uint16_t f64_to_f16_bits(double d) { return f32_to_f16_bits(f64_to_f32_round_to_odd(d)); }
inline uint16_t f64_to_bf16_bits(double d) { return f32_to_bf16_bits(f64_to_f32_round_to_odd(d)); }

// Round an f32 value to the nearest representable value of the 16-bit format.
inline float round_to_bf16(float x) { return bf16_bits_to_f32(f32_to_bf16_bits(x)); }
inline float round_to_f16(float x) { return f16_bits_to_f32(f32_to_f16_bits(x)); }

}  // namespace ampfuse::ir
