#include "engine/passes/pipeline.h"

#include "ir/dump.h"
#include "ir/error.h"
#include "ir/text_format.h"
#include "ir/verifier.h"

#include <cstdio>

namespace ampfuse::engine {

void run_pipeline(ir::Graph& g, const std::vector<PassStep>& steps) {
  const bool dump = dump_enabled("ir");
  bool verified = false;
  for (const PassStep& step : steps) {
    const bool changed = with_context(fmt::format("pass '{}'", step.name), [&] { return step.run(g); });
    if (changed || !verified) with_context(fmt::format("after pass '{}'", step.name), [&] { ir::verify(g); });
    verified = true;
    if (dump) fmt::print(stderr, "// ----- after {} -----\n{}", step.name, ir::print_graph(g));
  }
}

}  // namespace ampfuse::engine
