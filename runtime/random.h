// A tiny seeded generator whose every output is fixed by its definition, on every platform.
//
// SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators",
// OOPSLA 2014): the state advances by the golden-ratio increment and each output is the
// state through a fixed 64-bit mixer. The standard library's distributions are not used
// because their outputs are implementation-defined; the conversions below are exact.
#pragma once

#include <cstdint>
#include <string_view>

namespace ampfuse::runtime {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  static constexpr uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  uint64_t next() {
    state_ += 0x9E3779B97F4A7C15ull;
    return mix(state_);
  }

  // Uniform in [0, 1): the top 53 bits as a binary fraction, exact in a double.
  double next_unit() { return static_cast<double>(next() >> 11) * 0x1p-53; }

  // Uniform integer in [0, bound), bound > 0: the high half of a 64x64-bit product, which
  // avoids the low-bit patterns of `x % bound` (the remaining bias is below 2^-40 for the
  // bounds used here).
  uint64_t next_below(uint64_t bound) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(next()) * bound) >> 64);
  }

 private:
  uint64_t state_;
};

// FNV-1a (64-bit) of a name: lets each variable draw from its own stream, so adding or
// reordering variables does not change the values of the others.
constexpr uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001B3ull;
  }
  return h;
}

}  // namespace ampfuse::runtime
