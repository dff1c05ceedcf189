// The CI subset of the GluonCV model-zoo corpus (tests/zoo/zoo.py, docs/model_zoo.md): small
// GluonCV architectures exported by MXNet 1.9.1 with random weights, and MXNet's own outputs
// for one input (tests/data/zoo/NAME, written by tests/zoo/make_fixtures.py). ampfuse runs
// them with MXNet's weights (the reference interpreter, the fused executor, and the fused
// executor under bf16 AMP) and must give MXNet's results: the oracle here is MXNet itself,
// not ampfuse's interpreter. A fixture holds its weights as .npy files (weights/, from
// tests/zoo/make_fixtures.py) or, where they would be megabytes, as the seeded rule
// tests/zoo/export_seeded.py drew them by (weights.json), drawn again here. A detector's
// rows are compared by tests/zoo/zoo.py's rule for near-tied rows, ported below.
#include "engine/execution/executor.h"
#include "engine/lower.h"
#include "ir/mxnet_json.h"
#include "runtime/interpreter.h"
#include "runtime/npy.h"
#include "tests/output_compare.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

namespace ampfuse::engine {
namespace {

namespace fs = std::filesystem;

// Tolerances relative to the largest |value| of each MXNet output (as tests/zoo/zoo.py):
// f32 differs by summation order only; bf16 is compared with MXNet's f32 output and may be
// off by 5% or twice MXNet's own bf16 error, whichever is larger.
constexpr double kF32Tol = 1e-4;
constexpr double kBf16Tol = 5e-2;

struct ZooModel {
  const char* name;
  size_t outputs;
};

// ssd_300_mobilenet0.25_voc at 96x96 (seeded weights): ids, scores and boxes of 100 rows.
const ZooModel kZoo[] = {{"cifar_resnet20_v1", 1}, {"mobilenet0.25", 1}, {"ssd_300_mobilenet0.25_voc", 3}};
constexpr size_t kDetector = 2;

void PrintTo(const ZooModel& m, std::ostream* os) { *os << m.name; }

fs::path fixture_dir(const ZooModel& m) { return fs::path(AMPFUSE_TESTDATA_DIR) / "zoo" / m.name; }

// The exported graph, with its input's shape taken from the fixture's input.
ir::Graph load_graph(const fs::path& dir, const runtime::Tensor& data) {
  ir::MxnetImportOptions io;
  io.input_shapes["data"] = data.shape();
  return ir::load_mxnet_json_file((dir / "model-symbol.json").string(), io);
}

// tests/zoo/export_seeded.py's rule "splitmix64-uniform-1": element i of parameter NAME is
// scale * t, t = (k - 2^23) / 2^23 exactly, k the top 24 bits of splitmix64's finalizer of
// FNV-1a-64(NAME) + (i + 1) * golden; one f32 rounding, as NumPy's.
runtime::Tensor seeded_uniform(const std::string& name, const ir::Shape& shape, float scale) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (const unsigned char c : name) h = (h ^ c) * 0x100000001B3ull;
  runtime::Tensor t(ir::TensorType{ir::DType::f32, shape});
  float* out = t.data<float>();
  for (int64_t i = 0; i < t.size(); ++i) {
    uint64_t z = h + static_cast<uint64_t>(i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const int64_t k = static_cast<int64_t>(z >> 40) - (int64_t{1} << 23);
    const float unit = static_cast<float>(k) * 0x1p-23f;
    out[i] = scale * unit;
  }
  return t;
}

// MXNet's weights: one .npy a variable (named as in the symbol) in weights/, or drawn by
// weights.json's rule, what no rule draws filled ("fill") or kept in constants/ ("file").
runtime::Bindings load_bindings(const fs::path& dir, const runtime::Tensor& data) {
  runtime::Bindings vars{{"data", data}};
  if (fs::exists(dir / "weights")) {
    for (const auto& entry : fs::directory_iterator(dir / "weights"))
      vars.emplace(entry.path().stem().string(), runtime::read_npy(entry.path().string()));
    return vars;
  }
  std::ifstream f(dir / "weights.json");
  const nlohmann::json spec = nlohmann::json::parse(f);
  EXPECT_EQ(spec.at("rule"), "splitmix64-uniform-1") << dir;
  for (const nlohmann::json& w : spec.at("weights")) {
    const std::string name = w.at("name");
    const ir::Shape shape = w.at("shape").get<ir::Shape>();
    if (w.contains("file")) {
      vars.emplace(name, runtime::read_npy((dir / w.at("file").get<std::string>()).string()));
    } else if (w.contains("fill")) {
      runtime::Tensor t(ir::TensorType{ir::DType::f32, shape});
      for (int64_t i = 0; i < t.size(); ++i) t.set_f64(i, w.at("fill").get<double>());
      vars.emplace(name, std::move(t));
    } else {
      vars.emplace(name, seeded_uniform(name, shape, static_cast<float>(w.at("scale").get<double>())));
    }
  }
  return vars;
}

// ---- tests/zoo/zoo.py's comparison of ranked rows, ported ------------------------------------

// A detector's outputs as (B, N, width) rows of doubles.
struct RowOutput {
  int64_t batch = 0, rows = 0, width = 0;
  std::vector<double> v;
  double& at(int64_t b, int64_t r, int64_t j) { return v[static_cast<size_t>((b * rows + r) * width + j)]; }
  double at(int64_t b, int64_t r, int64_t j) const { return v[static_cast<size_t>((b * rows + r) * width + j)]; }
};

std::vector<RowOutput> as_rows(const std::vector<runtime::Tensor>& outs) {
  std::vector<RowOutput> rows;
  for (const runtime::Tensor& t : outs) {
    const ir::Shape& s = t.shape();
    RowOutput r;
    r.batch = s.size() >= 3 ? s[0] : 0;
    r.rows = s.size() >= 3 ? s[1] : 0;
    r.width = s.size() >= 3 ? t.size() / std::max<int64_t>(1, r.batch * r.rows) : 0;
    r.v = runtime::to_f64_vector(t);
    rows.push_back(std::move(r));
  }
  return rows;
}

// zoo.py's score_output: the index of the (B, N, 1) output sorted non-increasing along N
// over its values >= 0, when every output is (B, N, ...) with N >= 2; of several, the one
// holding fractions before one of whole numbers, then the one with the most distinct values.
std::optional<size_t> score_output(const std::vector<runtime::Tensor>& wants) {
  if (wants.size() < 2 || wants[0].shape().size() < 3 || wants[0].shape()[1] < 2) return std::nullopt;
  for (const runtime::Tensor& w : wants)
    if (w.shape().size() < 3 || w.shape()[0] != wants[0].shape()[0] || w.shape()[1] != wants[0].shape()[1])
      return std::nullopt;
  std::optional<size_t> best;
  std::pair<bool, size_t> best_key{};
  for (size_t k = 0; k < wants.size(); ++k) {
    if (wants[k].shape().size() != 3 || wants[k].shape()[2] != 1) continue;
    const std::vector<double> s = runtime::to_f64_vector(wants[k]);
    const int64_t n = wants[k].shape()[1];
    bool sorted = true;
    for (int64_t b = 0; b < wants[k].shape()[0] && sorted; ++b) {
      std::optional<double> last;
      for (int64_t r = 0; r < n; ++r) {
        const double x = s[static_cast<size_t>(b * n + r)];
        if (!(x >= 0)) continue;
        if (last && x > *last) sorted = false;
        last = x;
      }
    }
    if (!sorted) continue;
    bool fractions = false;
    std::set<double> distinct;
    for (const double x : s) {
      if (std::isfinite(x) && x != std::nearbyint(x)) fractions = true;
      distinct.insert(std::isnan(x) ? INFINITY : x);
    }
    const std::pair<bool, size_t> key{fractions, distinct.size()};
    if (!best || key > best_key) best = k, best_key = key;
  }
  return best;
}

// zoo.py's reorder_near_ties: rows whose MXNet scores are within 2 * tol * the largest
// |score| of the next (consecutive in MXNet's order, scores >= 0) form a group whose order
// rounding decides; within one, each MXNet row takes the closest of ampfuse's rows not yet
// taken (the largest difference over the outputs of at most 16 values a row), where that
// brings the group closer than ampfuse's own order. Returns how many rows moved.
int reorder_near_ties(std::vector<runtime::Tensor>& gots, const std::vector<runtime::Tensor>& wants, double tol) {
  const std::optional<size_t> score = score_output(wants);
  if (!score) return 0;
  const std::vector<RowOutput> want = as_rows(wants);
  std::vector<RowOutput> got = as_rows(gots);
  std::vector<size_t> keys;
  for (size_t i = 0; i < want.size(); ++i)
    if (want[i].width <= 16) keys.push_back(i);
  const RowOutput& sc = want[*score];
  double scale = 0;
  for (const double x : sc.v)
    if (std::isfinite(x)) scale = std::max(scale, std::fabs(x));
  scale = std::max(scale, 1e-30);
  const auto distance = [&](int64_t b, int64_t r, int64_t c) {  // MXNet's row r, ampfuse's row c
    double d = 0;
    for (const size_t i : keys)
      for (int64_t j = 0; j < want[i].width; ++j) {
        const double e = std::fabs(want[i].at(b, r, j) - got[i].at(b, c, j));
        d = std::max(d, std::isnan(e) ? INFINITY : e);
      }
    return d;
  };
  int moved = 0;
  for (int64_t b = 0; b < sc.batch; ++b) {
    int64_t start = 0;
    for (int64_t end = 1; end <= sc.rows; ++end) {
      if (end < sc.rows && sc.at(b, end, 0) >= 0 && sc.at(b, end - 1, 0) - sc.at(b, end, 0) <= 2 * tol * scale) continue;
      const int64_t n = end - start;
      if (n > 1) {
        std::vector<int64_t> order;
        std::vector<bool> taken(static_cast<size_t>(n), false);
        double identity = 0, chosen = 0;
        for (int64_t r = 0; r < n; ++r) {
          identity = std::max(identity, distance(b, start + r, start + r));
          int64_t best = -1;
          double best_d = INFINITY;
          for (int64_t c = 0; c < n; ++c)
            if (!taken[c] && (best < 0 || distance(b, start + r, start + c) < best_d))
              best = c, best_d = distance(b, start + r, start + c);
          taken[best] = true;
          order.push_back(best);
          chosen = std::max(chosen, best_d);
        }
        bool changed = false;
        for (int64_t r = 0; r < n; ++r) changed |= order[r] != r;
        if (changed && chosen < identity) {
          for (int64_t r = 0; r < n; ++r) moved += order[r] != r;
          const std::vector<RowOutput> before = got;
          for (size_t i = 0; i < got.size(); ++i)
            for (int64_t r = 0; r < n; ++r)
              for (int64_t j = 0; j < got[i].width; ++j)
                got[i].at(b, start + r, j) = before[i].at(b, start + order[r], j);
        }
      }
      start = end;
    }
  }
  if (moved)
    for (size_t i = 0; i < gots.size(); ++i) {
      runtime::Tensor t(ir::TensorType{ir::DType::f64, gots[i].shape()});
      for (int64_t e = 0; e < t.size(); ++e) t.set_f64(e, got[i].v[static_cast<size_t>(e)]);
      gots[i] = std::move(t);
    }
  return moved;
}

// The worst relative error over the outputs after reorder_near_ties (zoo.py's compare).
double compared_error(std::vector<runtime::Tensor> got, const std::vector<runtime::Tensor>& want, double tol,
                      int* moved = nullptr) {
  const int m = reorder_near_ties(got, want, tol);
  if (moved) *moved = m;
  double worst = 0;
  for (size_t o = 0; o < got.size(); ++o) worst = std::max(worst, relative_error(got[o], want[o]));
  return worst;
}

std::vector<runtime::Tensor> load_outputs(const fs::path& dir, size_t n) {
  std::vector<runtime::Tensor> out;
  for (size_t k = 0; k < n; ++k) out.push_back(runtime::read_npy((dir / (std::to_string(k) + ".npy")).string()));
  return out;
}

class GluoncvModel : public testing::TestWithParam<ZooModel> {};

TEST_P(GluoncvModel, AmpfuseGivesMxnetsOutputs) {
  const ZooModel& m = GetParam();
  const fs::path dir = fixture_dir(m);
  ASSERT_TRUE(fs::exists(dir / "model-symbol.json")) << "missing fixture " << dir;
  const runtime::Tensor data = runtime::read_npy((dir / "data.npy").string());
  const ir::Graph g = load_graph(dir, data);
  const runtime::Bindings vars = load_bindings(dir, data);
  const std::vector<runtime::Tensor> mxnet_f32 = load_outputs(dir / "mxnet_f32", m.outputs);
  // Without MXNet's bf16 outputs (its AMP fails on the model) bf16 is held to kBf16Tol.
  const bool has_mxnet_bf16 = fs::exists(dir / "mxnet_bf16");
  const std::vector<runtime::Tensor> mxnet_bf16 = has_mxnet_bf16 ? load_outputs(dir / "mxnet_bf16", m.outputs) : mxnet_f32;
  ASSERT_EQ(g.outputs.size(), m.outputs);

  // As zoo.py: near-tied rows of a detector put in MXNet's order first (with that
  // comparison's tolerance), then each output within its tolerance of MXNet's f32 output.
  const auto check = [&](std::vector<runtime::Tensor> got, bool bf16, const char* what) {
    ASSERT_EQ(got.size(), mxnet_f32.size()) << what;
    for (size_t o = 0; o < got.size(); ++o) ASSERT_EQ(got[o].shape(), mxnet_f32[o].shape()) << what << ", output " << o;
    const double tol = bf16 ? std::max(kBf16Tol, 2 * compared_error(mxnet_bf16, mxnet_f32, kBf16Tol)) : kF32Tol;
    RecordProperty(std::string(what) + "_tolerance", std::to_string(tol));
    const int moved = reorder_near_ties(got, mxnet_f32, bf16 ? kBf16Tol : kF32Tol);
    RecordProperty(std::string(what) + "_rows_reordered", moved);
    for (size_t o = 0; o < got.size(); ++o) {
      const double err = relative_error(got[o], mxnet_f32[o]);
      EXPECT_LE(err, tol) << what << ", output " << o << " (" << g.output_name(o) << ")";
      RecordProperty(std::string(what) + "_error_" + std::to_string(o), std::to_string(err));
    }
  };

  check(runtime::interpret(g, vars), false, "interpreter f32");
  ExecutorOptions eo;
  eo.constant_params = true;
  eo.fold_batchnorm = true;
  check(Executable::compile(g, eo).run(vars), false, "fused f32");
  AmpOptions amp;
  amp.target = ir::DType::bf16;
  const std::vector<runtime::Tensor> bf16 = Executable::compile(convert_for_amp(g, amp), eo).run(vars);
  check(bf16, true, "fused bf16");
  // A detector's bf16 run keeps other boxes than its f32 run where scores are close (MXNet's
  // own does: its ids differ by 0.63 of their range for the SSD), so the rule above allows
  // up to twice that. Its scores, sorted, are values all the same: within kBf16Tol.
  if (const std::optional<size_t> k = score_output(mxnet_f32)) {
    std::vector<runtime::Tensor> got = bf16;
    reorder_near_ties(got, mxnet_f32, kBf16Tol);
    const double err = relative_error(got[*k], mxnet_f32[*k]);
    EXPECT_LE(err, kBf16Tol) << "fused bf16 scores (" << g.output_name(*k) << ")";
    RecordProperty("fused bf16_scores_error", std::to_string(err));
  }
}

// The comparison can fail: a changed weight moves the result outside the f32 tolerance.
TEST(ZooModelsCheck, AChangedWeightIsCaught) {
  const ZooModel& m = kZoo[0];
  const fs::path dir = fixture_dir(m);
  ASSERT_TRUE(fs::exists(dir / "model-symbol.json")) << "missing fixture " << dir;
  const runtime::Tensor data = runtime::read_npy((dir / "data.npy").string());
  const ir::Graph g = load_graph(dir, data);
  runtime::Bindings vars = load_bindings(dir, data);
  const std::vector<runtime::Tensor> mxnet_f32 = load_outputs(dir / "mxnet_f32", m.outputs);
  // The last layer's bias moves every logit of one class.
  auto bias = std::find_if(vars.begin(), vars.end(), [](const auto& kv) {
    return kv.first.find("dense") != std::string::npos && kv.first.ends_with("_bias");
  });
  ASSERT_NE(bias, vars.end());
  runtime::Tensor changed = bias->second.clone();
  changed.set_f64(0, changed.get_f64(0) + 0.05);
  bias->second = changed;
  EXPECT_GT(relative_error(runtime::interpret(g, vars)[0], mxnet_f32[0]), kF32Tol);
}

// The detector's comparison can fail too: a changed bias of its first class predictor moves
// scores and boxes outside the tolerance, rows reordered or not.
TEST(ZooModelsCheck, AChangedDetectorWeightIsCaught) {
  const ZooModel& m = kZoo[kDetector];
  const fs::path dir = fixture_dir(m);
  ASSERT_TRUE(fs::exists(dir / "model-symbol.json")) << "missing fixture " << dir;
  const runtime::Tensor data = runtime::read_npy((dir / "data.npy").string());
  const ir::Graph g = load_graph(dir, data);
  runtime::Bindings vars = load_bindings(dir, data);
  const std::vector<runtime::Tensor> mxnet_f32 = load_outputs(dir / "mxnet_f32", m.outputs);
  ASSERT_LE(compared_error(runtime::interpret(g, vars), mxnet_f32, kF32Tol), kF32Tol);
  auto w = vars.find("ssd0_convpredictor0_conv0_bias");
  ASSERT_NE(w, vars.end());
  runtime::Tensor changed = w->second.clone();
  changed.set_f64(0, changed.get_f64(0) + 0.05);
  w->second = changed;
  EXPECT_GT(compared_error(runtime::interpret(g, vars), mxnet_f32, kF32Tol), kF32Tol);
}

// The ported near-tie rule: rows whose MXNet scores are within 2 x tol of each other may come
// in either order, other rows may not, and a reordered row must still match.
TEST(ZooModelsCheck, OnlyNearTiedRowsMayComeInAnotherOrder) {
  const auto outputs = [](std::vector<double> ids, std::vector<double> scores, std::vector<double> boxes) {
    const int64_t n = static_cast<int64_t>(ids.size());
    std::vector<runtime::Tensor> out;
    const std::vector<std::pair<std::vector<double>, int64_t>> parts{{ids, 1}, {scores, 1}, {boxes, 4}};
    for (const auto& [values, width] : parts) {
      runtime::Tensor t(ir::TensorType{ir::DType::f32, {1, n, width}});
      for (int64_t i = 0; i < t.size(); ++i) t.set_f64(i, values[static_cast<size_t>(i)]);
      out.push_back(std::move(t));
    }
    return out;
  };
  const std::vector<double> boxes{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, -1, -1, -1, -1};
  // Scores 0.9, 0.8, 0.8 - 1e-5 (a near-tie at tol 1e-4: 2 * 1e-4 * 0.9 = 1.8e-4), then a dropped row.
  const auto want = outputs({3, 5, 7, -1}, {0.9, 0.8, 0.8 - 1e-5, -1}, boxes);
  ASSERT_EQ(score_output(want), std::optional<size_t>{1});
  int moved = -1;
  EXPECT_EQ(compared_error(want, want, kF32Tol, &moved), 0.0);
  EXPECT_EQ(moved, 0);
  // Rows 1 and 2 swapped: accepted.
  const auto tie_swapped = outputs({3, 7, 5, -1}, {0.9, 0.8 - 1e-5, 0.8, -1},
                                   {1, 2, 3, 4, 9, 10, 11, 12, 5, 6, 7, 8, -1, -1, -1, -1});
  EXPECT_LE(compared_error(tie_swapped, want, kF32Tol, &moved), 1e-6);
  EXPECT_EQ(moved, 2);
  // Rows 0 and 1 swapped: their scores are 0.1 apart, no tie.
  const auto swapped = outputs({5, 3, 7, -1}, {0.8, 0.9, 0.8 - 1e-5, -1},
                               {5, 6, 7, 8, 1, 2, 3, 4, 9, 10, 11, 12, -1, -1, -1, -1});
  EXPECT_GT(compared_error(swapped, want, kF32Tol), 0.1);
  // The tied rows swapped, one box changed: still a failure.
  const auto wrong_box = outputs({3, 7, 5, -1}, {0.9, 0.8 - 1e-5, 0.8, -1},
                                 {1, 2, 3, 4, 9, 10, 11, 13, 5, 6, 7, 8, -1, -1, -1, -1});
  EXPECT_GT(compared_error(wrong_box, want, kF32Tol), kF32Tol);
}

std::string case_name(const testing::TestParamInfo<ZooModel>& info) {
  std::string s = info.param.name;
  std::replace_if(s.begin(), s.end(), [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); }, '_');
  return s;
}

INSTANTIATE_TEST_SUITE_P(ZooModels, GluoncvModel, testing::ValuesIn(kZoo), case_name);

}  // namespace
}  // namespace ampfuse::engine
