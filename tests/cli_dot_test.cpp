// `ampfuse dot`: .dot and .svg files from the default model and a model file, AMP colours,
// and the errors for bad output names, missing models and a missing Graphviz.
#include "tests/cli_util.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace ampfuse {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// data -> Convolution -> relu -> Flatten -> FullyConnected, MXNet 1.x JSON.
constexpr const char* kTinyModel = R"json({"nodes": [
  {"op": "null", "name": "data", "inputs": []},
  {"op": "null", "name": "conv_weight", "inputs": []},
  {"op": "null", "name": "conv_bias", "inputs": []},
  {"op": "Convolution", "name": "conv", "attrs": {"kernel": "(3, 3)", "num_filter": "4"},
   "inputs": [[0, 0, 0], [1, 0, 0], [2, 0, 0]]},
  {"op": "Activation", "name": "relu", "attrs": {"act_type": "relu"}, "inputs": [[3, 0, 0]]},
  {"op": "Flatten", "name": "flat", "inputs": [[4, 0, 0]]},
  {"op": "null", "name": "fc_weight", "inputs": []},
  {"op": "null", "name": "fc_bias", "inputs": []},
  {"op": "FullyConnected", "name": "fc", "attrs": {"num_hidden": "3"}, "inputs": [[5, 0, 0], [6, 0, 0], [7, 0, 0]]}
 ],
 "arg_nodes": [0, 1, 2, 6, 7], "heads": [[8, 0, 0]]})json";

TEST(CliDot, WritesSvgOfTheDefaultModel) {
  testing::ScopedTempDir dir;
  const std::string svg = dir.file("plan.svg");
  const CliResult r = run_cli(fmt::format("dot --amp bf16 -o '{}'", svg));
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("wrote " + svg), std::string::npos) << r.out;
  const std::string text = read_file(svg);
  EXPECT_TRUE(text.starts_with("<?xml") || text.starts_with("<svg")) << text.substr(0, 200);
  EXPECT_NE(text.find("<svg"), std::string::npos);
  EXPECT_NE(text.find("kernel 0: "), std::string::npos);
  EXPECT_NE(text.find("#fdae6b"), std::string::npos) << "no bf16 colour after --amp bf16";
}

// dot draws the plan run runs: BatchNorms folded into convolutions (their new weights are
// kernels computed once), casts around ops oneDNN computes in f32.
TEST(CliDot, DrawsThePlanRunRuns) {
  testing::ScopedTempDir dir;
  const std::string model = model_path("cifar_resnet20_v2-gluoncv-symbol.json");
  const auto kernels = [&](const std::string& flags) {
    const CliResult r = run_cli(fmt::format("dot '{}' --shape data=1,3,32,32 {} -o '{}'", model, flags, dir.file("c.dot")));
    EXPECT_EQ(r.status, 0) << r.err;
    int all = 0, once = 0;
    std::sscanf(r.out.substr(r.out.find(": ") + 2).c_str(), "%d fused kernels (%d of them", &all, &once);
    return std::pair{all, once};
  };
  const CliResult run = run_cli(fmt::format("run '{}' --shape data=1,3,32,32 --repeat 1 --no-baseline --json", model));
  ASSERT_EQ(run.status, 0) << run.err;
  const nlohmann::json j = parse_json(run);
  const auto [all, once] = kernels("");
  EXPECT_EQ(all - once, j["plan"]["kernels"].get<int>());
  EXPECT_GT(once, 0) << "the folded weights and biases";
  // Without folding, and in the model's layout (channels-last transposes each weight once
  // too), nothing is computed from the weights alone.
  const auto [unfolded, unfolded_once] = kernels("--no-fold-bn --layout keep");
  EXPECT_EQ(unfolded_once, 0);
  EXPECT_NE(unfolded, all);
}

TEST(CliDot, WritesDotOfAModelFile) {
  testing::ScopedTempDir dir;
  const std::string model = dir.file("tiny-symbol.json");
  std::ofstream(model) << kTinyModel;
  const std::string out = dir.file("tiny.dot");
  // The convolution's relu is a kernel of its own, drawn as a cluster.
  const CliResult r =
      run_cli(fmt::format("dot '{}' --shape data=2,3,8,8 --layout keep --no-epilogues -o '{}'", model, out));
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  const std::string text = read_file(out);
  EXPECT_TRUE(text.starts_with("digraph ampfuse {")) << text;
  // Weights are small lines in their reader's label, not nodes of their own.
  EXPECT_NE(text.find("[label=<conv<br/>Convolution<br/><font point-size=\"7\">weight: conv_weight f32 [4,3,3,3]</font>"
                      "<br/><font point-size=\"7\">bias: conv_bias f32 [4]</font>>, shape=box, style=\"filled,bold\""),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("[label=\"conv_weight"), std::string::npos) << text;
  EXPECT_NE(text.find("subgraph cluster_0 {"), std::string::npos) << text;
  EXPECT_NE(text.find("[label=\"f32 [2,4,6,6]\"]"), std::string::npos) << text;
  // The legend shows every colour; no node is bf16 without --amp.
  EXPECT_EQ(text.find("#fdae6b", text.find("legend_bool")), std::string::npos) << "bf16 colour without --amp";
  // By default too: a relu is never the convolution's oneDNN post-op (which turns NaN into 0).
  ASSERT_EQ(run_cli(fmt::format("dot '{}' --shape data=2,3,8,8 --layout keep -o '{}'", model, out)).status, 0);
  EXPECT_EQ(read_file(out), text);
}

TEST(CliDot, BadArgumentsGiveClearErrors) {
  testing::ScopedTempDir dir;
  expect_clean_error(run_cli(fmt::format("dot -o '{}'", dir.file("plan.png"))), "unknown extension '.png'");
  expect_clean_error(run_cli(fmt::format("dot '{}' -o '{}'", dir.file("missing.json"), dir.file("x.dot"))),
                     "missing.json: no such file");
  expect_clean_error(run_cli("dot"), "--output");
  expect_clean_error(run_cli(fmt::format("dot --amp int4 -o '{}'", dir.file("x.dot"))), "--amp int4");
  expect_clean_error(run_cli(fmt::format("dot -o '{}'", dir.file("no_such_dir/x.dot"))), "cannot write");
  expect_clean_error(run_cli(fmt::format("dot --shape data=1,3,16,16 -o '{}'", dir.file("x.dot"))), "N,3,32,32");
}

TEST(CliDot, SvgWithoutGraphvizSaysSo) {
  testing::ScopedTempDir dir;
  const char* old = std::getenv("PATH");
  const std::string saved = old ? old : "";
  ::setenv("PATH", dir.path().c_str(), 1);  // no `dot` here
  const CliResult r = run_cli(fmt::format("dot -o '{}'", dir.file("plan.svg")));
  ::setenv("PATH", saved.c_str(), 1);
  expect_clean_error(r, "Graphviz's 'dot' program, which is not on PATH");
  EXPECT_FALSE(std::filesystem::exists(dir.file("plan.svg")));
}

}  // namespace
}  // namespace ampfuse
