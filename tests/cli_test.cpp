// The `ampfuse` program, run as a user runs it: exit status, stdout and stderr.
#include "runtime/npy.h"
#include "tests/cli_util.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/wait.h>

namespace ampfuse {
namespace {

TEST(CliInfo, ResNet152JsonReportsTheClassifierOutput) {
  const std::string model = model_path("resnet152-mxnet-symbolic-symbol.json");
  SKIP_WITHOUT_MODEL(model);
  const CliResult r = run_cli(fmt::format("info '{}' --shape data=1,3,224,224 --json", model));
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = parse_json(r);
  EXPECT_EQ(j["model"], model);
  EXPECT_EQ(j["nodes"], 1286);
  EXPECT_EQ(j["op_nodes"], 515);
  EXPECT_EQ(j["ops"]["Convolution"], 155);
  EXPECT_EQ(j["ops"]["BatchNorm"], 153);
  ASSERT_EQ(j["outputs"].size(), 1u);
  EXPECT_EQ(j["outputs"][0]["name"], "softmax_output");
  // This export is the ImageNet-11k ResNet-152: its last FullyConnected has num_hidden 11221.
  EXPECT_EQ(j["outputs"][0]["shape"], nlohmann::json({1, 11221}));
  EXPECT_EQ(j["outputs"][0]["dtype"], "f32");
  ASSERT_GE(j["inputs"].size(), 1u);
  EXPECT_EQ(j["inputs"][0]["name"], "data");
  EXPECT_EQ(j["inputs"][0]["shape"], nlohmann::json({1, 3, 224, 224}));
  EXPECT_GT(j["params"]["count"].get<int>(), 300);
  // 58M in the body plus 2048 * 11221 + 11221 in the classifier.
  EXPECT_GT(j["params"]["elements"].get<int64_t>(), 2048 * 11221 + 50'000'000);
}

TEST(CliInfo, MissingShapeNamesTheOptionToGive) {
  const std::string model = model_path("resnet152-mxnet-symbolic-symbol.json");
  SKIP_WITHOUT_MODEL(model);
  const CliResult text = run_cli(fmt::format("info '{}'", model));
  EXPECT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("--shape data="), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("Convolution 155"), std::string::npos) << text.out;

  const CliResult json = run_cli(fmt::format("info '{}' --json", model));
  EXPECT_EQ(json.status, 2) << json.err;
  const nlohmann::json j = parse_json(json);
  EXPECT_TRUE(j["outputs"].is_null());
  EXPECT_EQ(j["missing_shapes"], nlohmann::json({"data"}));
  EXPECT_EQ(j["ops"]["Convolution"], 155);
}

TEST(CliRun, DefaultModelJsonAndSavedOutputsAgree) {
  testing::ScopedTempDir dir;
  const std::string out_dir = dir.file("outs");
  const CliResult r = run_cli(fmt::format("run --json --seed 3 --save-outputs '{}'", out_dir));
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = parse_json(r);
  EXPECT_EQ(j["model"], "<default>");
  EXPECT_EQ(j["seed"], 3);
  EXPECT_GE(j["run_ms"].get<double>(), 0.0);
  ASSERT_EQ(j["outputs"].size(), 1u);
  const nlohmann::json& o = j["outputs"][0];
  EXPECT_EQ(o["name"], "softmax_output");
  EXPECT_EQ(o["shape"], nlohmann::json({1, 10}));
  EXPECT_EQ(o["dtype"], "f32");
  EXPECT_EQ(o["nonfinite"], 0);

  const runtime::Tensor t = runtime::read_npy(out_dir + "/softmax_output.npy");
  ASSERT_EQ(t.type(), (ir::TensorType{ir::DType::f32, {1, 10}}));
  const std::vector<double> v = runtime::to_f64_vector(t);
  double sum = 0;
  for (double p : v) sum += p;
  EXPECT_NEAR(sum, 1.0, 1e-5);
  // The report summarizes exactly the saved values.
  EXPECT_EQ(o["min"].get<double>(), *std::min_element(v.begin(), v.end()));
  EXPECT_EQ(o["max"].get<double>(), *std::max_element(v.begin(), v.end()));
  EXPECT_NEAR(o["mean"].get<double>(), 0.1, 1e-6);
}

TEST(CliRun, SeedDecidesTheResult) {
  const nlohmann::json a = parse_json(run_cli("run --json --seed 5"));
  const nlohmann::json b = parse_json(run_cli("run --json --seed 5"));
  const nlohmann::json c = parse_json(run_cli("run --json --seed 6"));
  EXPECT_EQ(a["outputs"], b["outputs"]);
  EXPECT_NE(a["outputs"][0]["max"], c["outputs"][0]["max"]);
}

TEST(CliRun, InputsFromNpyAndBatchFromShape) {
  testing::ScopedTempDir dir;
  runtime::Tensor data = runtime::Tensor::zeros({ir::DType::f32, {2, 3, 32, 32}});
  runtime::write_npy(dir.file("data.npy"), data);
  const CliResult r = run_cli(fmt::format("run --json --inputs data='{}'", dir.file("data.npy")));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(parse_json(r)["outputs"][0]["shape"], nlohmann::json({2, 10}));

  const CliResult batch = run_cli("run --json --shape data=4,3,32,32");
  ASSERT_EQ(batch.status, 0) << batch.err;
  EXPECT_EQ(parse_json(batch)["outputs"][0]["shape"], nlohmann::json({4, 10}));

  // A file whose shape disagrees with --shape: the variable and both types are named.
  expect_clean_error(run_cli(fmt::format("run --shape data=1,3,32,32 --inputs data='{}'", dir.file("data.npy"))),
                     "variable 'data' is bound to f32[2,3,32,32] but the graph needs f32[1,3,32,32]");
}

// NaN in the data reaches the output as in the interpreter: the default model's guarded
// oneDNN step (docs/ops.md, "NaN through oneDNN") runs its reference kernel in every timed run,
// and the report says so; finite data keeps oneDNN.
TEST(CliRun, NaNInputRunsTheGuardedStepsOnTheReferenceKernel) {
  testing::ScopedTempDir dir;
  runtime::Tensor data = runtime::Tensor::zeros({ir::DType::f32, {1, 3, 32, 32}});
  runtime::write_npy(dir.file("finite.npy"), data);
  data.set_f64(5 * 32 + 7, std::nan(""));
  runtime::write_npy(dir.file("nan.npy"), data);
  const CliResult finite = run_cli(fmt::format("run --json --repeat 3 --inputs data='{}'", dir.file("finite.npy")));
  ASSERT_EQ(finite.status, 0) << finite.err;
  EXPECT_GE(parse_json(finite)["plan"]["guarded_steps"], 1);
  EXPECT_EQ(parse_json(finite)["nonfinite_reference_runs"], 0);
  const CliResult nan = run_cli(fmt::format("run --json --repeat 3 --inputs data='{}'", dir.file("nan.npy")));
  ASSERT_EQ(nan.status, 0) << nan.err;
  const nlohmann::json j = parse_json(nan);
  EXPECT_EQ(j["nonfinite_reference_runs"], 3);
  EXPECT_EQ(j["outputs"][0]["nonfinite"], 10);  // the softmax of a NaN row: NaN everywhere
  const CliResult text = run_cli(fmt::format("run --repeat 3 --inputs data='{}'", dir.file("nan.npy")));
  EXPECT_NE(text.out.find("3 of them ran max pooling or softmax on the reference kernel"), std::string::npos) << text.out;
}

TEST(CliRun, HumanReportShowsOutputsAndSavedFiles) {
  testing::ScopedTempDir dir;
  const CliResult r = run_cli(fmt::format("run --save-outputs '{}'", dir.path().string()));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("model:   <default>"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("softmax_output  f32[1,10]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("finite 10/10"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(dir.file("softmax_output.npy")), std::string::npos) << r.out;
}

TEST(CliErrors, EachFailureIsOneLineAndExitOne) {
  expect_clean_error(run_cli("info /nonexistent/model.json"), "/nonexistent/model.json: no such file");
  expect_clean_error(run_cli("run /nonexistent/model.json"), "/nonexistent/model.json");
  expect_clean_error(run_cli("run --shape data=1,x,32,32"), "'x' is not an integer extent of 0 or more");
  expect_clean_error(run_cli("run --shape data"), "expected NAME=D0,D1,...");
  expect_clean_error(run_cli("run --shape data=-1,3,32,32"), "'-1' is not an integer extent of 0 or more");
  expect_clean_error(run_cli("run --shape label=1"), "no input 'label'");
  expect_clean_error(run_cli("run --inputs data=/nonexistent/x.npy"), "/nonexistent/x.npy");
  expect_clean_error(run_cli("run --seed -3x"), "seed");
  expect_clean_error(run_cli("run --no-such-option"), "--no-such-option");
  expect_clean_error(run_cli("frobnicate"), "frobnicate");
  expect_clean_error(run_cli(""), "subcommand");
}

TEST(CliErrors, UnknownInputNameInAModelIsNamed) {
  const std::string model = model_path("resnet152-mxnet-symbolic-symbol.json");
  SKIP_WITHOUT_MODEL(model);
  expect_clean_error(run_cli(fmt::format("info '{}' --shape image=1,3,224,224", model)),
                     "the model has no variable 'image' (its inputs: data, softmax_label)");
  expect_clean_error(run_cli(fmt::format("info '{}' --shape data=1,3,224,224 --shape data=2,3,224,224", model)),
                     "'data' is given twice");
}

TEST(CliHelp, DocumentsEveryOption) {
  const CliResult top = run_cli("--help");
  EXPECT_EQ(top.status, 0);
  EXPECT_NE(top.out.find("info"), std::string::npos) << top.out;
  EXPECT_NE(top.out.find("run"), std::string::npos) << top.out;
  const CliResult info = run_cli("info --help");
  EXPECT_EQ(info.status, 0);
  for (const char* opt : {"--shape", "--json", "model", "missing_shapes"}) {
    EXPECT_NE(info.out.find(opt), std::string::npos) << opt << " not in:\n" << info.out;
  }
  const CliResult run = run_cli("run --help");
  EXPECT_EQ(run.status, 0);
  for (const char* opt : {"--shape", "--inputs", "--save-outputs", "--seed", "--json"}) {
    EXPECT_NE(run.out.find(opt), std::string::npos) << opt << " not in:\n" << run.out;
  }
}

// --count and --seed are read as signed numbers: "-1" is refused, not wrapped to 2^64 - 1.
TEST(CliFuzz, CountAndSeedMustBeInRange) {
  const CliResult ok = run_cli("fuzz --seed 3 --count 1");
  EXPECT_EQ(ok.status, 0) << ok.err;
  EXPECT_NE(ok.out.find("1 graphs (seeds 3-3)"), std::string::npos) << ok.out;
  expect_clean_error(run_cli("fuzz --count -1"), "--count -1: must be at least 1");
  expect_clean_error(run_cli("fuzz --count 0"), "--count 0: must be at least 1");
  expect_clean_error(run_cli("fuzz --seed -1 --count 1"), "--seed -1: must be 0 or more");
  expect_clean_error(run_cli("fuzz --seed 9223372036854775807 --count 2"), "the last seed would pass 2^63 - 1");
}

// Linux caps a process's memory maps (vm.max_map_count) and every loaded kernel costs about
// two. A process that compiles more kernels than its map limit allows runs clean because the
// kernel cache lets go of old kernels and the JIT removes their code; without that bound the
// same run reaches the limit and each kernel past it falls back with a clear error instead
// of the crash it was (LLVM aborting, malloc failing). The limit is lowered
// (AMPFUSE_JIT_MAX_MAPS) to a few hundred maps above the process's own.
TEST(CliFuzz, CompilingPastTheMapLimitRunsCleanWithBoundedKernels) {
  // Two threads, so that the maps of thread stacks and arenas do not grow with the machine.
  const std::string env = "AMPFUSE_CACHE_DIR=0 AMPFUSE_STRICT=0 AMPFUSE_THREADS=2 OMP_NUM_THREADS=2";
  const CliResult probe = run_shell(fmt::format("{} AMPFUSE_JIT_MAX_MAPS=1 '{}' fuzz --seed 1000 --count 1", env,
                                                AMPFUSE_CLI_PATH));
  EXPECT_EQ(probe.status, 1);
  const std::string said = "the process holds ";
  const size_t at = probe.out.find(said);
  ASSERT_NE(at, std::string::npos) << probe.out << probe.err;
  EXPECT_NE(probe.out.find("memory maps and the JIT loads code only below 1 (0 objects loaded"), std::string::npos)
      << probe.out;
  const int64_t own_maps = std::stoll(probe.out.substr(at + said.size()));
  // Room for about 150 kernels; 200 graphs compile about 260.
  const std::string run = fmt::format("{} AMPFUSE_JIT_MAX_MAPS={} '{}' fuzz --seed 1000 --count 200", env,
                                      own_maps + 300, AMPFUSE_CLI_PATH);
  const CliResult bounded = run_shell("AMPFUSE_KERNELS_IN_MEMORY=8 " + run);
  EXPECT_EQ(bounded.status, 0) << bounded.out.substr(0, 4000) << bounded.err;
  EXPECT_NE(bounded.out.find("200 graphs (seeds 1000-1199), "), std::string::npos) << bounded.out;
  EXPECT_NE(bounded.out.find(" 0 failed"), std::string::npos) << bounded.out;
  const CliResult unbounded = run_shell("AMPFUSE_KERNELS_IN_MEMORY=100000 " + run);
  EXPECT_EQ(unbounded.status, 1) << "a process holding every kernel should have reached the limit";
  // Every failure is a refused kernel that fell back, never a wrong result.
  std::istringstream lines(unbounded.out);
  int failures = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("FAIL ", 0) != 0) continue;
    ++failures;
    EXPECT_NE(line.find(": a kernel fell back to the interpreter: "), std::string::npos) << line;
    EXPECT_NE(line.find("memory maps and the JIT loads code only below"), std::string::npos) << line;
  }
  EXPECT_GT(failures, 0);
}

TEST(CliFuzz, MalformedKernelAndMapLimitsAreErrors) {
  for (const char* value : {"0", "-3", "x", "12k", "99999999999999999999"}) {
    expect_clean_error(run_shell(fmt::format("AMPFUSE_JIT_MAX_MAPS={} '{}' fuzz --count 1", value, AMPFUSE_CLI_PATH)),
                       fmt::format("AMPFUSE_JIT_MAX_MAPS='{}' is not a map count of at least 1", value));
    expect_clean_error(
        run_shell(fmt::format("AMPFUSE_KERNELS_IN_MEMORY={} '{}' run --repeat 1", value, AMPFUSE_CLI_PATH)),
        fmt::format("AMPFUSE_KERNELS_IN_MEMORY='{}' is not a kernel count from 1 to 2147483648", value));
  }
}

}  // namespace
}  // namespace ampfuse
