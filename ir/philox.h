// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011;
// cuRAND's and JAX's counter-based generator) and the dropout mask built on it.
//
// A counter-based generator is a pure function of (key, counter): the random bits of
// element i are computed from i itself, so a mask is never stored, the backward pass
// recomputes it, and every backend (interpreter, fused CPU code, CUDA) gets the same bits
// in any evaluation order. Header-only and constexpr so that each backend evaluates the
// same integer arithmetic.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

namespace ampfuse::ir {

using PhiloxBlock = std::array<uint32_t, 4>;

// Ten rounds of Philox-4x32 on `counter` under `key` (Random123's philox4x32_R(10, ...)).
constexpr PhiloxBlock philox4x32_10(PhiloxBlock counter, std::array<uint32_t, 2> key) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;  // round multipliers
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;  // key schedule increments
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    const uint64_t p0 = uint64_t{kMul0} * counter[0], p1 = uint64_t{kMul1} * counter[2];
    counter = {static_cast<uint32_t>(p1 >> 32) ^ counter[1] ^ key[0], static_cast<uint32_t>(p1),
               static_cast<uint32_t>(p0 >> 32) ^ counter[3] ^ key[1], static_cast<uint32_t>(p0)};
  }
  return counter;
}

// The 24 random bits of element `index` of a stream: word 0 of the Philox block at counter
// (index, offset) under key `seed`, each 64-bit number split low word first. 24 bits make a
// uniform number in [0, 1) exact in f32 (u = bits * 2^-24).
constexpr uint32_t philox_bits24(uint64_t seed, uint64_t offset, uint64_t index) {
  const PhiloxBlock block = philox4x32_10(
      {static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), static_cast<uint32_t>(offset),
       static_cast<uint32_t>(offset >> 32)},
      {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  return block[0] >> 8;
}

// The counter offset of step `step` of a stream that advances `stride` counters a step
// (ScalarOp::philox_bits24_at): offset + uint64(step) * stride, wrapping modulo 2^64.
// `step` arrives as a float (a tensor value); every backend turns it into an integer this
// one way: truncated toward zero, NaN and negatives as 0, 2^53 and beyond as 2^53 (where
// f64 stops holding every integer). Callers pass non-negative integers below 2^24, exact in
// f32; the clamps only make out-of-range steps deterministic instead of undefined.
constexpr uint64_t philox_step_count(double step) {
  constexpr double kMax = 9007199254740992.0;  // 2^53
  return step >= 0 ? static_cast<uint64_t>(step < kMax ? step : kMax) : 0;
}
constexpr uint64_t philox_step_offset(uint64_t offset, uint64_t stride, double step) {
  return offset + philox_step_count(step) * stride;
}

// Dropout keeps element i when u_i < 1 - p, as MXNet keeps an element when its uniform
// number is below pkeep = 1 - p. With u = bits * 2^-24 that is bits < ceil((1 - p) * 2^24):
// an integer compare, the same on every backend. p = 0 keeps all, p = 1 none.
inline uint32_t dropout_keep_threshold(double p) {
  return static_cast<uint32_t>(std::ceil((1.0 - p) * 16777216.0));
}

}  // namespace ampfuse::ir
