// `ampfuse train`: trains the digits models from .npy files, reports per epoch, survives an
// injected overflow, writes .params that `run --params` reads, and refuses bad input with
// one clear line.
#include "runtime/mxnet_params.h"
#include "tests/cli_util.h"

#include <gtest/gtest.h>

namespace ampfuse {
namespace {

std::string digits_args(const std::string& model, const char* labels = "train_labels.npy") {
  const std::string d = std::string(AMPFUSE_DATA_DIR) + "/digits/";
  return fmt::format("train '{}' --data '{}train_images.npy' --labels '{}{}' --test-data '{}test_images.npy' "
                     "--test-labels '{}test_labels.npy'",
                     model_path("digits/digits_" + model + "-symbol.json"), d, d, labels, d, d);
}

TEST(CliTrain, MlpLearnsAndSavesParamsRunReads) {
  testing::ScopedTempDir dir;
  const std::string params = dir.file("mlp.params");
  const CliResult r = run_cli(digits_args("mlp") + fmt::format(" --amp bf16 --optimizer sgd --lr 0.1 --momentum 0.9 "
                                                               "--epochs 3 --seed 3 --save-params '{}' --json",
                                                               params));
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = parse_json(r);
  ASSERT_EQ(j["epochs"].size(), 3u) << r.out;
  EXPECT_EQ(j["rows"], 1437);
  EXPECT_EQ(j["steps_per_epoch"], 1437 / 32);
  EXPECT_EQ(j["loss_scale"], "dynamic");
  EXPECT_LT(j["epochs"][2]["loss"].get<double>(), j["epochs"][0]["loss"].get<double>());
  EXPECT_GT(j["epochs"][2]["test_accuracy"].get<double>(), 0.9);
  EXPECT_EQ(j["epochs"][2]["skipped"], 0);
  EXPECT_EQ(j["saved"], params);
  EXPECT_EQ(runtime::read_mxnet_params(params).arrays.size(), 4u);
  // The trained weights run as any .params file does.
  const CliResult run = run_cli(fmt::format("run '{}' --params '{}' --shape data=4,1,8,8 --repeat 1 --json",
                                            model_path("digits/digits_mlp-symbol.json"), params));
  ASSERT_EQ(run.status, 0) << run.err;
}

TEST(CliTrain, ProgressLinesAndInjectedOverflow) {
  const CliResult r = run_cli(digits_args("cnn") + " --amp bf16 --optimizer adam --lr 0.003 --epochs 2 "
                                                   "--inject-overflow 5 --inject-overflow 50");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("epoch 1/2  loss "), std::string::npos) << r.out;
  // bf16 gradients do not overflow at a scale of 2^16 (fp16 ones do at first), so the
  // skipped steps are the injected ones.
  EXPECT_NE(r.out.find("scale 32768  skipped 1"), std::string::npos) << r.out;  // step 5: halved
  EXPECT_NE(r.out.find("scale 16384  skipped 2"), std::string::npos) << r.out;  // step 50 (epoch 2)
  EXPECT_NE(r.out.find("test loss "), std::string::npos) << r.out;
}

TEST(CliTrain, BadInputGetsOneClearError) {
  const std::string mlp = model_path("digits/digits_mlp-symbol.json");
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {digits_args("mlp", "test_labels.npy"), "360 labels for 1437 rows of --data"},
      {digits_args("mlp") + " --optimizer lamb", "--optimizer: 'lamb' is not one of sgd, adam, adamw"},
      {digits_args("mlp") + " --inject-overflow 3", "--inject-overflow needs loss scaling"},
      {digits_args("mlp") + " --loss-scale lots", "--loss-scale: 'lots'"},
      {digits_args("mlp") + " --batch 5000", "--batch 5000: --data has only 1437 rows"},
      {digits_args("mlp") + " --lr -1", "lr"},
      {fmt::format("train '{}' --data /nonexistent.npy --labels /nonexistent.npy", mlp), "/nonexistent.npy"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    const CliResult r = run_cli(c.args);
    EXPECT_EQ(r.status, 1);
    expect_clean_error(r, c.message);
  }
}

}  // namespace
}  // namespace ampfuse
