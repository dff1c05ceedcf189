// The plan cache (engine/plan_cache.h): lower()'s result stored in the disk cache and loaded
// by a later compile (a "new process": a new DiskCache and KernelCache on the same
// directory) gives the same graph, plan, statistics and output bits; any change of graph,
// input shape or option is a miss; a bad entry is one warning and a rebuild.
#include "cli_util.h"
#include "engine/execution/executor.h"
#include "engine/plan_cache.h"
#include "ir/mxnet_json.h"
#include "ir/text_format.h"
#include "models/default_model.h"
#include "runtime/disk_cache.h"
#include "runtime/interpreter.h"
#include "runtime/kernel_cache.h"
#include "tests/model_files.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace ampfuse {
namespace {

namespace fs = std::filesystem;
using engine::AmpOptions;
using engine::Executable;
using engine::ExecutorOptions;
using ir::DType;
using runtime::DiskCache;
using runtime::KernelCache;
using runtime::Tensor;

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// The entries of `dir` that hold plans (their stored key starts with the plan format line).
std::vector<std::string> plan_entries(const std::string& dir) {
  std::vector<std::string> plans;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string bytes = read_all(e.path().string());
    if (bytes.size() > 32 && bytes.compare(32, 14, "ampfuse plan 3") == 0) plans.push_back(e.path().string());
  }
  return plans;
}

// The transformer encoder layer bench/disk_cache.sh measures, at a small shape.
ir::Graph transformer() {
  const std::string path = testing::models_dir() + "/bench/transformer_encoder_layer-symbol.json";
  ir::MxnetImportOptions io;
  io.input_shapes = {{"data", {2, 8, 256}}};
  return ir::load_mxnet_json_file(path, io);
}

struct Result {
  engine::CompileStats stats;
  std::string graph, plan;
  std::vector<Tensor> outputs;
  std::vector<Tensor> other_weights;  // the outputs for other weights (and inputs)
};

// One compile as a new process would do it: fresh caches over the directory.
Result compile_fresh(const std::string& dir, const ir::Graph& g, ExecutorOptions opts) {
  DiskCache disk(dir);
  KernelCache kernels(&disk);
  opts.cache = &kernels;
  opts.plan_disk = &disk;
  opts.constant_params = true;
  const Executable exe = Executable::compile(g, opts);
  Result r;
  r.stats = exe.compile_stats();
  r.graph = ir::print_graph(exe.graph());
  r.plan = engine::print_plan(exe.graph(), exe.plan());
  r.outputs = exe.run(runtime::random_bindings(g, 11));
  // Weights are variables, never part of the graph or the plan: folded BatchNorms and
  // other constants are computed from whatever is bound, by the first run of a binding.
  r.other_weights = exe.run(runtime::random_bindings(g, 12));
  return r;
}

void expect_same_bits(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    ASSERT_EQ(a[k].type(), b[k].type());
    EXPECT_EQ(std::memcmp(a[k].raw(), b[k].raw(), a[k].bytes()), 0) << "output " << k;
  }
}

ExecutorOptions with_amp(DType target) {
  ExecutorOptions o;
  o.fold_batchnorm = true;
  o.fuse_epilogues = true;
  if (target != DType::f32) {
    AmpOptions amp;
    amp.target = target;
    o.amp = amp;
  }
  return o;
}

// A conv net (the default model: Convolution, BatchNorm folded, Pooling, an MLP block) and
// a transformer layer, f32 and bf16: the warm compile loads the plan and computes the same
// bits with the same plan and statistics.
TEST(PlanCache, WarmCompileLoadsThePlanAndGivesTheSameBits) {
  const std::vector<std::pair<std::string, ir::Graph>> graphs = {{"conv net", models::build_default_model(2)},
                                                                 {"transformer", transformer()}};
  for (const auto& [name, g] : graphs)
    for (DType target : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(name + " " + std::string(ir::dtype_name(target)));
      testing::ScopedTempDir dir;
      const ExecutorOptions opts = with_amp(target);
      const Result cold = compile_fresh(dir.path().string(), g, opts);
      EXPECT_FALSE(cold.stats.plan_from_disk);
      ASSERT_EQ(plan_entries(dir.path().string()).size(), 1u);
      const Result warm = compile_fresh(dir.path().string(), g, opts);
      EXPECT_TRUE(warm.stats.plan_from_disk);
      EXPECT_EQ(warm.stats.compilations, warm.stats.disk_loads) << "every kernel from disk too";
      EXPECT_EQ(cold.graph, warm.graph);
      EXPECT_EQ(cold.plan, warm.plan);
      EXPECT_EQ(cold.stats.kernels, warm.stats.kernels);
      EXPECT_EQ(cold.stats.folded_batchnorms, warm.stats.folded_batchnorms);
      EXPECT_EQ(cold.stats.widened_external, warm.stats.widened_external);
      EXPECT_EQ(cold.stats.fused_epilogues, warm.stats.fused_epilogues);
      EXPECT_EQ(cold.stats.arena_bytes, warm.stats.arena_bytes);
      ASSERT_EQ(cold.stats.amp.has_value(), warm.stats.amp.has_value());
      if (cold.stats.amp) {
        EXPECT_EQ(cold.stats.amp->casts_inserted, warm.stats.amp->casts_inserted);
        EXPECT_EQ(cold.stats.amp->lp16_nodes, warm.stats.amp->lp16_nodes);
        EXPECT_EQ(cold.stats.amp->class_counts, warm.stats.amp->class_counts);
      }
      expect_same_bits(cold.outputs, warm.outputs);
      expect_same_bits(cold.other_weights, warm.other_weights);
      EXPECT_NE(std::memcmp(cold.outputs[0].raw(), cold.other_weights[0].raw(), cold.outputs[0].bytes()), 0)
          << "other weights, other outputs";
    }
}

// The binary form reads back to what was written, statistics of training included.
TEST(PlanCache, SerializedPlanReadsBackExactly) {
  engine::LowerOptions lo;
  AmpOptions amp;
  amp.target = DType::bf16;
  amp.layout = "NHWC";
  lo.amp = amp;
  lo.backward = engine::BackwardOptions{};
  lo.planner.recompute = true;
  const engine::Lowered l = engine::lower(models::build_default_model(2), lo);
  std::string error;
  const std::optional<engine::Lowered> back = engine::deserialize_lowered(engine::serialize_lowered(l), &error);
  ASSERT_TRUE(back) << error;
  EXPECT_EQ(back->graph, l.graph);
  EXPECT_EQ(engine::print_plan(back->graph, back->plan), engine::print_plan(l.graph, l.plan));
  EXPECT_EQ(back->stats.gradient_of, l.stats.gradient_of);
  EXPECT_EQ(back->stats.head_grads, l.stats.head_grads);
  EXPECT_EQ(back->stats.saved_bytes, l.stats.saved_bytes);
  EXPECT_EQ(back->stats.recomputed.values, l.stats.recomputed.values);
  EXPECT_EQ(back->stats.amp->class_counts, l.stats.amp->class_counts);

  // Every truncation, and bytes past the end, are refused (never a crash or a partial plan).
  const std::string bytes = engine::serialize_lowered(l);
  for (size_t cut = 0; cut < bytes.size(); cut += 1 + cut / 8) {
    EXPECT_FALSE(engine::deserialize_lowered(std::string_view(bytes).substr(0, cut), nullptr)) << "cut at " << cut;
  }
  EXPECT_FALSE(engine::deserialize_lowered(bytes + "x", &error));
  EXPECT_NE(error.find("bytes after the end"), std::string::npos) << error;
}

// Everything that changes the plan changes the key: each variation compiles afresh (and
// stores a plan of its own) where the same graph and options load theirs.
TEST(PlanCache, ChangedGraphShapeOrOptionIsAMiss) {
  testing::ScopedTempDir dir;
  const ir::Graph g = models::build_default_model(1);
  const ExecutorOptions base = with_amp(DType::bf16);
  ASSERT_FALSE(compile_fresh(dir.path().string(), g, base).stats.plan_from_disk);
  ASSERT_TRUE(compile_fresh(dir.path().string(), g, base).stats.plan_from_disk);

  std::vector<std::pair<std::string, std::pair<ir::Graph, ExecutorOptions>>> variants;
  variants.push_back({"f16", {g, with_amp(DType::f16)}});
  variants.push_back({"f32", {g, with_amp(DType::f32)}});
  ExecutorOptions o = base;
  o.amp->layout = "NHWC";
  variants.push_back({"--layout NHWC", {g, o}});
  o = base;
  o.layout = "keep";  // the default, auto, runs this inference compile channels-last
  variants.push_back({"--layout keep", {g, o}});
  o = base;
  o.amp->fp32_ops = {"FullyConnected"};
  variants.push_back({"--fp32-ops", {g, o}});
  o = base;
  o.fuse = false;
  variants.push_back({"--no-fuse", {g, o}});
  o = base;
  o.fold_batchnorm = false;
  variants.push_back({"no --fold-batchnorm", {g, o}});
  o = base;
  o.fuse_epilogues = false;
  variants.push_back({"--no-epilogues", {g, o}});
  o = base;
  o.relu_post_ops = true;
  variants.push_back({"--relu-post-ops", {g, o}});
  o = base;
  o.use_onednn = false;
  variants.push_back({"no oneDNN (no compute-in-f32)", {g, o}});
  variants.push_back({"another input shape (batch 2)", {models::build_default_model(2), base}});
  ir::Graph changed = g;
  for (ir::Node& n : changed.nodes)
    if (n.op == "Activation") {
      n.attrs.set("act_type", std::string("tanh"));
      break;
    }
  variants.push_back({"another graph (an attribute)", {changed, base}});

  for (const auto& [what, v] : variants) {
    SCOPED_TRACE(what);
    EXPECT_FALSE(compile_fresh(dir.path().string(), v.first, v.second).stats.plan_from_disk);
    EXPECT_TRUE(compile_fresh(dir.path().string(), v.first, v.second).stats.plan_from_disk);
  }
  EXPECT_EQ(plan_entries(dir.path().string()).size(), variants.size() + 1);
}

// A corrupt entry (caught by the checksum) and a whole entry whose payload is not a plan
// (caught as it is read): one warning each, lowered afresh, the entry replaced.
TEST(PlanCache, BadEntryIsOneWarningAndARebuild) {
  testing::ScopedTempDir dir;
  const std::string d = dir.path().string();
  const ir::Graph g = models::build_default_model(1);
  const ExecutorOptions opts = with_amp(DType::bf16);
  const Result cold = compile_fresh(d, g, opts);
  const auto plans = plan_entries(d);
  ASSERT_EQ(plans.size(), 1u);

  std::string bytes = read_all(plans[0]);
  bytes[bytes.size() - 3] ^= 0x10;
  std::ofstream(plans[0], std::ios::binary | std::ios::trunc) << bytes;
  ::testing::internal::CaptureStderr();
  const Result corrupt = compile_fresh(d, g, opts);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(corrupt.stats.plan_from_disk);
  EXPECT_EQ(err.find("ampfuse: warning:"), err.rfind("ampfuse: warning:")) << err;
  EXPECT_NE(err.find("checksum mismatch"), std::string::npos) << err;
  expect_same_bits(cold.outputs, corrupt.outputs);
  EXPECT_TRUE(compile_fresh(d, g, opts).stats.plan_from_disk) << "the rebuilt plan replaced the entry";

  {
    DiskCache disk(d);
    ASSERT_TRUE(disk.store(engine::plan_cache_key(g, engine::lower_options(opts, runtime::cpu_device()), "device cpu"),
                           "ampfuse plan 1\nnot a plan"));
  }
  ::testing::internal::CaptureStderr();
  const Result foreign = compile_fresh(d, g, opts);
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(foreign.stats.plan_from_disk);
  EXPECT_EQ(err.find("ampfuse: warning:"), err.rfind("ampfuse: warning:")) << err;
  EXPECT_NE(err.find("a plan that does not read back"), std::string::npos) << err;
  expect_same_bits(cold.outputs, foreign.outputs);
  EXPECT_TRUE(compile_fresh(d, g, opts).stats.plan_from_disk);
}

// cache_plan = false: nothing read or written.
TEST(PlanCache, TurnedOffLowersEveryTime) {
  testing::ScopedTempDir dir;
  ExecutorOptions opts;
  opts.cache_plan = false;
  const ir::Graph g = models::build_default_model(1);
  EXPECT_FALSE(compile_fresh(dir.path().string(), g, opts).stats.plan_from_disk);
  EXPECT_FALSE(compile_fresh(dir.path().string(), g, opts).stats.plan_from_disk);
  EXPECT_TRUE(plan_entries(dir.path().string()).empty());
}

// The report and --json say where the plan came from; AMPFUSE_CACHE_DIR=0 writes nothing
// (not in the default directory either).
TEST(PlanCacheCli, ReportSaysWhereThePlanCameFromAndOffWritesNothing) {
  testing::ScopedTempDir dir;
  const std::string cache = dir.file("cache");
  const std::string run = fmt::format("AMPFUSE_CACHE_DIR='{}' '{}' run --no-baseline --repeat 1", cache, AMPFUSE_CLI_PATH);
  const CliResult cold = run_shell(run);
  ASSERT_EQ(cold.status, 0) << cold.err;
  EXPECT_NE(cold.out.find("plan:    passes and fusion planned in "), std::string::npos) << cold.out;
  const CliResult warm = run_shell(run + " --json");
  ASSERT_EQ(warm.status, 0) << warm.err;
  const nlohmann::json plan = parse_json(warm)["plan"];
  EXPECT_EQ(plan["plan_from_disk"], true);
  EXPECT_EQ(plan["kernels_cold"], 0);
  EXPECT_GT(plan["plan_ms"].get<double>(), 0.0);
  EXPECT_NE(run_shell(run).out.find("plan:    passes and fusion plan from disk in "), std::string::npos);

  const std::string home = dir.file("home");
  const CliResult off = run_shell(fmt::format("HOME='{}' XDG_CACHE_HOME='{}/xdg' AMPFUSE_CACHE_DIR=0 '{}' run --no-baseline --repeat 1 --json",
                                              home, home, AMPFUSE_CLI_PATH));
  ASSERT_EQ(off.status, 0) << off.err;
  EXPECT_EQ(parse_json(off)["plan"]["plan_from_disk"], false);
  EXPECT_FALSE(fs::exists(home)) << "nothing written anywhere";
}

}  // namespace
}  // namespace ampfuse
