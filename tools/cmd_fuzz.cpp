// `ampfuse fuzz [--seed S] [--count N]`: the differential fuzzer (fuzz/differential.h) over
// any number of random graphs; prints the seed, the graph and the first mismatch of each
// failure. With --backward it checks each graph's backward graph instead, with --rows the
// graph with a row op appended (fuzz::random_row_graph). CI runs seeds 1-2000 forward and
// 1-400 backward through ctest (tests/fusion_fuzz_test.cpp), row graphs 1-120
// (tests/row_kernels_test.cpp).
#include "fuzz/differential.h"
#include "ir/error.h"
#include "runtime/kernel_cache.h"
#include "tools/commands.h"

#include <fmt/format.h>

#include <chrono>
#include <limits>
#include <memory>

namespace ampfuse::tools {

namespace {

struct FuzzOptions {
  // Signed, so that "-1" is read as -1 and refused, not wrapped to 2^64 - 1 graphs.
  int64_t seed = 1;
  int64_t count = 1000;
  bool no_fuse = false;
  bool backward = false;
  bool rows = false;
  bool external_rows = false;
};

int run_fuzz(const FuzzOptions& o) {
  if (o.seed < 0) fail("--seed {}: must be 0 or more", o.seed);
  if (o.count < 1) fail("--count {}: must be at least 1", o.count);
  if (o.backward && o.rows) fail("--backward and --rows: choose one");
  if (o.external_rows && !o.rows) fail("--external-rows goes with --rows");
  if (o.seed > std::numeric_limits<int64_t>::max() - o.count)
    fail("--seed {} --count {}: the last seed would pass 2^63 - 1", o.seed, o.count);
  // The JIT's settings (AMPFUSE_CPU, AMPFUSE_JIT_MAX_MAPS, AMPFUSE_KERNELS_IN_MEMORY) are
  // checked once, as an error, rather than failing every graph.
  runtime::KernelCache::global();
  const auto t0 = std::chrono::steady_clock::now();
  engine::ExecutorOptions opts;
  opts.fuse = !o.no_fuse;
  uint64_t failures = 0, skipped = 0;
  int64_t kernels = 0, nodes = 0;
  for (int64_t seed = o.seed; seed < o.seed + o.count; ++seed) {
    bool skip = false;
    const fuzz::DifferentialResult r = o.backward ? fuzz::check_random_graph_backward(seed, &skip, opts)
                                       : o.rows   ? fuzz::check_random_row_graph(seed, &skip, opts, o.external_rows)
                                                  : fuzz::check_random_graph(seed, opts);
    skipped += skip;
    kernels += r.kernels;
    nodes += r.fused_nodes;
    if (!r.ok) {
      ++failures;
      fmt::print("FAIL {}\n", r.message);
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const char* skip_reason = o.backward ? "no float input, or an op without a gradient"
                                       : "a transcendental op, or no float output for the row op";
  fmt::print("{} {}graphs (seeds {}-{}), {} kernels, {} fused ops, {} failed{}, {:.1f} s\n", o.count,
             o.backward ? "backward " : o.rows ? "row " : "", o.seed, o.seed + o.count - 1, kernels, nodes, failures,
             skipped ? fmt::format(", {} skipped ({})", skipped, skip_reason) : "", s);
  return failures ? 1 : 0;
}

}  // namespace

Command add_fuzz_command(CLI::App& parent) {
  auto o = std::make_shared<FuzzOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "fuzz", "Run random fusable graphs fused and on the interpreter and compare (the differential fuzzer).");
  cmd->add_option("--seed", o->seed, "First seed (default 1)")->type_name("S");
  cmd->add_option("--count", o->count, "How many graphs, seeds S, S+1, ... (default 1000)")->type_name("N");
  cmd->add_flag("--no-fuse", o->no_fuse, "One kernel per op (checks the code generator without the planner)");
  cmd->add_flag("--backward", o->backward,
                "Check each graph's backward graph (gradients with respect to its float inputs) instead");
  cmd->add_flag("--rows", o->rows,
                "Append a row op (softmax, log_softmax, LayerNorm, sum, max, mean over the last axis) to each\n"
                "exact graph and check its row kernel instead");
  cmd->add_flag("--external-rows", o->external_rows,
                "With --rows: run the row op as an external step instead of a row kernel (oneDNN's softmax\n"
                "behind the executor's guard, the reference kernels of log_softmax and max) on the\n"
                "same random data with NaN and Inf planted; LayerNorm, sum and mean are skipped (oneDNN's f32\n"
                "statistics overflow on the planted values near f32's largest)");
  cmd->footer("Exit status 1 when any graph fails. Exact graphs must match bit for bit; graphs with a\n"
              "transcendental op within 6 ulp of the output type (backward: within 64 steps of the coarsest\n"
              "float type relative to the output's largest |value|; rows: within one step of the output's dtype, or\n"
              "one rounding of the row input's dtype, 1e-5 in f32, or n * 2^-24 for softmax over n columns, of that\n"
              "value).");
  return {cmd, [o] { return run_fuzz(*o); }};
}

}  // namespace ampfuse::tools
