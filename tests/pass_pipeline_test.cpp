// run_pipeline (engine/passes/pipeline.h): each step's result is verified and a broken one
// is blamed on its pass; a step that reports it left the graph as it was is not verified
// again (except the first, which verifies the graph the pipeline was given).
#include "engine/passes/pipeline.h"

#include "ir/text_format.h"
#include "ir/type_inference.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

namespace ampfuse::engine {
namespace {

using ampfuse::testing::error_message;

ir::Graph typed_graph() {
  ir::Graph g = ir::parse_graph("graph {\n %x = var input : f32[2,3]\n %r = relu(%x)\n return %r\n}");
  ir::infer_types(g);
  return g;
}

// Breaks the graph the way a buggy pass could: relu's output type no longer follows.
void break_types(ir::Graph& g) { g.nodes[1].outputs[0].shape = {3, 2}; }

TEST(PassPipeline, AStepThatChangedTheGraphIsVerifiedAndBlamed) {
  ir::Graph g = typed_graph();
  const std::string e = error_message([&] {
    run_pipeline(g, {{"keep", [](ir::Graph&) { return false; }},
                     {"bad-rewrite", [](ir::Graph& x) {
                        break_types(x);
                        return true;
                      }}});
  });
  EXPECT_NE(e.find("after pass 'bad-rewrite': node 1 'r' (relu): output 0 is f32[3,2], but inference gives f32[2,3]"),
            std::string::npos)
      << e;
}

TEST(PassPipeline, TheFirstStepIsVerifiedEvenWhenItChangedNothing) {
  ir::Graph g = typed_graph();
  break_types(g);  // the pipeline's input is broken
  const std::string e = error_message([&] { run_pipeline(g, {{"nothing-to-do", [](ir::Graph&) { return false; }}}); });
  EXPECT_NE(e.find("after pass 'nothing-to-do': node 1 'r' (relu)"), std::string::npos) << e;
}

TEST(PassPipeline, AStepThatChangedNothingIsNotVerifiedAgain) {
  // The contract, shown with a step that breaks it: one that says "unchanged" is trusted
  // (its graph is the one verified after the step before), so nothing checks it again.
  ir::Graph g = typed_graph();
  EXPECT_NO_THROW(run_pipeline(g, {{"first", [](ir::Graph&) { return true; }},
                                   {"claims-unchanged", [](ir::Graph& x) {
                                      break_types(x);
                                      return false;
                                    }}}));
  // Reporting the change gets it verified.
  ir::Graph h = typed_graph();
  EXPECT_THROW(run_pipeline(h, {{"first", [](ir::Graph&) { return true; }},
                                {"reports-change", [](ir::Graph& x) {
                                   break_types(x);
                                   return true;
                                 }}}),
               Error);
}

}  // namespace
}  // namespace ampfuse::engine
