// Graphs MXNet's own AMP wrote: ampfuse reads and runs them. tests/data/mxnet/
// cifar_resnet20_v1_mxnet_bf16.json is MXNet 1.9.1's `amp.convert_symbol(sym, 'bfloat16',
// cast_optional_params=False)` of the CI zoo fixture's Gluon export (tests/data/zoo/
// cifar_resnet20_v1), saved with `remove_amp_cast=False`. Its weights carry the hints Gluon
// wrote, whose input channels are open ("(16, 0, 3, 3)"), and each is read through an
// amp_cast: only the Convolution after the cast knows the weight's shape, so inference has
// to carry it back through the cast, as MXNet's does.
#include "engine/execution/executor.h"
#include "ir/error.h"
#include "ir/mxnet_json.h"
#include "runtime/interpreter.h"
#include "runtime/npy.h"
#include "tests/output_compare.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

namespace ampfuse {
namespace {

namespace fs = std::filesystem;

const fs::path kFixture = fs::path(AMPFUSE_TESTDATA_DIR) / "zoo" / "cifar_resnet20_v1";
const fs::path kConverted = fs::path(AMPFUSE_TESTDATA_DIR) / "mxnet" / "cifar_resnet20_v1_mxnet_bf16.json";

runtime::Bindings fixture_bindings(const runtime::Tensor& data) {
  runtime::Bindings vars{{"data", data}};
  for (const auto& entry : fs::directory_iterator(kFixture / "weights"))
    vars.emplace(entry.path().stem().string(), runtime::read_npy(entry.path().string()));
  return vars;
}

TEST(MxnetConvertedModel, WeightsWithOpenHintsAreTypedThroughTheirCasts) {
  const runtime::Tensor data = runtime::read_npy((kFixture / "data.npy").string());
  ir::MxnetImportOptions io;
  io.input_shapes["data"] = data.shape();
  const ir::Graph g = ir::load_mxnet_json_file(kConverted.string(), io);
  // The first convolution's weight: f32 in the file, its channels from the data.
  const ir::Node& weight = g.nodes.at(static_cast<size_t>(*g.find_var("cifarresnetv10_conv0_weight")));
  ASSERT_EQ(weight.outputs.size(), 1u);
  EXPECT_EQ(ir::type_str(weight.outputs[0]), "f32[16,3,3,3]");

  const runtime::Bindings vars = fixture_bindings(data);
  const runtime::Tensor mxnet_bf16 = runtime::read_npy((kFixture / "mxnet_bf16" / "0.npy").string());
  const runtime::Tensor mxnet_f32 = runtime::read_npy((kFixture / "mxnet_f32" / "0.npy").string());
  // The same bf16 graph MXNet ran: its result (identical on the Zen 4 that made the fixture;
  // within about one bf16 rounding where oneDNN's bf16 kernels differ by CPU), and as far
  // from f32 as MXNet's own run.
  const double mxnet_drift = relative_error(mxnet_bf16, mxnet_f32);
  ASSERT_GT(mxnet_drift, 0);  // bf16 really ran there
  for (const auto& [what, out] :
       {std::pair{"interpreter", runtime::interpret(g, vars)}, std::pair{"fused", engine::Executable::compile(g).run(vars)}}) {
    ASSERT_EQ(out.size(), 1u) << what;
    EXPECT_LE(relative_error(out[0], mxnet_bf16), 1e-2) << what;
    EXPECT_LE(relative_error(out[0], mxnet_f32), std::max(5e-2, 2 * mxnet_drift)) << what;
  }
}

// A cast's input takes the shape a consumer gives the cast's output (elemwise_add: both
// operands have one shape); where no consumer determines it (broadcast_add), the variable
// stays unknown, and the error names it.
TEST(MxnetConvertedModel, ACastsInputIsTypedOnlyWhereAConsumerDeterminesIt) {
  auto model = [](const char* add) {
    return fmt::format(R"({{"nodes": [
      {{"op": "null", "name": "x", "inputs": []}},
      {{"op": "null", "name": "w", "inputs": []}},
      {{"op": "amp_cast", "name": "w_cast", "attrs": {{"dtype": "bfloat16"}}, "inputs": [[1, 0, 0]]}},
      {{"op": "amp_cast", "name": "x_cast", "attrs": {{"dtype": "bfloat16"}}, "inputs": [[0, 0, 0]]}},
      {{"op": "{}", "name": "sum", "inputs": [[3, 0, 0], [2, 0, 0]]}}],
      "arg_nodes": [0, 1], "heads": [[4, 0, 0]]}})",
                       add);
  };
  ir::MxnetImportOptions io;
  io.input_shapes["x"] = {2, 3};
  const ir::Graph g = ir::import_mxnet_json(model("elemwise_add"), "cast.json", io);
  EXPECT_EQ(ir::type_str(g.nodes.at(static_cast<size_t>(*g.find_var("w"))).outputs.at(0)), "f32[2,3]");
  try {
    ir::import_mxnet_json(model("broadcast_add"), "cast.json", io);
    ADD_FAILURE() << "w cannot be typed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cast.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("inputs given no shape: w"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ampfuse
