// `ampfuse convert`, `run --amp / --no-fuse / --interpreter` and `fuzz`, run as a user runs them.
#include "ir/mxnet_json.h"
#include "ir/type_inference.h"
#include "tests/cli_util.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <iterator>

namespace ampfuse {
namespace {

TEST(CliConvert, WritesMxnetJsonThatReimportsAndReportsCounts) {
  const std::string model = model_path("lstm_ptb_fusedrnn-mms-symbol.json");
  SKIP_WITHOUT_MODEL(model);
  testing::ScopedTempDir dir;
  const std::string out = dir.file("lstm_bf16.json");
  const CliResult r = run_cli(fmt::format("convert '{}' --shape data=35,1 --shape softmax_label=35 --amp bf16 -o '{}' --json", model, out));
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = parse_json(r);
  for (const char* key : {"casts_inserted", "casts_removed", "lp16_nodes", "fp32_nodes", "op_classes"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_GT(j["casts_inserted"].get<int>(), 0);
  EXPECT_GT(j["lp16_nodes"].get<int>(), 0);
  EXPECT_GT(j["op_classes"]["lowp"].get<int>(), 0);
  // The written file is MXNet JSON with amp_cast nodes that ampfuse reads back.
  std::ifstream f(out);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"op\": \"amp_cast\""), std::string::npos);
  EXPECT_NE(text.find("\"dtype\": \"bfloat16\""), std::string::npos);
  // Its inputs carry no shape (convert writes no --shape batch into the file): give them.
  ir::MxnetImportOptions shapes;
  shapes.input_shapes = {{"data", {35, 1}}, {"softmax_label", {35}}};
  ir::Graph back = ir::load_mxnet_json_file(out, shapes);
  EXPECT_NO_THROW(ir::infer_types(back));

  const CliResult text_report = run_cli(fmt::format("convert '{}' --shape data=35,1 --shape softmax_label=35 --amp fp16 -o '{}'", model, out));
  ASSERT_EQ(text_report.status, 0) << text_report.err;
  EXPECT_NE(text_report.out.find("casts:"), std::string::npos) << text_report.out;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// An input whose __shape__ hint leaves the batch open ("(0, 3)" in a 1.x file) needs no
// --shape: the converted graph does not depend on it (as MXNet's convert_symbol asks for no
// shapes). The result keeps the hint as the model had it, with or without --shape.
TEST(CliConvert, OpenHintExtentsNeedNoShape) {
  const std::string model = std::string(AMPFUSE_TESTDATA_DIR) + "/mxnet/open_extent_dense.json";
  testing::ScopedTempDir dir;
  const std::string plain = dir.file("plain.json"), with_shape = dir.file("shaped.json");
  const CliResult r = run_cli(fmt::format("convert '{}' --amp bf16 -o '{}' --json", model, plain));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(parse_json(r)["op_classes"]["lowp"].get<int>(), 1);  // the FullyConnected
  ASSERT_EQ(run_cli(fmt::format("convert '{}' --shape data=7,3 --amp bf16 -o '{}'", model, with_shape)).status, 0);
  const std::string text = read_text(plain);
  EXPECT_EQ(text, read_text(with_shape));  // --shape changes nothing but what it checks
  ir::MxnetImportOptions no_inference;
  no_inference.infer = false;
  const ir::Graph back = ir::load_mxnet_json_file(plain, no_inference);
  const ir::Node& data = back.nodes.at(static_cast<size_t>(*back.find_var("data")));
  EXPECT_EQ(data.hints.at("__shape__"), "(0, 3)");
  EXPECT_TRUE(data.outputs.empty());
  // The weights' shapes do not depend on the batch: written, as before.
  EXPECT_NE(text.find("\"__shape__\": \"(4, 3)\""), std::string::npos) << text;
  // It runs at any batch.
  const CliResult run = run_cli(fmt::format("run '{}' --shape data=5,3 --no-baseline --repeat 1 --json", plain));
  EXPECT_EQ(run.status, 0) << run.err;
}

// Where the graph does depend on the open extent, convert says which input to give.
TEST(CliConvert, OpenHintExtentsThatMatterAskForShape) {
  testing::ScopedTempDir dir;
  const std::string data = std::string(AMPFUSE_TESTDATA_DIR) + "/mxnet/";
  // A Reshape to (2, 6) needs 12 elements: the batch must be 4.
  expect_clean_error(run_cli(fmt::format("convert '{}' --amp bf16 -o '{}'", data + "open_extent_reshape.json", dir.file("r.json"))),
                     "typed without --shape: data (__shape__ (0, 3), its open extents as 1); give their shapes");
  ASSERT_EQ(run_cli(fmt::format("convert '{}' --shape data=4,3 --amp bf16 -o '{}'", data + "open_extent_reshape.json",
                                dir.file("r.json")))
                .status,
            0);
  // A _zeros of shape (0, 3) cast for a FullyConnected gets the inferred batch written in:
  // the result depends on the batch, so it must be given.
  expect_clean_error(run_cli(fmt::format("convert '{}' --amp bf16 -o '{}'", data + "open_extent_zeros.json", dir.file("z.json"))),
                     "the converted model depends on the shapes of inputs the file leaves open: typed without --shape "
                     "as data (__shape__ (0, 3), its open extents as 1), and again as data (__shape__ (0, 3), its open "
                     "extents as 2)");
  // No hint at all, and no op that implies a rank (Activation keeps any): tried at each rank
  // from 1 to 5, it converts at all of them to one file, which runs at any rank.
  const CliResult any_rank =
      run_cli(fmt::format("convert '{}' --amp bf16 -o '{}'", data + "three_activations.json", dir.file("m.json")));
  ASSERT_EQ(any_rank.status, 0) << any_rank.err;
  for (const char* shape : {"7", "2,3,5"})
    EXPECT_EQ(run_cli(fmt::format("run '{}' --shape x={} --no-baseline --repeat 1", dir.file("m.json"), shape)).status, 0)
        << shape;
}

// A Gluon export: `data` has no __shape__ hint; it is scaled per channel, batch-normalized and
// convolved. The convolution implies rank 4, the (1, 3, 1, 1) scale the 3 channels (the
// convolution's weight hint leaves them open). `fc_weight_hint` pins the flattened size or not.
std::string unhinted_conv_model(const std::string& fc_weight_hint) {
  nlohmann::json nodes = nlohmann::json::array();
  auto var = [&](const std::string& name, const std::string& hint) {
    nlohmann::json n = {{"op", "null"}, {"name", name}, {"inputs", nlohmann::json::array()}};
    if (!hint.empty()) n["attrs"] = {{"__shape__", hint}};
    nodes.push_back(n);
  };
  var("data", "");
  var("scale", "(1, 3, 1, 1)");
  nodes.push_back({{"op", "broadcast_mul"}, {"name", "scaled"}, {"inputs", {{0, 0, 0}, {1, 0, 0}}}});
  for (const char* p : {"bn_gamma", "bn_beta", "bn_moving_mean", "bn_moving_var"}) var(p, "(0,)");
  nodes.push_back({{"op", "BatchNorm"}, {"name", "bn"}, {"attrs", {{"fix_gamma", "False"}}},
                   {"inputs", {{2, 0, 0}, {3, 0, 0}, {4, 0, 0}, {5, 0, 1}, {6, 0, 1}}}});
  var("conv_weight", "(4, 0, 3, 3)");
  nodes.push_back({{"op", "Convolution"},
                   {"name", "conv"},
                   {"attrs", {{"kernel", "(3, 3)"}, {"pad", "(1, 1)"}, {"num_filter", "4"}, {"no_bias", "True"}}},
                   {"inputs", {{7, 0, 0}, {8, 0, 0}}}});
  var("fc_weight", fc_weight_hint);
  nodes.push_back({{"op", "FullyConnected"},
                   {"name", "fc"},
                   {"attrs", {{"num_hidden", "2"}, {"no_bias", "True"}}},
                   {"inputs", {{9, 0, 0}, {10, 0, 0}}}});
  return nlohmann::json{{"nodes", nodes}, {"arg_nodes", {0, 1, 3, 4, 5, 6, 8, 10}}, {"heads", {{11, 0, 0}}},
                        {"attrs", {{"mxnet_version", {"int", 10901}}}}}
      .dump();
}

// An input with no hint at all (what Gluon's export writes) takes the shape the op reading
// it implies; converted at two such shapes, the results must agree. The weights whose hints
// leave extents open keep them (their inferred shapes hold the stand-in extents).
TEST(CliConvert, AnInputWithoutHintTakesTheShapeItsReaderImplies) {
  testing::ScopedTempDir dir;
  std::ofstream(dir.file("open.json")) << unhinted_conv_model("(2, 0)");
  const CliResult r = run_cli(fmt::format("convert '{}' --amp bf16 -o '{}'", dir.file("open.json"), dir.file("c.json")));
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json c = nlohmann::json::parse(read_text(dir.file("c.json")));
  auto attrs_of = [&](const std::string& name) {
    for (const nlohmann::json& n : c["nodes"])
      if (n["name"] == name) return n.value("attrs", nlohmann::json::object());
    ADD_FAILURE() << "no node " << name;
    return nlohmann::json();
  };
  EXPECT_EQ(attrs_of("data"), nlohmann::json({{"__dtype__", "0"}}));
  EXPECT_EQ(attrs_of("conv_weight")["__shape__"], "(4, 0, 3, 3)");
  EXPECT_EQ(attrs_of("fc_weight")["__shape__"], "(2, 0)");
  EXPECT_EQ(attrs_of("scale")["__shape__"], "(1, 3, 1, 1)");
  EXPECT_NE(read_text(dir.file("c.json")).find("\"amp_cast\""), std::string::npos);
  // The result runs at a shape of the user's choosing.
  const CliResult run = run_cli(fmt::format("run '{}' --shape data=2,3,5,5 --no-baseline --repeat 1", dir.file("c.json")));
  EXPECT_EQ(run.status, 0) << run.err;

  // A weight hint that pins the flattened size (4 x 5 x 5): the stand-in shape does not fit,
  // and the message says what data was taken to be (its channels from the scale).
  std::ofstream(dir.file("pinned.json")) << unhinted_conv_model("(2, 100)");
  expect_clean_error(run_cli(fmt::format("convert '{}' --amp bf16 -o '{}'", dir.file("pinned.json"), dir.file("p.json"))),
                     "typed without --shape: data (no __shape__ hint, as f32[1,3,512,512]); give their shapes");
  EXPECT_EQ(run_cli(fmt::format("convert '{}' --shape data=1,3,5,5 --amp bf16 -o '{}'", dir.file("pinned.json"),
                                dir.file("p.json")))
                .status,
            0);
}

// A hint-less input read first by an op that implies no rank (an NHWC model's transpose):
// typed at each rank from 1 to 5, the model converts at rank 4 alone. Where it converts at
// no rank, the error says so and names what was tried.
std::string transposed_input_model(const std::string& fc_weight_hint) {
  nlohmann::json nodes = nlohmann::json::array();
  nodes.push_back({{"op", "null"}, {"name", "data"}, {"inputs", nlohmann::json::array()}});
  nodes.push_back({{"op", "transpose"}, {"name", "nchw"}, {"attrs", {{"axes", "(0, 3, 1, 2)"}}}, {"inputs", {{0, 0, 0}}}});
  nodes.push_back({{"op", "null"}, {"name", "conv_weight"}, {"attrs", {{"__shape__", "(4, 0, 3, 3)"}}}, {"inputs", nlohmann::json::array()}});
  nodes.push_back({{"op", "Convolution"},
                   {"name", "conv"},
                   {"attrs", {{"kernel", "(3, 3)"}, {"pad", "(1, 1)"}, {"num_filter", "4"}, {"no_bias", "True"}}},
                   {"inputs", {{1, 0, 0}, {2, 0, 0}}}});
  nodes.push_back({{"op", "null"}, {"name", "fc_weight"}, {"attrs", {{"__shape__", fc_weight_hint}}}, {"inputs", nlohmann::json::array()}});
  nodes.push_back({{"op", "FullyConnected"},
                   {"name", "fc"},
                   {"attrs", {{"num_hidden", "2"}, {"no_bias", "True"}}},
                   {"inputs", {{3, 0, 0}, {4, 0, 0}}}});
  return nlohmann::json{{"nodes", nodes}, {"arg_nodes", {0, 2, 4}}, {"heads", {{5, 0, 0}}},
                        {"attrs", {{"mxnet_version", {"int", 10901}}}}}
      .dump();
}

TEST(CliConvert, AnInputWhoseRankNoOpImpliesIsTriedAtEachRank) {
  testing::ScopedTempDir dir;
  std::ofstream(dir.file("nhwc.json")) << transposed_input_model("(2, 0)");
  const CliResult r = run_cli(fmt::format("convert '{}' --amp bf16 -o '{}'", dir.file("nhwc.json"), dir.file("c.json")));
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_EQ(run_cli(fmt::format("convert '{}' --shape data=1,5,5,3 --amp bf16 -o '{}'", dir.file("nhwc.json"),
                                dir.file("shaped.json")))
                .status,
            0);
  nlohmann::json plain = nlohmann::json::parse(read_text(dir.file("c.json")));
  const nlohmann::json shaped = nlohmann::json::parse(read_text(dir.file("shaped.json")));
  // The same conversion, but for the hints: data keeps none, the weights keep the file's.
  for (nlohmann::json& n : plain["nodes"])
    if (n["name"] == "data") {
      EXPECT_FALSE(n.contains("attrs") && n["attrs"].contains("__shape__")) << n;
    }
  EXPECT_NE(read_text(dir.file("c.json")).find("\"amp_cast\""), std::string::npos);
  ASSERT_EQ(plain["nodes"].size(), shaped["nodes"].size());
  for (size_t i = 0; i < plain["nodes"].size(); ++i)
    EXPECT_EQ(plain["nodes"][i]["op"], shaped["nodes"][i]["op"]) << i;
  EXPECT_EQ(run_cli(fmt::format("run '{}' --shape data=2,5,5,3 --no-baseline --repeat 1", dir.file("c.json"))).status, 0);

  // A weight that pins the flattened size: no rank converts, and the error says so.
  std::ofstream(dir.file("pinned.json")) << transposed_input_model("(2, 100)");
  expect_clean_error(run_cli(fmt::format("convert '{}' --amp bf16 -o '{}'", dir.file("pinned.json"), dir.file("p.json"))),
                     "no op implies the rank of 1 input(s) without a __shape__ hint, and typed at every rank from 1 to 5 "
                     "the model does not convert either");
  EXPECT_EQ(run_cli(fmt::format("convert '{}' --shape data=1,5,5,4 --amp bf16 -o '{}'", dir.file("pinned.json"),
                                dir.file("p.json")))
                .status,
            0);
}

// The CI subset's Gluon export (no hint on data, open channels on the first weight) converts
// without --shape to what --shape gives, but for the weights' hints, which stay the file's.
TEST(CliConvert, GluonExportConvertsWithoutShape) {
  const std::string model = std::string(AMPFUSE_TESTDATA_DIR) + "/zoo/cifar_resnet20_v1/model-symbol.json";
  testing::ScopedTempDir dir;
  ASSERT_EQ(run_cli(fmt::format("convert '{}' --amp bf16 -o '{}'", model, dir.file("plain.json"))).status, 0);
  ASSERT_EQ(run_cli(fmt::format("convert '{}' --shape data=1,3,32,32 --amp bf16 -o '{}'", model, dir.file("shaped.json")))
                .status,
            0);
  const nlohmann::json file = nlohmann::json::parse(read_text(model));
  std::map<std::string, std::string> file_hints;
  for (const nlohmann::json& n : file["nodes"])
    if (n["op"] == "null" && n.contains("attrs") && n["attrs"].contains("__shape__"))
      file_hints[n["name"]] = n["attrs"]["__shape__"];
  nlohmann::json plain = nlohmann::json::parse(read_text(dir.file("plain.json")));
  const nlohmann::json shaped = nlohmann::json::parse(read_text(dir.file("shaped.json")));
  ASSERT_EQ(plain["nodes"].size(), shaped["nodes"].size());
  int weights_with_open_hints = 0;
  for (size_t i = 0; i < plain["nodes"].size(); ++i) {
    nlohmann::json& n = plain["nodes"][i];
    if (n["op"] == "null" && n.contains("attrs") && n["attrs"].contains("__shape__") &&
        n["attrs"]["__shape__"] != shaped["nodes"][i]["attrs"]["__shape__"]) {
      EXPECT_EQ(n["attrs"]["__shape__"], file_hints.at(n["name"])) << n["name"];
      n["attrs"]["__shape__"] = shaped["nodes"][i]["attrs"]["__shape__"];
      ++weights_with_open_hints;
    }
  }
  EXPECT_GT(weights_with_open_hints, 0);
  EXPECT_EQ(plain, shaped);
  EXPECT_EQ(run_cli(fmt::format("run '{}' --shape data=1,3,32,32 --no-baseline --repeat 1", dir.file("plain.json"))).status,
            0);
}

TEST(CliConvert, BadOptionsAreNamed) {
  const std::string model = model_path("lstm_ptb_fusedrnn-mms-symbol.json");
  SKIP_WITHOUT_MODEL(model);
  testing::ScopedTempDir dir;
  expect_clean_error(run_cli(fmt::format("convert '{}' --shape data=35,1 --shape softmax_label=35 --amp int8 -o '{}'", model, dir.file("x.json"))),
                     "--amp int8: expected bf16 or fp16");
  expect_clean_error(run_cli(fmt::format("convert '{}' --shape data=35,1 --shape softmax_label=35 --amp off -o '{}'", model, dir.file("x.json"))),
                     "--amp off: expected bf16 or fp16");
  expect_clean_error(run_cli(fmt::format("convert '{}' --shape data=35,1 --shape softmax_label=35 -o '{}'", model, dir.file("x.json"))),
                     "--amp is required");
  expect_clean_error(run_cli(fmt::format("convert '{}' --shape data=35,1 --shape softmax_label=35 --amp bf16 -o /nonexistent/dir/x.json", model)),
                     "/nonexistent/dir/x.json");
  expect_clean_error(run_cli(fmt::format("convert '{}' --shape data=35,1 --shape softmax_label=35 --amp bf16 --layout nchw -o '{}'", model, dir.file("x.json"))),
                     "--layout nchw");
  expect_clean_error(run_cli(fmt::format("convert '{}' --shape data=35,1 --shape softmax_label=35 --amp bf16 --fp32-ops NoSuchOp -o '{}'", model, dir.file("x.json"))),
                     "NoSuchOp");
}

TEST(CliRunAmp, DefaultModelReportsPlanCompileLatencyAndError) {
  const CliResult r = run_cli("run --amp bf16 --json --repeat 3");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = parse_json(r);
  EXPECT_EQ(j["engine"], "fused");
  EXPECT_EQ(j["amp"]["target"], "bf16");
  EXPECT_GT(j["amp"]["casts_inserted"].get<int>(), 0);
  EXPECT_GT(j["plan"]["kernels"].get<int>(), 0);
  EXPECT_GE(j["plan"]["fused_ops"].get<int>(), j["plan"]["kernels"].get<int>());
  EXPECT_TRUE(j["plan"]["fallbacks"].empty()) << j["plan"]["fallbacks"];
  EXPECT_GT(j["baseline_f32_unfused_ms"].get<double>(), 0);
  // bf16 against f32 on the default model: small but not zero.
  EXPECT_GT(j["max_abs_error"].get<double>(), 0);
  EXPECT_LT(j["max_rel_error"].get<double>(), 0.02);

  const nlohmann::json f32 = parse_json(run_cli("run --json --repeat 1"));
  EXPECT_TRUE(f32["amp"].is_null());
  EXPECT_LT(f32["max_rel_error"].get<double>(), 1e-5);
  // The default model's BatchNorm follows its convolution: folded unless asked not to,
  // and never on the unfused path; the folded weights are computed on the first run.
  EXPECT_EQ(f32["plan"]["folded_batchnorms"], 1);
  EXPECT_GT(f32["plan"]["constant_steps"].get<int>(), 0);
  EXPECT_GT(f32["first_run_ms"].get<double>(), 0);
  EXPECT_EQ(parse_json(run_cli("run --json --repeat 1 --no-fold-bn"))["plan"]["folded_batchnorms"], 0);
  EXPECT_EQ(parse_json(run_cli("run --json --repeat 1 --no-fuse"))["plan"]["folded_batchnorms"], 0);
}

TEST(CliRunAmp, UnfusedAndInterpreterAgreeWithFused) {
  const nlohmann::json fused = parse_json(run_cli("run --json --repeat 1 --seed 4 --amp fp16"));
  const nlohmann::json unfused = parse_json(run_cli("run --json --repeat 1 --seed 4 --amp fp16 --no-fuse"));
  const nlohmann::json interp = parse_json(run_cli("run --json --repeat 1 --seed 4 --amp fp16 --interpreter"));
  EXPECT_EQ(unfused["engine"], "unfused");
  EXPECT_EQ(interp["engine"], "interpreter");
  EXPECT_TRUE(interp["plan"].is_null());
  EXPECT_GT(unfused["plan"]["kernels"].get<int>(), fused["plan"]["kernels"].get<int>());
  EXPECT_NEAR(fused["outputs"][0]["mean"].get<double>(), interp["outputs"][0]["mean"].get<double>(), 1e-3);
  EXPECT_NEAR(unfused["outputs"][0]["max"].get<double>(), interp["outputs"][0]["max"].get<double>(), 1e-2);
}

TEST(CliRunAmp, HumanReportAndBadOptions) {
  const CliResult r = run_cli("run --amp bf16 --repeat 1");
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* line : {"amp:     bf16", "plan:", "BatchNorms folded into the weights and bias of the convolution before each: 1",
                           "kernels:", "latency:", "speed-up", "error:   vs f32"})
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  expect_clean_error(run_cli("run --amp fp8"), "--amp fp8");
  expect_clean_error(run_cli("run --repeat 0"), "--repeat 0");
  expect_clean_error(run_cli("run --interpreter --no-fuse"), "choose one");
  expect_clean_error(run_cli("run --exclude conv0"), "need --amp bf16 or fp16");
  // Channels-last is a layout choice, not an AMP one: f32 takes it too.
  const CliResult nhwc = run_cli("run --layout nhwc --repeat 1 --json");
  ASSERT_EQ(nhwc.status, 0) << nhwc.err;
  EXPECT_LT(parse_json(nhwc)["max_rel_error"].get<double>(), 1e-5) << nhwc.out;
  expect_clean_error(run_cli("run --layout nchw"), "--layout nchw: expected auto, nhwc or keep");
  // auto, the default, runs inference channels-last; keep the model's NCHW.
  const CliResult keep = run_cli("run --layout keep --repeat 1 --json");
  ASSERT_EQ(keep.status, 0) << keep.err;
  EXPECT_LT(parse_json(keep)["max_rel_error"].get<double>(), 1e-5) << keep.out;
  expect_clean_error(run_cli("run --device tpu"), "--device tpu: expected cpu or cuda");
  // No GPU here: one line naming the missing driver or device.
  expect_clean_error(run_cli("run --device cuda"), "--device cuda: ");
}

TEST(CliFuzz, RunsSeedsAndReportsThem) {
  const CliResult r = run_cli("fuzz --seed 100 --count 20");
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("20 graphs (seeds 100-119)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0 failed"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace ampfuse
