// `ampfuse convert` on the shared models against MXNet 1.9.1's own conversion: the same
// number of amp_cast nodes and, op node by op node, the same precision.
//
// The expected values are MXNet's: mx.contrib.amp.convert_symbol(sym, target_dtype=...,
// cast_optional_params=False) with the default lists, the amp_casts counted in the JSON of
// sym.tojson(remove_amp_cast=False), the f32 op nodes from infer_type with f32 inputs.
// tests/mxnet/check_convert_loads.py prints them again next to ampfuse's (and runs
// ampfuse's converted graphs in MXNet).
#include "ir/mxnet_json.h"
#include "tests/cli_util.h"

#include <gtest/gtest.h>

#include <set>
#include <sstream>

namespace ampfuse::testing {
namespace {

struct Expected {
  int amp_casts;
  // Op nodes (casts aside) whose output stays f32; every other one runs in the target type.
  std::set<std::string> f32_nodes;
};

struct MxnetConversion {
  const char* file;
  std::vector<std::string> shapes;  // --shape arguments
  Expected bf16, fp16;
};

const std::vector<MxnetConversion>& conversions() {
  static const std::vector<MxnetConversion> c = {
      {"resnet152-mxnet-symbolic-symbol.json",
       {"data=1,3,224,224"},
       {161, {"bn_data", "flatten0", "softmax"}},
       {159, {"bn_data", "softmax"}}},
      {"cifar_resnet20_v2-gluoncv-symbol.json",
       {"data=1,3,32,32"},
       {27, {"cifarresnetv20_batchnorm0_fwd", "cifarresnetv20_flatten0_flatten0"}},
       {25, {"cifarresnetv20_batchnorm0_fwd"}}},
      {"squeezenet_v1.1-mms-legacy-symbol.json",
       {"data=1,3,224,224"},
       {56, {"drop9", "flatten", "prob"}},
       {54, {"prob"}}},
      {"vgg_small-mkldnn-test-symbol.json", {"data=1,3,224,224"}, {34, {"flatten0", "softmax"}}, {34, {"softmax"}}},
      {"mlp_legacy_000800-test-symbol.json", {"data=4,32"}, {8, {"softmax"}}, {8, {"softmax"}}},
      {"densenet169-imagenet-legacy-symbol.json",
       {"data=1,3,224,224"},
       {174, {"bn_data", "flatten0", "softmax"}},
       {172, {"bn_data", "softmax"}}},
      // MXNet writes 8 casts for fp16: the 7 here and an f32->f32 one on the label, whose
      // Reshape is neutral in fp16 and so not known to its pass to be f32 already.
      {"lstm_ptb_fusedrnn-mms-symbol.json",
       {"data=35,1", "softmax_label=35"},
       {4, {"embed", "lstm_begin_state_0", "lstm_begin_state_1", "lstm_rnn", "reshape8", "reshape9", "softmax"}},
       {7, {"embed", "lstm_begin_state_0", "lstm_begin_state_1", "reshape9", "softmax"}}},
  };
  return c;
}

TEST(AmpMxnetCounts, ConvertedModelsHaveMxnetsCastsAndPrecisions) {
  ScopedTempDir tmp;
  for (const MxnetConversion& m : conversions()) {
    const std::string model = model_path(m.file);
    SKIP_WITHOUT_MODEL(model);
    for (const auto& [amp, target, want] :
         {std::tuple{"bf16", ir::DType::bf16, m.bf16}, std::tuple{"fp16", ir::DType::f16, m.fp16}}) {
      SCOPED_TRACE(fmt::format("{} --amp {}", m.file, amp));
      const std::string out = tmp.file(fmt::format("{}.{}.json", m.file, amp));
      std::string args = fmt::format("convert '{}' --amp {} -o '{}'", model, amp, out);
      for (const std::string& s : m.shapes) args += " --shape " + s;
      const CliResult r = run_cli(args);
      ASSERT_EQ(r.status, 0) << r.err;

      std::ifstream f(out);
      const nlohmann::json j = nlohmann::json::parse(f);
      int casts = 0;
      for (const auto& n : j.at("nodes")) casts += n.at("op") == "amp_cast";
      EXPECT_EQ(casts, want.amp_casts);

      // The written file, read back with the same input shapes (convert writes no batch into
      // the inputs' hints), op node by op node.
      ir::MxnetImportOptions read_back;
      for (const std::string& s : m.shapes) {
        const size_t eq = s.find('=');
        ir::Shape& shape = read_back.input_shapes[s.substr(0, eq)];
        std::stringstream dims(s.substr(eq + 1));
        for (std::string d; std::getline(dims, d, ',');) shape.push_back(std::stoll(d));
      }
      const ir::Graph g = ir::load_mxnet_json_file(out, read_back);
      std::set<std::string> f32_nodes;
      for (const ir::Node& n : g.nodes) {
        if (n.is_var() || n.op == "amp_cast" || n.op == "amp_multicast") continue;
        if (n.outputs.at(0).dtype == ir::DType::f32) f32_nodes.insert(n.name);
        else EXPECT_EQ(n.outputs.at(0).dtype, target) << n.name;
      }
      EXPECT_EQ(f32_nodes, want.f32_nodes);
    }
  }
}

}  // namespace
}  // namespace ampfuse::testing
