// The CLI's model input: --shape and the model's __dtype__ hints, nodes no output reaches,
// and random weights of a converted model (read through amp_cast).
#include "runtime/npy.h"
#include "tests/cli_util.h"

#include <gtest/gtest.h>

#include <cmath>

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

}  // namespace
}  // namespace ampfuse
