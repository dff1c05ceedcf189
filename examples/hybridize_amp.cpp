// A block hybridized with MXNET_AMP_FUSE=1: what was fused, and what the first call costs
// against later ones; then a loss-scaler unscale over 200 mixed-dtype gradients.
//
//   ./build/ampfuse_example_hybridize            # prints the plan and the timings
//   ./build/ampfuse_example_hybridize --check    # also exits 1 when an expectation fails (ctest)
#include "engine/api/amp_scope.h"
#include "engine/api/block.h"
#include "engine/api/loss_scaler.h"
#include "ir/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

using namespace ampfuse;
using engine::F;
using engine::Sym;
using runtime::Tensor;

namespace {

int g_failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    ++g_failures;
    fmt::print("CHECK FAILED: {}\n", what);
  }
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

Tensor random_tensor(ir::DType dt, ir::Shape shape, uint64_t seed, double scale) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-scale, scale);
  Tensor t({dt, std::move(shape)});
  for (int64_t i = 0; i < t.size(); ++i) t.set_f64(i, u(rng));
  return t;
}

// A gated feed-forward block:  y = FC2( tanh(FC0(x)) * sigmoid(FC1(x)) + 0.5 * FC0(x) ), tanh.
// The FCs run on oneDNN; the gating between them is pointwise and fuses, casts included.
class GatedFFN : public engine::Block {
 public:
  GatedFFN(int64_t in, int64_t hidden, int64_t out) : Block("ffn"), hidden_(hidden), out_(out) {
    add_param("w0", random_tensor(ir::DType::f32, {hidden, in}, 1, 1 / std::sqrt(double(in))));
    add_param("b0", random_tensor(ir::DType::f32, {hidden}, 2, 0.1));
    add_param("w1", random_tensor(ir::DType::f32, {hidden, in}, 3, 1 / std::sqrt(double(in))));
    add_param("b1", random_tensor(ir::DType::f32, {hidden}, 4, 0.1));
    add_param("w2", random_tensor(ir::DType::f32, {out, hidden}, 5, 1 / std::sqrt(double(hidden))));
    add_param("b2", random_tensor(ir::DType::f32, {out}, 6, 0.1));
  }

 protected:
  std::vector<Sym> forward(F& f, const std::vector<Sym>& in) override {
    const Sym h = f.fully_connected(in[0], f.param("w0"), f.param("b0"), hidden_, "fc0");
    const Sym g = f.sigmoid(f.fully_connected(in[0], f.param("w1"), f.param("b1"), hidden_, "fc1"));
    const Sym mixed = f.add(f.mul(f.tanh(h), g), f.mul_scalar(h, 0.5));
    return {f.tanh(f.fully_connected(mixed, f.param("w2"), f.param("b2"), out_, "fc2"))};
  }

 private:
  int64_t hidden_, out_;
};

void print_kernels(const engine::Executable& exe) {
  const ir::Graph& g = exe.graph();
  const engine::CompileStats& cs = exe.compile_stats();
  fmt::print("plan: {} fused kernels ({} graph nodes inside), {} external ops, {} views; "
             "{} kernels compiled, {} from the cache, compile() {:.1f} ms\n",
             cs.kernels, cs.fused_nodes, cs.external_ops, cs.views, cs.compilations, cs.cache_hits,
             cs.compile_seconds * 1e3);
  int k = 0;
  for (const engine::PlanStep& step : exe.plan().steps) {
    const auto* kernel = std::get_if<engine::FusedKernel>(&step);
    if (!kernel) continue;
    std::vector<std::string> ops;
    for (int32_t n : kernel->nodes) ops.push_back(g.nodes[n].op);
    fmt::print("  kernel {}: {} ops: {}\n", k++, ops.size(), fmt::join(ops, " "));
  }
  fmt::print("{}", engine::print_plan(g, exe.plan()));
  for (const std::string& f : cs.fallbacks) fmt::print("  fallback: {}\n", f);
}

void run_block(bool check) {
  const int64_t batch = 64, in = 256, hidden = 512, out = 128;
  GatedFFN block(in, hidden, out);
  const Tensor x = random_tensor(ir::DType::f32, {batch, in}, 7, 1.0);
  const Tensor eager = block({x}).at(0);  // op by op, f32: the reference

  block.hybridize();
  double t0 = now_s();
  const Tensor first = block({x}).at(0);
  const double first_s = now_s() - t0;
  const engine::Executable& exe = *block.last_executable();
  const auto& amp = block.last_amp_stats();
  fmt::print("MXNET_AMP_FUSE={} AMPFUSE_AMP_DTYPE={}: AMP {}\n", std::getenv("MXNET_AMP_FUSE"),
             std::getenv("AMPFUSE_AMP_DTYPE") ? std::getenv("AMPFUSE_AMP_DTYPE") : "(unset: bf16)",
             amp ? fmt::format("on: {} casts inserted, {} left after folding, {} params stored low, "
                               "{} low-precision nodes, {} f32 nodes",
                               amp->casts_inserted, amp->casts_final, amp->params_offline, amp->lp16_nodes,
                               amp->fp32_nodes)
                 : std::string("off"));
  print_kernels(exe);

  const int reps = 20;
  std::vector<double> later;
  for (int i = 0; i < reps; ++i) {
    t0 = now_s();
    block({x});
    later.push_back(now_s() - t0);
  }
  std::sort(later.begin(), later.end());
  const double median = later[later.size() / 2];
  fmt::print("first call (trace + AMP + plan + compile + run): {:.2f} ms\n", first_s * 1e3);
  fmt::print("later calls (replay), median of {}: {:.3f} ms  ({:.0f}x faster)\n", reps, median * 1e3, first_s / median);

  const Tensor x2 = random_tensor(ir::DType::f32, {batch * 2, in}, 8, 1.0);
  t0 = now_s();
  block({x2});
  const double replan_s = now_s() - t0;
  const int new_compiles = block.last_executable()->compile_stats().compilations;
  fmt::print("new batch size {}: re-planned in {:.2f} ms, {} kernels compiled\n", batch * 2, replan_s * 1e3, new_compiles);
  fmt::print("block stats: {} traces, {} plans, {} kernels compiled in all, {} weight casts, {} cached weight reuses\n",
             block.stats().traces, block.stats().plans, block.stats().compilations, block.stats().weight_casts,
             block.stats().weight_cast_hits);

  double max_err = 0;
  for (int64_t i = 0; i < eager.size(); ++i) max_err = std::max(max_err, std::fabs(eager.get_f64(i) - first.get_f64(i)));
  fmt::print("max |hybridized AMP - eager f32| = {:.4f}\n", max_err);

  if (check) {
    expect(amp.has_value(), "AMP is on under MXNET_AMP_FUSE=1");
    expect(exe.compile_stats().kernels > 0, "something fused");
    expect(exe.compile_stats().fallbacks.empty(), "no kernel fell back to the interpreter");
    expect(new_compiles == 0, "a new batch size compiles nothing");
    expect(block.stats().traces == 1, "one trace");
    expect(block.stats().weight_casts == 6, "each of the 6 weights cast once");
    expect(max_err < 0.1, "AMP result close to f32");
  }
}

void run_loss_scaler(bool check) {
  // 200 gradients, a third each f32, f16 and bf16, 8 Ki - 600 Ki elements.
  std::vector<Tensor> grads;
  size_t bytes = 0;
  const ir::DType kinds[] = {ir::DType::f32, ir::DType::f16, ir::DType::bf16};
  for (int i = 0; i < 200; ++i) {
    const int64_t n = 8192 + (int64_t{i} * 7919 * 13) % (600 * 1024);
    grads.push_back(random_tensor(kinds[i % 3], {n}, 100 + i, 1000.0));
    bytes += grads.back().bytes();
  }
  engine::LossScalerOptions o;
  o.min_scale = 1.0 / 65536;
  engine::LossScaler scaler(o);
  double best = 1e9;
  bool overflow = false;
  for (int rep = 0; rep < 10; ++rep) {
    scaler.set_scale(rep % 2 ? 1.0 / 65536 : 65536.0);  // down, then back up: the values stay put
    const double t0 = now_s();
    overflow = scaler.unscale_and_check(grads) || overflow;
    best = std::min(best, now_s() - t0);
  }
  fmt::print("loss scaler: unscale + non-finite check of 200 tensors (f32/f16/bf16, {:.1f} MiB) in one pass: "
             "{:.2f} ms, {:.1f} GB/s (read + write)\n",
             bytes / 1048576.0, best * 1e3, 2.0 * bytes / best / 1e9);
  if (check) expect(!overflow, "no overflow in finite gradients");
  grads[137] = random_tensor(grads[137].dtype(), grads[137].shape(), 1, 1.0);
  grads[137].set_f64(3, std::nan(""));
  const bool flagged = scaler.unscale_and_check(grads);
  scaler.update(flagged);
  fmt::print("with a NaN in tensor 137: overflow={}, next scale {}\n", flagged, scaler.scale());
  if (check) expect(flagged, "a NaN in tensor 137 of 200 is flagged");
}

}  // namespace

int main(int argc, char** argv) {
  const bool check = argc > 1 && std::strcmp(argv[1], "--check") == 0;
  if (!std::getenv("MXNET_AMP_FUSE")) {
    ::setenv("MXNET_AMP_FUSE", "1", 1);
    fmt::print("(MXNET_AMP_FUSE was unset; this example sets it to 1)\n");
  }
  try {
    run_block(check);
    run_loss_scaler(check);
  } catch (const Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  if (g_failures) fmt::print("{} checks failed\n", g_failures);
  return g_failures ? 1 : 0;
}
