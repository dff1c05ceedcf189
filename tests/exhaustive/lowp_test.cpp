// f32 <-> f16 / bf16 conversions against an independent scaling-based reference,
// exhaustively over all 2^32 f32 inputs (ExhaustiveLowp.*, labelled "exhaustive").
#include "ir/lowp.h"

#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>

namespace ampfuse::ir {
namespace {

// Reference rounding by arithmetic in double: scale x so that the target's last mantissa
// bit has weight 1, round with nearbyint (round-half-even in the default mode), scale back.
// Exact because every scaling is by a power of two and |x| < 2^128 fits a double.
double reference_round(float x, int mantissa_bits, int min_normal_exp, double max_finite) {
  const double d = x;
  if (d == 0) return d;
  int e = 0;
  std::frexp(d, &e);  // d = m * 2^e, 0.5 <= |m| < 1
  int exp = std::max(e - 1, min_normal_exp);  // subnormals share the smallest exponent's ulp
  const double ulp = std::ldexp(1.0, exp - mantissa_bits);
  const double r = std::nearbyint(d / ulp) * ulp;
  // Overflow: values that round beyond the largest finite number become infinity.
  if (std::fabs(r) > max_finite) return std::copysign(INFINITY, d);
  return r;
}

uint16_t reference_f16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint16_t sign = (u >> 16) & 0x8000;
  if (std::isnan(x)) return 0xFFFF;  // marker: checked separately
  if (std::isinf(x)) return sign | 0x7C00;
  const double r = reference_round(x, 10, -14, 65504.0);
  if (std::isinf(r)) return sign | 0x7C00;
  const double a = std::fabs(r);
  if (a < std::ldexp(1.0, -14)) return sign | static_cast<uint16_t>(a * std::ldexp(1.0, 24));
  int e = 0;
  const double m = std::frexp(a, &e);  // a = m * 2^e
  const uint16_t exp_field = static_cast<uint16_t>(e - 1 + 15);
  const uint16_t man = static_cast<uint16_t>((m * 2 - 1) * 1024);
  return sign | static_cast<uint16_t>(exp_field << 10) | man;
}

uint16_t reference_bf16(float x) {
  if (std::isnan(x)) return 0xFFFF;
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint16_t sign = (u >> 16) & 0x8000;
  if (std::isinf(x)) return sign | 0x7F80;
  const double max_bf16 = std::ldexp(255.0 / 128.0, 127);  // 0x7F7F
  const double r = reference_round(x, 7, -126, max_bf16);
  if (std::isinf(r)) return sign | 0x7F80;
  // r is representable in f32 with at most 8 significant bits: its top half is the answer.
  return sign | static_cast<uint16_t>(std::bit_cast<uint32_t>(static_cast<float>(std::fabs(r))) >> 16);
}

// Runs check(u) over every 32-bit pattern on all cores; returns the number of mismatches
// and the first one.
template <class Check>
std::pair<uint64_t, uint32_t> for_all_f32(Check check) {
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::atomic<uint64_t> bad{0};
  std::atomic<uint32_t> first{0};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const uint64_t begin = (uint64_t{1} << 32) * t / threads, end = (uint64_t{1} << 32) * (t + 1) / threads;
      for (uint64_t i = begin; i < end; ++i) {
        if (!check(static_cast<uint32_t>(i))) {
          if (bad.fetch_add(1) == 0) first = static_cast<uint32_t>(i);
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  return {bad.load(), first.load()};
}

bool f16_matches(uint32_t u) {
  const float x = std::bit_cast<float>(u);
  const uint16_t got = f32_to_f16_bits(x);
  if (std::isnan(x))  // NaN stays a quiet NaN with its sign
    return (got & 0x7C00) == 0x7C00 && (got & 0x0200) && ((got & 0x8000) == ((u >> 16) & 0x8000));
  return got == reference_f16(x);
}

bool bf16_matches(uint32_t u) {
  const float x = std::bit_cast<float>(u);
  const uint16_t got = f32_to_bf16_bits(x);
  if (std::isnan(x)) return (got & 0x7F80) == 0x7F80 && (got & 0x0040) && ((got & 0x8000) == ((u >> 16) & 0x8000));
  return got == reference_bf16(x);
}

TEST(ExhaustiveLowp, F32ToF16AllInputs) {
  auto [bad, first] = for_all_f32(f16_matches);
  EXPECT_EQ(bad, 0u) << "first mismatch at f32 bits 0x" << std::hex << first;
}

TEST(ExhaustiveLowp, F32ToBf16AllInputs) {
  auto [bad, first] = for_all_f32(bf16_matches);
  EXPECT_EQ(bad, 0u) << "first mismatch at f32 bits 0x" << std::hex << first;
}

TEST(Lowp, WideningIsExactForAll16BitPatterns) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_bits_to_f32(static_cast<uint16_t>(h));
    const int exp = (h >> 10) & 0x1F, man = h & 0x3FF;
    const double sign = (h & 0x8000) ? -1 : 1;
    if (exp == 31) {
      EXPECT_TRUE(man ? std::isnan(f) : std::isinf(f)) << h;
      continue;
    }
    const double expect = exp == 0 ? sign * std::ldexp(man, -24) : sign * std::ldexp(1024 + man, exp - 25);
    ASSERT_EQ(static_cast<double>(f), expect) << "f16 bits " << h;
    ASSERT_EQ(std::signbit(f), sign < 0) << h;
    // Every f16 value survives the round trip exactly.
    ASSERT_EQ(f32_to_f16_bits(f), man && exp == 31 ? (h | 0x200) : h) << h;

    const float b = bf16_bits_to_f32(static_cast<uint16_t>(h));
    if (!std::isnan(b)) {
      ASSERT_EQ(f32_to_bf16_bits(b), h) << "bf16 bits " << h;
    }
  }
}

TEST(Lowp, KnownValues) {
  EXPECT_EQ(f32_to_f16_bits(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_f16_bits(65504.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16_bits(65519.99f), 0x7BFF);
  EXPECT_EQ(f32_to_f16_bits(65520.0f), 0x7C00);  // the tie rounds to even: infinity
  EXPECT_EQ(f32_to_f16_bits(0x1p-24f), 0x0001);   // smallest subnormal kept
  EXPECT_EQ(f32_to_f16_bits(0x1p-25f), 0x0000);   // tie to even: zero
  EXPECT_EQ(f32_to_f16_bits(0x1.8p-25f), 0x0001);
  EXPECT_EQ(f32_to_f16_bits(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16_bits(1.0f + 0x1p-8f), 0x3F80);  // tie: to even (down)
  EXPECT_EQ(f32_to_bf16_bits(1.0f + 0x1.8p-8f), 0x3F81);
  EXPECT_EQ(f32_to_bf16_bits(std::bit_cast<float>(0x00000001u)), 0x0000);
  EXPECT_EQ(f32_to_bf16_bits(std::bit_cast<float>(0x00018000u)), 0x0002);  // subnormal tie up to even
  EXPECT_EQ(f32_to_bf16_bits(3.4e38f), 0x7F80);                            // rounds past max: Inf
}

TEST(Lowp, F64NarrowingHasNoDoubleRounding) {
  // 1 + 2^-11 + 2^-40 is just above the f16 tie between 1 and 1+2^-10. Narrowing to f32
  // with round-to-nearest would land on the tie and round down; the right answer is up.
  const double d = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  EXPECT_EQ(f32_to_f16_bits(static_cast<float>(d)), 0x3C00);  // the double-rounding trap
  EXPECT_EQ(f64_to_f16_bits(d), 0x3C01);
  const double b = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40);
  EXPECT_EQ(f64_to_bf16_bits(b), 0x3F81);
  EXPECT_EQ(f64_to_f16_bits(1e300), 0x7C00);
  EXPECT_EQ(f64_to_bf16_bits(-1e-300), 0x8000);
}

}  // namespace
}  // namespace ampfuse::ir
