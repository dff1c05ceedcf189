// `--params FILE.params` of run, info and convert, and `convert --params-out`, on the Gluon
// MLP MXNet 1.9.1 exported (tests/data/params: mlp-symbol.json, mlp-0000.params, an input and
// MXNet's output for it). Whether MXNet loads and runs what convert writes is checked by
// scripts/check_params_with_mxnet.py, on demand.
#include "runtime/mxnet_params.h"
#include "runtime/npy.h"
#include "tests/cli_util.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

namespace ampfuse {
namespace {

using runtime::NDArrayList;
using runtime::Tensor;

std::string data_file(const std::string& name) { return std::string(AMPFUSE_TESTDATA_DIR) + "/params/" + name; }
const std::string kModel = data_file("mlp-symbol.json");
const std::string kParams = data_file("mlp-0000.params");
const std::string kInput = data_file("mlp_input.npy");

double max_abs_difference(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double d = 0;
  for (int64_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, std::fabs(a.get_f64(i) - b.get_f64(i)));
  return d;
}

// The MLP's output for its input, run by ampfuse with `args`, read from --save-outputs.
Tensor mlp_output(const std::string& model, const std::string& args) {
  testing::ScopedTempDir dir;
  const CliResult r = run_cli(fmt::format("run '{}' --inputs data='{}' --save-outputs '{}' --repeat 1 --no-baseline {}",
                                          model, kInput, dir.file("out"), args));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  // One output, named by its node (the converted model's ends in an amp_cast).
  for (const auto& entry : std::filesystem::directory_iterator(dir.file("out"))) return runtime::read_npy(entry.path());
  ADD_FAILURE() << "no output saved";
  return {};
}

TEST(CliParams, RunWithMxnetsWeightsGivesMxnetsOutput) {
  const Tensor want = runtime::read_npy(data_file("mlp_output.npy"));
  EXPECT_LT(max_abs_difference(mlp_output(kModel, fmt::format("--params '{}'", kParams)), want), 1e-5);
  EXPECT_LT(max_abs_difference(mlp_output(kModel, fmt::format("--params '{}' --interpreter", kParams)), want), 1e-5);
  // Random weights give something else: the file is what made the outputs agree.
  EXPECT_GT(max_abs_difference(mlp_output(kModel, ""), want), 0.01);
}

// mlp-0000.params with `edit` applied, written to `dir`.
template <class Edit>
std::string edited_params(const testing::ScopedTempDir& dir, Edit&& edit) {
  NDArrayList list = runtime::read_mxnet_params(kParams);
  edit(list);
  const std::string path = dir.file("edited.params");
  runtime::write_mxnet_params(path, list);
  return path;
}

size_t index_of(const NDArrayList& list, const std::string& name) {
  return static_cast<size_t>(std::find(list.names.begin(), list.names.end(), name) - list.names.begin());
}

TEST(CliParams, MismatchesNameTheFileAndTheArray) {
  testing::ScopedTempDir dir;
  const std::string run = fmt::format("run '{}' --shape data=3,5 --repeat 1 --params ", kModel);
  std::string f = edited_params(dir, [](NDArrayList& l) {
    l.arrays[index_of(l, "arg:dense0_weight")] = Tensor::zeros({ir::DType::f32, {8, 6}});
  });
  expect_clean_error(run_cli(run + f),
                     f + ": array 'arg:dense0_weight' is f32[8,6], but the model's param 'dense0_weight' is f32[8,5]");
  f = edited_params(dir, [](NDArrayList& l) {
    Tensor& v = l.arrays[index_of(l, "aux:batchnorm0_running_var")];
    v = runtime::cast(v, ir::DType::f16);
  });
  expect_clean_error(run_cli(run + f), f + ": array 'aux:batchnorm0_running_var' is f16[8], but the model's aux "
                                           "'batchnorm0_running_var' is f32[8]");
  f = edited_params(dir, [](NDArrayList& l) {
    l.arrays.push_back(Tensor::zeros({ir::DType::f32, {1}}));
    l.names.push_back("arg:dense9_weight");
  });
  expect_clean_error(run_cli(run + f), f + ": array 'arg:dense9_weight' names no variable of the model");
  expect_clean_error(run_cli(run + data_file("unnamed.params")), "unnamed.params: an unnamed list of 2 arrays");
  expect_clean_error(run_cli(fmt::format("run '{}' --inputs data='{}' --params '{}'", kModel, kInput,
                                         edited_params(dir, [](NDArrayList& l) {
                                           l.arrays.push_back(Tensor::zeros({ir::DType::f32, {3, 5}}));
                                           l.names.push_back("data");
                                         }))),
                     "array 'data' binds 'data', which --inputs binds too");
}

TEST(CliParams, BrokenFilesAreOneCleanError) {
  testing::ScopedTempDir dir;
  std::ifstream in(kParams, std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::ofstream(dir.file("cut.params"), std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  for (const char* command : {"run", "info", "convert --amp bf16 -o x.json"}) {
    SCOPED_TRACE(command);
    expect_clean_error(run_cli(fmt::format("{} '{}' --shape data=3,5 --params '{}'", command, kModel, dir.file("cut.params"))),
                       dir.file("cut.params") + ": array ");
    expect_clean_error(run_cli(fmt::format("{} '{}' --shape data=3,5 --params '{}'", command, kModel, kModel)),
                       kModel + ": not an MXNet .params file");
    expect_clean_error(run_cli(fmt::format("{} '{}' --shape data=3,5 --params '{}'", command, kModel, dir.file("none"))),
                       dir.file("none") + ": no such file");
    expect_clean_error(run_cli(fmt::format("{} '{}' --shape data=3,5 --params /dev/null", command, kModel)),
                       "/dev/null: not a regular file (a device)");
  }
}

TEST(CliParams, WeightsMissingFromTheFileAreNamedInAWarning) {
  testing::ScopedTempDir dir;
  const std::string f = edited_params(dir, [](NDArrayList& l) {
    const size_t k = index_of(l, "arg:dense1_bias");
    l.arrays.erase(l.arrays.begin() + static_cast<long>(k));
    l.names.erase(l.names.begin() + static_cast<long>(k));
  });
  const CliResult r = run_cli(fmt::format("run '{}' --shape data=3,5 --repeat 1 --no-baseline --params '{}'", kModel, f));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, fmt::format("ampfuse: warning: {}: no array for 1 weight of the model, which gets random values: "
                               "dense1_bias\n", f));
}

TEST(CliParams, InfoReportsTheFile) {
  const CliResult text = run_cli(fmt::format("info '{}' --params '{}'", kModel, kParams));
  EXPECT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find(fmt::format("params file: {}: 8 arrays, 0 weights without one\n", kParams)), std::string::npos)
      << text.out;
  const CliResult json = run_cli(fmt::format("info '{}' --shape data=3,5 --params '{}' --json", kModel, kParams));
  ASSERT_EQ(json.status, 0) << json.err;
  const nlohmann::json j = parse_json(json);
  EXPECT_EQ(j["params_file"]["path"], kParams);
  EXPECT_EQ(j["params_file"]["arrays"], 8);
  EXPECT_EQ(j["params_file"]["unbound"], nlohmann::json::array());
  // Without --params there is no such key.
  EXPECT_FALSE(parse_json(run_cli(fmt::format("info '{}' --shape data=3,5 --json", kModel))).contains("params_file"));
}

TEST(CliParams, ConvertWritesTheWeightsItStoresInLowPrecision) {
  testing::ScopedTempDir dir;
  const CliResult r =
      run_cli(fmt::format("convert '{}' --shape data=3,5 --amp bf16 --cast-params-offline --params '{}' --params-out '{}' "
                          "-o '{}' --json",
                          kModel, kParams, dir.file("bf16.params"), dir.file("bf16-symbol.json")));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(parse_json(r)["params_output"], dir.file("bf16.params"));
  EXPECT_EQ(parse_json(r)["params_offline"], 4);
  const NDArrayList before = runtime::read_mxnet_params(kParams);
  const NDArrayList after = runtime::read_mxnet_params(dir.file("bf16.params"));
  EXPECT_EQ(after.names, before.names);  // names and order as in the input, as convert_model keeps them
  ASSERT_EQ(after.arrays.size(), before.arrays.size());
  for (size_t k = 0; k < after.arrays.size(); ++k) {
    // As MXNet's convert_model(cast_optional_params=True): the FullyConnected weights and
    // biases in bf16, BatchNorm's in f32 (scripts/check_params_with_mxnet.py compares).
    const bool dense = after.names[k].starts_with("arg:dense");
    EXPECT_EQ(after.arrays[k].dtype(), dense ? ir::DType::bf16 : ir::DType::f32) << after.names[k];
    EXPECT_EQ(max_abs_difference(after.arrays[k], runtime::cast(before.arrays[k], after.arrays[k].dtype())), 0)
        << after.names[k];
  }
  // The f32 weights do not fit the converted model, and the error says what does.
  expect_clean_error(run_cli(fmt::format("run '{}' --shape data=3,5 --params '{}'", dir.file("bf16-symbol.json"), kParams)),
                     kParams + ": array 'arg:dense0_weight' is f32[8,5], but the model's param 'dense0_weight' is "
                               "bf16[8,5] (a converted model's weights: write them with `ampfuse convert --params-out`)");
  // The pair runs, close to MXNet's f32 output.
  const Tensor want = runtime::read_npy(data_file("mlp_output.npy"));
  const Tensor got = mlp_output(dir.file("bf16-symbol.json"), fmt::format("--params '{}'", dir.file("bf16.params")));
  EXPECT_LT(max_abs_difference(got, want), 0.05);
  // Without --cast-params-offline every weight stays f32.
  ASSERT_EQ(run_cli(fmt::format("convert '{}' --shape data=3,5 --amp fp16 --params '{}' --params-out '{}' -o '{}'", kModel,
                                kParams, dir.file("f32.params"), dir.file("fp16-symbol.json")))
                .status,
            0);
  for (const Tensor& t : runtime::read_mxnet_params(dir.file("f32.params")).arrays) EXPECT_EQ(t.dtype(), ir::DType::f32);
}

TEST(CliParams, ParamsOutNeedsParams) {
  testing::ScopedTempDir dir;
  expect_clean_error(run_cli(fmt::format("convert '{}' --shape data=3,5 --amp bf16 --params-out '{}' -o '{}'", kModel,
                                         dir.file("p.params"), dir.file("c.json"))),
                     "--params-out " + dir.file("p.params") + ": needs --params");
}

nlohmann::json variable_attrs(const std::string& json_file, const std::string& name) {
  std::ifstream f(json_file);
  const nlohmann::json j = nlohmann::json::parse(f);
  for (const nlohmann::json& n : j["nodes"])
    if (n["name"] == name) return n.value("attrs", nlohmann::json::object());
  ADD_FAILURE() << "no node " << name << " in " << json_file;
  return {};
}

TEST(CliConvert, TheBatchGivenIsNotWrittenIntoShapeHints) {
  testing::ScopedTempDir dir;
  ASSERT_EQ(run_cli(fmt::format("convert '{}' --shape data=7,5 --amp bf16 -o '{}'", kModel, dir.file("c.json"))).status, 0);
  std::ifstream f(dir.file("c.json"));
  const std::string text{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  EXPECT_EQ(text.find("(7, 5)"), std::string::npos) << text;
  // The input keeps its dtype, so that MXNet can bind it; the weights keep their shapes.
  EXPECT_EQ(variable_attrs(dir.file("c.json"), "data"), nlohmann::json({{"__dtype__", "0"}}));
  EXPECT_EQ(variable_attrs(dir.file("c.json"), "dense0_weight")["__shape__"], "(8, 5)");
  // Any batch runs the result.
  EXPECT_EQ(run_cli(fmt::format("run '{}' --shape data=2,5 --repeat 1", dir.file("c.json"))).status, 0);

  // A hint the model file has is its own, and stays, whatever --shape the conversion ran with.
  std::ifstream in(kModel);
  nlohmann::json model = nlohmann::json::parse(in);
  model["nodes"][0]["attrs"] = {{"__shape__", "(2, 5)"}};
  std::ofstream(dir.file("hinted.json")) << model.dump();
  ASSERT_EQ(run_cli(fmt::format("convert '{}' --shape data=7,5 --amp bf16 -o '{}'", dir.file("hinted.json"),
                                dir.file("h.json")))
                .status,
            0);
  EXPECT_EQ(variable_attrs(dir.file("h.json"), "data")["__shape__"], "(2, 5)");
}

}  // namespace
}  // namespace ampfuse
