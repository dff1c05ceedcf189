// A straight line of graph passes, verified and optionally dumped after each step.
#pragma once

#include "ir/graph.h"

#include <functional>
#include <string>
#include <vector>

namespace ampfuse::engine {

// A named step: rewrites the graph in place and returns whether it changed it (false only
// when it is sure it left the graph exactly as it was: dce that found nothing to remove).
// Names are kebab-case ("amp-convert") and appear in dumps and errors.
struct PassStep {
  std::string name;
  std::function<bool(ir::Graph&)> run;
};

// Runs the steps in order. After each one the graph is verified (ir::verify); a failure
// names the pass ("after pass 'cast-fold': node 7 ..."). A step that left the graph as it
// was is not verified again, unless it is the first (the graph it was given gets verified
// once): verifying infers every node's types, and a compile runs several passes that most
// graphs give nothing to do. With AMPFUSE_DUMP containing "ir",
// prints "// ----- after <name> -----" and the textual IR to stderr after every step (the
// caller prints the input, once: engine/lower.cpp).
void run_pipeline(ir::Graph& g, const std::vector<PassStep>& steps);

}  // namespace ampfuse::engine
