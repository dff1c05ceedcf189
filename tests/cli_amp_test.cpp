// `ampfuse convert`, `run --amp / --no-fuse / --interpreter` and `fuzz`, run as a user runs them.
#include "ir/mxnet_json.h"
#include "ir/type_inference.h"
#include "tests/cli_util.h"

#include <gtest/gtest.h>

#include <fstream>
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
  const ir::Graph back = ir::load_mxnet_json_file(plain, {.infer = false});
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
                     "with the open extents of the __shape__ hints of data set to 1: give their shapes");
  ASSERT_EQ(run_cli(fmt::format("convert '{}' --shape data=4,3 --amp bf16 -o '{}'", data + "open_extent_reshape.json",
                                dir.file("r.json")))
                .status,
            0);
  // A _zeros of shape (0, 3) cast for a FullyConnected gets the inferred batch written in:
  // the result depends on the batch, so it must be given.
  expect_clean_error(run_cli(fmt::format("convert '{}' --amp bf16 -o '{}'", data + "open_extent_zeros.json", dir.file("z.json"))),
                     "the converted model depends on the extents that the __shape__ hints of data leave open");
  // No hint at all: the rank is unknown too.
  expect_clean_error(run_cli(fmt::format("convert '{}' --amp bf16 -o '{}'", data + "three_activations.json", dir.file("m.json"))),
                     "the shape of x is unknown: give --shape x=D0,D1,...");
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
