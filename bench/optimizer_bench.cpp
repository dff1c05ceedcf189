// Optimizer steps and the loss scaler's unscale as generated multi-tensor kernels
// (engine/training/multi_tensor.h), against a per-tensor launch loop and memcpy of the same
// bytes (bench/README.md, "Optimizers"). Two parameter lists: cifar_resnet20's (65 tensors,
// 0.27M values, most of them small) and resnet50's (161 tensors, 25.6M values).
#include "codegen/llvm_target.h"
#include "engine/api/loss_scaler.h"
#include "engine/training/optimizer.h"
#include "runtime/thread_pool.h"

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

namespace ampfuse::bench {
namespace {

using ir::DType;
using runtime::Tensor;

runtime::ThreadPool& optim_pool() {
  static runtime::ThreadPool p(2);  // as ampfuse_bench.cpp: the 2-core machine's threads
  return p;
}

// A k x k convolution's weight and its BatchNorm's gamma and beta.
void push_conv_bn(std::vector<int64_t>& s, int64_t k, int64_t in, int64_t out) {
  s.push_back(k * k * in * out);
  s.push_back(out);
  s.push_back(out);
}

// Parameter sizes of cifar_resnet20 (v1, projection shortcuts with BatchNorm): 3x3 convs of
// 16, 32, 64 channels, gamma and beta per BatchNorm, a 10-class dense layer.
std::vector<int64_t> resnet20_sizes() {
  std::vector<int64_t> s;
  const auto conv_bn = [&](int64_t k, int64_t in, int64_t out) { push_conv_bn(s, k, in, out); };
  conv_bn(3, 3, 16);
  int64_t in = 16;
  for (int64_t c : {16, 32, 64})
    for (int b = 0; b < 3; ++b) {
      conv_bn(3, in, c);
      conv_bn(3, c, c);
      if (in != c) conv_bn(1, in, c);
      in = c;
    }
  s.push_back(64 * 10);
  s.push_back(10);
  return s;
}

// resnet50 (v1): bottleneck blocks (3, 4, 6, 3), widths 64..512, expansion 4, 1000 classes.
std::vector<int64_t> resnet50_sizes() {
  std::vector<int64_t> s;
  const auto conv_bn = [&](int64_t k, int64_t in, int64_t out) { push_conv_bn(s, k, in, out); };
  conv_bn(7, 3, 64);
  int64_t in = 64;
  const int blocks[] = {3, 4, 6, 3};
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t w = int64_t{64} << stage;
    for (int b = 0; b < blocks[stage]; ++b) {
      conv_bn(1, in, w);
      conv_bn(3, w, w);
      conv_bn(1, w, 4 * w);
      if (b == 0) conv_bn(1, in, 4 * w);
      in = 4 * w;
    }
  }
  s.push_back(2048 * 1000);
  s.push_back(1000);
  return s;
}

std::vector<int64_t> sizes_of(int64_t list) { return list == 0 ? resnet20_sizes() : resnet50_sizes(); }

int64_t total(const std::vector<int64_t>& sizes) {
  int64_t n = 0;
  for (int64_t x : sizes) n += x;
  return n;
}

Tensor filled(DType dt, int64_t n, float v) {
  Tensor t = Tensor::zeros({DType::f32, {n}});
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = v;
  return dt == DType::f32 ? t : runtime::cast(t, dt);
}

std::vector<Tensor> gradients(const std::vector<int64_t>& sizes) {
  std::vector<Tensor> g;
  for (int64_t n : sizes) g.push_back(filled(DType::f32, n, 1e-3f));
  return g;
}

engine::OptimizerOptions adam() {
  engine::OptimizerOptions o;
  o.kind = engine::OptimizerKind::adam;
  o.lr = 1e-6;  // the weights stay finite and near their start over any number of steps
  return o;
}

// Adam with f32 gradients and no low-precision copies moves 28 bytes a value: gradient,
// weight, m and v read (16), weight, m and v written (12).
constexpr int64_t kAdamBytes = 28;

void label(benchmark::State& state, const std::vector<int64_t>& sizes, const char* what) {
  state.SetLabel(fmt::format("{} tensors, {:.2f}M values, {} ({})", sizes.size(), total(sizes) / 1e6, what,
                             codegen::jit_target().cpu));
}

// One step for the whole list: one launch.
void BM_OptimAdamMultiTensor(benchmark::State& state) {
  const std::vector<int64_t> sizes = sizes_of(state.range(0));
  engine::Optimizer opt(adam(), &optim_pool());
  for (size_t i = 0; i < sizes.size(); ++i) opt.add_param(fmt::format("p{}", i), filled(DType::f32, sizes[i], 0.5f));
  const std::vector<Tensor> grads = gradients(sizes);
  opt.step(grads, 1.0);  // compile and touch every buffer outside the timed loop
  opt.step(grads, 1.0);
  for (auto _ : state) benchmark::DoNotOptimize(opt.step(grads, 1.0));
  state.SetBytesProcessed(state.iterations() * total(sizes) * kAdamBytes);
  label(state, sizes, "one launch");
}

// The same updates, one launch per tensor (an optimizer per parameter): what a per-tensor
// update loop costs in thread wake-ups and barriers.
void BM_OptimAdamPerTensor(benchmark::State& state) {
  const std::vector<int64_t> sizes = sizes_of(state.range(0));
  std::vector<engine::Optimizer> opts;
  std::vector<std::vector<Tensor>> grads;
  for (int64_t n : sizes) {
    opts.emplace_back(adam(), &optim_pool());
    opts.back().add_param("p", filled(DType::f32, n, 0.5f));
    grads.push_back({filled(DType::f32, n, 1e-3f)});
  }
  for (int warm = 0; warm < 2; ++warm)
    for (size_t i = 0; i < opts.size(); ++i) opts[i].step(grads[i], 1.0);
  for (auto _ : state)
    for (size_t i = 0; i < opts.size(); ++i) benchmark::DoNotOptimize(opts[i].step(grads[i], 1.0));
  state.SetBytesProcessed(state.iterations() * total(sizes) * kAdamBytes);
  label(state, sizes, "a launch per tensor");
}

// memcpy of bytes_per_value / 2 per value, split over the pool: the same traffic.
void memcpy_bench(benchmark::State& state, const std::vector<int64_t>& sizes, int64_t bytes_per_value) {
  const int64_t half = total(sizes) * bytes_per_value / 2;
  std::unique_ptr<char[]> src(new char[half]), dst(new char[half]);
  std::memset(src.get(), 1, half);
  std::memset(dst.get(), 0, half);
  const auto copy = [&] {
    optim_pool().parallel_for(
        half, [&](int64_t b, int64_t e) { std::memcpy(dst.get() + b, src.get() + b, static_cast<size_t>(e - b)); },
        1 << 16, 4096);
  };
  copy();
  for (auto _ : state) copy();
  state.SetBytesProcessed(state.iterations() * total(sizes) * bytes_per_value);
}

void BM_OptimAdamMemcpy(benchmark::State& state) {
  const std::vector<int64_t> sizes = sizes_of(state.range(0));
  memcpy_bench(state, sizes, kAdamBytes);
  label(state, sizes, "memcpy of Adam's bytes");
}

// LossScaler::unscale_and_check over the list as bf16 gradients: generated kernels, one
// launch. Each iteration unscales by 2 and by 1/2 (exact), so values never drift; a pass
// reads and writes every value (4 bytes for bf16).
void BM_OptimUnscale(benchmark::State& state) {
  const std::vector<int64_t> sizes = sizes_of(state.range(0));
  std::vector<Tensor> grads;
  for (int64_t n : sizes) grads.push_back(filled(DType::bf16, n, 0.75f));
  engine::LossScalerOptions o;
  o.min_scale = 0.25;
  engine::LossScaler up(o), down(o);
  up.set_scale(0.5);
  down.set_scale(2.0);
  up.unscale_and_check(grads, &optim_pool());
  down.unscale_and_check(grads, &optim_pool());
  for (auto _ : state) {
    benchmark::DoNotOptimize(up.unscale_and_check(grads, &optim_pool()));
    benchmark::DoNotOptimize(down.unscale_and_check(grads, &optim_pool()));
  }
  state.SetBytesProcessed(state.iterations() * total(sizes) * 2 * 4);
  label(state, sizes, "bf16 unscale + check");
}

void BM_OptimUnscaleMemcpy(benchmark::State& state) {
  const std::vector<int64_t> sizes = sizes_of(state.range(0));
  memcpy_bench(state, sizes, 4);
  label(state, sizes, "memcpy of the unscale's bytes");
}

BENCHMARK(BM_OptimAdamMultiTensor)->ArgName("resnet50")->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_OptimAdamPerTensor)->ArgName("resnet50")->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_OptimAdamMemcpy)->ArgName("resnet50")->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_OptimUnscale)->ArgName("resnet50")->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_OptimUnscaleMemcpy)->ArgName("resnet50")->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace ampfuse::bench
