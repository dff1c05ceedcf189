// The CLI's model input: --shape and the model's __dtype__ hints, nodes no output reaches,
// and random weights of a converted model (read through amp_cast).
#include "runtime/npy.h"
#include "tests/cli_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sys/stat.h>

namespace ampfuse {
namespace {

std::string write_file(const testing::ScopedTempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.file(name);
  std::ofstream(path) << text;
  return path;
}

// x carries a __dtype__ hint and no shape; --shape gives the shape and the hint the type.
std::string hinted_model(const char* dtype_attr) {
  return fmt::format(R"js({{"nodes": [
      {{"op": "null", "name": "x", {}"inputs": []}},
      {{"op": "relu", "name": "r", "inputs": [[0, 0, 0]]}}],
    "heads": [[1, 0, 0]]}})js",
                     dtype_attr);
}

TEST(CliModelInput, ShapeKeepsTheDtypeHint) {
  testing::ScopedTempDir dir;
  const std::string bf16 = write_file(dir, "bf16.json", hinted_model(R"("attrs": {"__dtype__": "12"}, )"));
  const CliResult r = run_cli(fmt::format("info '{}' --shape x=2,3 --json", bf16));
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = parse_json(r);
  EXPECT_EQ(j["inputs"][0]["dtype"], "bf16") << j.dump();
  EXPECT_EQ(j["outputs"][0]["dtype"], "bf16") << j.dump();
  // Negative cases: no hint is f32; a hint of an unsupported type is named.
  const std::string plain = write_file(dir, "plain.json", hinted_model(""));
  const CliResult p = run_cli(fmt::format("info '{}' --shape x=2,3 --json", plain));
  ASSERT_EQ(p.status, 0) << p.err;
  EXPECT_EQ(parse_json(p)["inputs"][0]["dtype"], "f32");
  const std::string bad = write_file(dir, "bad.json", hinted_model(R"("attrs": {"__dtype__": "9"}, )"));
  const CliResult b = run_cli(fmt::format("info '{}' --shape x=2,3", bad));
  EXPECT_EQ(b.status, 1);
  EXPECT_NE(b.err.find("node 0 'x' (null): __dtype__ '9' is an MXNet type ampfuse does not support"), std::string::npos)
      << b.err;
}

// A graph whose head is the logits: the label and a side branch need no shapes, and may
// still be given one (MXNet's bind accepts it); a name the file lacks is still an error.
TEST(CliModelInput, NodesNoOutputReachesNeedNoShapes) {
  const std::string model = std::string(AMPFUSE_TESTDATA_DIR) + "/mxnet/unreached_label.json";
  const CliResult info = run_cli(fmt::format("info '{}' --shape data=2,5 --json", model));
  ASSERT_EQ(info.status, 0) << info.err << info.out;
  const nlohmann::json j = parse_json(info);
  EXPECT_EQ(j["op_nodes"], 1) << j.dump();
  EXPECT_EQ(j["outputs"][0]["shape"], nlohmann::json::array({2, 3})) << j.dump();
  EXPECT_EQ(run_cli(fmt::format("run '{}' --shape data=2,5 --shape softmax_label=2 --no-baseline", model)).status, 0);
  expect_clean_error(run_cli(fmt::format("info '{}' --shape data=2,5 --shape lable=2", model)),
                     "the model has no variable 'lable' (its inputs: data)");
}

double max_abs(const runtime::Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.size(); ++i) m = std::max(m, std::abs(t.get_f64(i)));
  return m;
}

runtime::Tensor only_output(const std::string& dir) {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
  EXPECT_EQ(files.size(), 1u) << dir;
  return runtime::read_npy(files.at(0).string());
}

// `convert --amp bf16` then `run` on the result: the weights, read through amp_cast, are
// drawn as weights (by name, so as in the f32 model) and the outputs match the f32
// model's up to bf16 rounding. Before, they were drawn as inputs in [-1, 1) and the
// outputs reached 1.8e11.
TEST(CliModelInput, ConvertedModelGetsTheSameRandomWeights) {
  const std::string model = model_path("cifar_resnet20_v2-gluoncv-symbol.json");
  SKIP_WITHOUT_MODEL(model);
  testing::ScopedTempDir dir;
  const std::string converted = dir.file("c.json");
  ASSERT_EQ(run_cli(fmt::format("convert '{}' --shape data=1,3,32,32 --amp bf16 -o '{}'", model, converted)).status, 0);
  const std::string f32_out = dir.file("f32"), bf16_out = dir.file("bf16");
  const CliResult a = run_cli(fmt::format("run '{}' --shape data=1,3,32,32 --no-baseline --save-outputs '{}'", model, f32_out));
  ASSERT_EQ(a.status, 0) << a.err;
  const CliResult b = run_cli(fmt::format("run '{}' --shape data=1,3,32,32 --no-baseline --save-outputs '{}'", converted, bf16_out));
  ASSERT_EQ(b.status, 0) << b.err;
  const runtime::Tensor want = only_output(f32_out), got = only_output(bf16_out);
  ASSERT_EQ(got.shape(), want.shape());
  double diff = 0;
  for (int64_t i = 0; i < want.size(); ++i) diff = std::max(diff, std::abs(got.get_f64(i) - want.get_f64(i)));
  EXPECT_LT(max_abs(got), 100.0);
  EXPECT_LT(diff, 0.05 * max_abs(want)) << "max |bf16 - f32| " << diff << ", max |f32| " << max_abs(want);
}

// A path that is not a regular file is named as such by every command, and a FIFO is
// refused without being opened (which would block).
TEST(CliModelInput, NotARegularFileIsNamedAsSuch) {
  testing::ScopedTempDir dir;
  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  for (const char* command : {"info", "run", "dot -o x.dot", "convert --amp bf16 -o x.json"}) {
    SCOPED_TRACE(command);
    expect_clean_error(run_cli(fmt::format("{} '{}'", command, dir.path().string())),
                       dir.path().string() + ": not a regular file (a directory)");
    expect_clean_error(run_cli(fmt::format("{} /dev/null", command)), "/dev/null: not a regular file (a device)");
    expect_clean_error(run_cli(fmt::format("{} '{}'", command, fifo)), fifo + ": not a regular file (a FIFO)");
    expect_clean_error(run_cli(fmt::format("{} '{}'", command, dir.file("none.json"))),
                       dir.file("none.json") + ": no such file");
  }
  expect_clean_error(run_cli(fmt::format("run --inputs data='{}'", fifo)), fifo + ": not a regular file (a FIFO)");
  // A NUL byte is named by its offset, not taken for the end of the file.
  const std::string nul = write_file(dir, "nul.json", std::string(R"({"nodes": [)") + '\0' + "]}");
  expect_clean_error(run_cli(fmt::format("info '{}'", nul)), nul + ": a NUL byte at offset 11: a symbol file is JSON text");
}

// An empty path (an unset shell variable) is refused, not taken as "not given".
TEST(CliModelInput, EmptyPathIsRefused) {
  const std::string mlp = model_path("mlp_legacy_000800-test-symbol.json");
  for (const std::string& args :
       {std::string("run --save-outputs ''"), std::string("run --params ''"), std::string("run ''"), std::string("info ''"),
        std::string("run --backward --save-gradients ''"), fmt::format("convert '{}' --amp bf16 -o ''", mlp)}) {
    SCOPED_TRACE(args);
    expect_clean_error(run_cli(args), "an empty path");
  }
}

// Zero is an extent like any other, from --shape as from an .npy file: the outputs are
// empty. A negative one is refused.
TEST(CliModelInput, ZeroBatchIsEmptyFromShapeAndFilesAlike) {
  testing::ScopedTempDir dir;
  const std::string empty = dir.file("empty.npy");
  runtime::write_npy(empty, runtime::Tensor(ir::TensorType{ir::DType::f32, {0, 3, 32, 32}}));
  for (const std::string& args : {std::string("run --shape data=0,3,32,32"), "run --inputs data=" + empty}) {
    SCOPED_TRACE(args);
    const CliResult r = run_cli(args + " --repeat 1 --no-baseline");
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("f32[0,10]"), std::string::npos) << r.out;
  }
  const std::string mlp = model_path("mlp_legacy_000800-test-symbol.json");
  const CliResult info = run_cli(fmt::format("info '{}' --shape data=0,5 --json", mlp));
  ASSERT_EQ(info.status, 0) << info.err;
  EXPECT_EQ(parse_json(info)["outputs"][0]["shape"], nlohmann::json::array({0, 10}));
  expect_clean_error(run_cli(fmt::format("info '{}' --shape data=-1,5", mlp)), "'-1' is not an integer extent of 0 or more");
}

// More than 2^63 - 1 elements, given or inferred, is refused by info as by run.
TEST(CliModelInput, TooManyElementsAreRefusedByInfoAsByRun) {
  const std::string mlp = model_path("mlp_legacy_000800-test-symbol.json");
  for (const char* command : {"info", "run"}) {
    SCOPED_TRACE(command);
    expect_clean_error(run_cli(fmt::format("{} '{}' --shape data=4294967296,4294967296", command, mlp)),
                       "--shape 'data=4294967296,4294967296': shape [4294967296,4294967296] has more than 2^63 elements");
    // The input fits (2^56 elements); fc1's output, 128 times as many, does not.
    expect_clean_error(run_cli(fmt::format("{} '{}' --shape data=72057594037927936,1", command, mlp)),
                       "'fc1' (FullyConnected): shape [72057594037927936,128] has more than 2^63 elements");
  }
}

// An input file of another dtype than the model computes in: the file is named, not the
// weight it meets. Where the whole model can run in the file's type, it does.
TEST(CliModelInput, InputFileOfAnotherDtypeIsBlamedOnTheFile) {
  const std::string resnet = model_path("cifar_resnet20_v2-gluoncv-symbol.json");
  SKIP_WITHOUT_MODEL(resnet);
  testing::ScopedTempDir dir;
  const std::string f64 = dir.file("f64.npy");
  runtime::write_npy(f64, runtime::Tensor::zeros(ir::TensorType{ir::DType::f64, {1, 3, 32, 32}}));
  expect_clean_error(run_cli(fmt::format("run '{}' --inputs data='{}' --repeat 1", resnet, f64)),
                     "--inputs data: the file holds f64, but the model computes in f32 (node ");
  const std::string mlp = model_path("mlp_legacy_000800-test-symbol.json");
  const std::string small = dir.file("small.npy");
  runtime::write_npy(small, runtime::Tensor::zeros(ir::TensorType{ir::DType::f64, {2, 5}}));
  const CliResult mlp_f64 = run_cli(fmt::format("run '{}' --inputs data='{}' --repeat 1 --no-baseline", mlp, small));
  EXPECT_EQ(mlp_f64.status, 0) << mlp_f64.err;
  EXPECT_NE(mlp_f64.out.find("f64[2,10]"), std::string::npos) << mlp_f64.out;
}

// --exclude names op nodes of the model; a misspelt one is an error, not silently ignored.
TEST(CliModelInput, ExcludeNamesMustBeNodesOfTheModel) {
  testing::ScopedTempDir dir;
  const CliResult ok = run_cli("run --amp bf16 --exclude softmax --repeat 1 --no-baseline");
  EXPECT_EQ(ok.status, 0) << ok.err;
  for (const std::string& command :
       {std::string("run --repeat 1"), std::string("dot -o ") + dir.file("x.dot"),
        fmt::format("convert '{}' --shape data=2,5 -o '{}'", model_path("mlp_legacy_000800-test-symbol.json"), dir.file("x.json"))}) {
    SCOPED_TRACE(command);
    expect_clean_error(run_cli(command + " --amp bf16 --exclude softmax,no_such_node"),
                       "--exclude no_such_node: the model has no op node of that name");
  }
}

// A normalization's eps is 0 or more, refused by info as by run.
TEST(CliModelInput, NegativeBatchNormEpsIsRefused) {
  testing::ScopedTempDir dir;
  const auto model = [&](const char* eps) {
    return write_file(dir, fmt::format("bn{}.json", eps), fmt::format(R"js({{"nodes": [
      {{"op": "null", "name": "x", "inputs": []}},
      {{"op": "BatchNorm", "name": "bn", "attrs": {{"eps": "{}"}}, "inputs": [[0, 0, 0]]}}],
      "heads": [[1, 0, 0]]}})js", eps));
  };
  const CliResult ok = run_cli(fmt::format("run '{}' --shape x=2,3 --repeat 1", model("0.001")));
  EXPECT_EQ(ok.status, 0) << ok.err;
  for (const char* command : {"info", "run"})
    expect_clean_error(run_cli(fmt::format("{} '{}' --shape x=2,3", command, model("-1"))),
                       "'bn' (BatchNorm): eps=-1 must be 0 or more");
}

}  // namespace
}  // namespace ampfuse
