// The test matcher itself: positive and negative cases, so a CHECK that cannot fail is caught.
#include "tests/filecheck.h"

namespace ampfuse::testing {
namespace {

const char* kText = R"(graph {
  %a = var input : f32[2]
  %b = amp_cast(%a) {dtype=bf16} : bf16[2]
  %c = relu(%b) : bf16[2]
  return %c
})";

TEST(FileCheck, MatchesInOrderWithCaptures) {
  EXPECT_EQ(filecheck(kText, R"(
    CHECK: %[[X:[a-z]+]] = var input
    CHECK-NEXT: amp_cast(%[[X]])
    CHECK-SAME: {dtype=bf16}
    CHECK-NOT: Cast
    CHECK: return %c)"), "");
}

TEST(FileCheck, ReportsMissingWrongOrderAndForbidden) {
  EXPECT_NE(filecheck(kText, "CHECK: Convolution"), "");
  EXPECT_NE(filecheck(kText, "CHECK: relu\nCHECK: amp_cast"), "");
  EXPECT_NE(filecheck(kText, "CHECK: var\nCHECK-NEXT: relu"), "");
  EXPECT_NE(filecheck(kText, "CHECK: var\nCHECK-NOT: amp_cast\nCHECK: relu"), "");
  EXPECT_NE(filecheck(kText, "CHECK: %[[X:[a-z]+]] = var\nCHECK: relu(%[[X]])"), "");
  EXPECT_NE(filecheck(kText, "CHECK: amp_cast\nCHECK-SAME: dtype=f16"), "");
}

TEST(FileCheck, DagMatchesAnyOrder) {
  EXPECT_EQ(filecheck(kText, "CHECK-DAG: relu\nCHECK-DAG: amp_cast\nCHECK: return"), "");
  EXPECT_NE(filecheck(kText, "CHECK-DAG: relu\nCHECK-DAG: Convolution"), "");
}

}  // namespace
}  // namespace ampfuse::testing
