// cast_fold: which casts go, which stay, and that folding never changes what a graph computes.
#include "engine/passes/cast_fold.h"

#include "ir/builder.h"
#include "ir/text_format.h"
#include "ir/verifier.h"
#include "runtime/interpreter.h"
#include "tests/filecheck.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace ampfuse::testing {
namespace {

using ir::DType;

std::string fold(const char* text, int expected_removed) {
  ir::Graph g = ir::parse_graph(text);
  EXPECT_EQ(engine::cast_fold(g), expected_removed);
  ir::verify(g);
  return ir::print_graph(g);
}

TEST(CastFold, ExactRoundTripDisappears) {
  EXPECT_FILECHECK(fold(R"(graph {
    %x = var input : bf16[4]
    %up = amp_cast(%x) {dtype=f32} : f32[4]
    %down = amp_cast(%up) {dtype=bf16} : bf16[4]
    %y = relu(%down) : bf16[4]
    return %y
  })", 2),
                   R"(
    CHECK: %x = var input
    CHECK-NEXT: %y = relu(%x) : bf16[4]
    CHECK-NEXT: return %y)");
}

TEST(CastFold, RoundTripThroughF64AndIntegersDisappears) {
  EXPECT_FILECHECK(fold(R"(graph {
    %x = var input : f16[4]
    %i = var input : i8[4]
    %a = Cast(%x) {dtype=f64} : f64[4]
    %b = Cast(%a) {dtype=f16} : f16[4]
    %c = Cast(%i) {dtype=i32} : i32[4]
    %d = Cast(%c) {dtype=i8} : i8[4]
    return %b, %d
  })", 4),
                   R"(
    CHECK-NOT: Cast
    CHECK: return %x, %i)");
}

TEST(CastFold, LossyRoundTripStaysUnlessAmpInsertedBoth) {
  const char* user = R"(graph {
    %x = var input : f32[4]
    %down = amp_cast(%x) {dtype=f16} : f16[4]
    %up = amp_cast(%down) {dtype=f32} : f32[4]
    return %up
  })";
  EXPECT_FILECHECK(fold(user, 0), R"(
    CHECK: %down = amp_cast(%x)
    CHECK: %up = amp_cast(%down)
    CHECK: return %up)");

  const char* one_inserted = R"(graph {
    %x = var input : f32[4]
    %down = amp_cast(%x) {dtype=f16} hints={"__amp_inserted__":"1"} : f16[4]
    %up = amp_cast(%down) {dtype=f32} : f32[4]
    return %up
  })";
  EXPECT_FILECHECK(fold(one_inserted, 0), "CHECK: %up = amp_cast(%down)");

  const char* both_inserted = R"(graph {
    %x = var input : f32[4]
    %down = amp_cast(%x) {dtype=f16} hints={"__amp_inserted__":"1"} : f16[4]
    %up = amp_cast(%down) {dtype=f32} hints={"__amp_inserted__":"1"} : f32[4]
    %y = relu(%up) : f32[4]
    return %y
  })";
  EXPECT_FILECHECK(fold(both_inserted, 2), R"(
    CHECK-NOT: amp_cast
    CHECK: %y = relu(%x) : f32[4])");
}

TEST(CastFold, NoOpCastsDisappear) {
  EXPECT_FILECHECK(fold(R"(graph {
    %x = var input : f32[4]
    %i = var input : i32[4]
    %a = Cast(%x) {dtype=f32} : f32[4]
    %b = amp_cast(%i) {dtype=f16} : i32[4]
    return %a, %b
  })", 2),
                   R"(
    CHECK-NOT: Cast
    CHECK: return %x, %i)");
}

TEST(CastFold, DuplicateCastsOfOneValueBecomeOne) {
  EXPECT_FILECHECK(fold(R"(graph {
    %x = var input : f32[4]
    %a = amp_cast(%x) {dtype=bf16} : bf16[4]
    %b = Cast(%x) {dtype=bf16} : bf16[4]
    %c = amp_cast(%x) {dtype=f16} : f16[4]
    %ra = relu(%a) : bf16[4]
    %rb = relu(%b) : bf16[4]
    return %ra, %rb, %c
  })", 1),
                   R"(
    CHECK: %a = amp_cast(%x) {dtype=bf16}
    CHECK-NOT: %b =
    CHECK: %c = amp_cast(%x) {dtype=f16}
    CHECK: %ra = relu(%a)
    CHECK: %rb = relu(%a))");
}

TEST(CastFold, ChainsShortenOnlyAfterAnExactStep) {
  // f16 -> f32 is exact, so f16 -> f32 -> bf16 is f16 -> bf16; i8 -> f32 is exact too, and
  // the amp_cast that would now read an integer (and pass it through) becomes a Cast.
  EXPECT_FILECHECK(fold(R"(graph {
    %h = var input : f16[4]
    %i = var input : i8[4]
    %hf = amp_cast(%h) {dtype=f32} : f32[4]
    %hb = amp_cast(%hf) {dtype=bf16} : bf16[4]
    %if = Cast(%i) {dtype=f32} : f32[4]
    %ib = amp_cast(%if) {dtype=bf16} : bf16[4]
    return %hb, %ib
  })", 2),
                   R"(
    CHECK: %hb = amp_cast(%h) {dtype=bf16} : bf16[4]
    CHECK: %ib = Cast(%i) {dtype=bf16} : bf16[4]
    CHECK: return %hb, %ib)");

  // Lossy first steps stay: f32 -> i32 -> f32 truncates, f32 -> f16 -> bf16 rounds twice.
  EXPECT_FILECHECK(fold(R"(graph {
    %x = var input : f32[4]
    %i = Cast(%x) {dtype=i32} : i32[4]
    %f = Cast(%i) {dtype=f32} : f32[4]
    %h = amp_cast(%x) {dtype=f16} : f16[4]
    %b = amp_cast(%h) {dtype=bf16} : bf16[4]
    return %f, %b
  })", 0),
                   R"(
    CHECK: %f = Cast(%i)
    CHECK: %b = amp_cast(%h))");
}

// ---------------------------------------------------------------------------------------
// Random graphs of casts: folding must not change a single output bit (NaN as NaN-ness).

const std::vector<double>& interesting_values() {
  static const std::vector<double> v = {
      0.0, -0.0, 1.0, -1.0, 0.5, 1.0 / 3, 0.1, 1 + 0x1p-8, 1 + 0x1p-11, 1 + 0x1p-9 + 0x1p-11,
      65504, 65519.99, 65520, 70000, -1e6, 0x1p-14, 0x1p-24, 3e-8, 0x1p-25, 1e-40, 3.4e38,
      255.5, 256, 257, -128.7, -129, 127.9, 300, 2147483520.0, -3e9, 1e10,
      std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
      std::numeric_limits<double>::quiet_NaN(), 7, -7.5, 12345.678, 0.099975586, 3.0e-5};
  return v;
}

runtime::Tensor filled(DType t) {
  const auto& v = interesting_values();
  runtime::Tensor x(ir::TensorType{t, {static_cast<int64_t>(v.size())}});
  for (size_t i = 0; i < v.size(); ++i) x.set_f64(static_cast<int64_t>(i), v[i]);
  return x;
}

bool same_bits(const runtime::Tensor& a, const runtime::Tensor& b) {
  if (a.type() != b.type()) return false;
  for (int64_t i = 0; i < a.size(); ++i) {
    const double x = a.get_f64(i), y = b.get_f64(i);
    if (std::isnan(x) || std::isnan(y)) {
      if (std::isnan(x) != std::isnan(y)) return false;
    } else if (x != y || std::signbit(x) != std::signbit(y)) {
      return false;
    }
  }
  return true;
}

ir::Graph random_cast_graph(std::mt19937& rng) {
  static const char* kAll[] = {"float32", "float16", "bfloat16", "float64", "int8", "uint8", "int32", "int64", "bool"};
  static const char* kFloat[] = {"float32", "float16", "bfloat16", "float64"};
  ir::GraphBuilder b;
  std::vector<ir::ValueRef> pool = {b.input("x", {DType::f32, {static_cast<int64_t>(interesting_values().size())}}),
                                    b.input("h", {DType::f16, {static_cast<int64_t>(interesting_values().size())}}),
                                    b.input("i", {DType::i8, {static_cast<int64_t>(interesting_values().size())}})};
  const int n = std::uniform_int_distribution<int>(3, 14)(rng);
  for (int k = 0; k < n; ++k) {
    // Recent values more often, so that chains form.
    const size_t lo = pool.size() > 3 && rng() % 3 ? pool.size() - 3 : 0;
    const ir::ValueRef in = pool[std::uniform_int_distribution<size_t>(lo, pool.size() - 1)(rng)];
    const bool amp = rng() % 2;
    const char* to = amp ? kFloat[rng() % 4] : kAll[rng() % 9];
    pool.push_back(b.op(amp ? "amp_cast" : "Cast", {in}, {{"dtype", to}}));
  }
  for (size_t k = 3; k < pool.size(); ++k)
    if (k + 1 == pool.size() || rng() % 2) b.output(pool[k]);
  return b.finish();
}

TEST(CastFold, RandomCastGraphsComputeTheSameBits) {
  std::mt19937 rng(20240611);
  const runtime::Bindings inputs = {{"x", filled(DType::f32)}, {"h", filled(DType::f16)}, {"i", filled(DType::i8)}};
  int removed = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const ir::Graph g = random_cast_graph(rng);
    ir::Graph folded = g;
    removed += engine::cast_fold(folded);
    ir::verify(folded);
    const auto want = runtime::interpret(g, inputs);
    const auto got = runtime::interpret(folded, inputs);
    ASSERT_EQ(want.size(), got.size());
    for (size_t o = 0; o < want.size(); ++o)
      ASSERT_TRUE(same_bits(want[o], got[o])) << "output " << o << " of\n" << ir::print_graph(g) << "folded to\n"
                                              << ir::print_graph(folded);
  }
  EXPECT_GT(removed, 100);  // the graphs do give the pass work
}

}  // namespace
}  // namespace ampfuse::testing
