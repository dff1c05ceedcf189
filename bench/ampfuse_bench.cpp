// ampfuse_bench: generated kernels against memory bandwidth (see bench/README.md).
//
// Every benchmark runs on the same 2-thread pool over buffers allocated once, backed by
// huge pages where the kernel grants them and pre-faulted, so that no page fault lands
// inside a timed iteration. Rates count the bytes a kernel must move at minimum (its
// inputs once, its outputs once); memcpy moves the same number of bytes, half read and
// half written, so "fused / memcpy" is the fraction of copy bandwidth a kernel reaches.
#include "codegen/kernel_abi.h"
#include "engine/api/loss_scaler.h"
#include "engine/lower.h"
#include "engine/execution/executor.h"
#include "ir/mxnet_json.h"
#include "ir/text_format.h"
#include "ir/type_inference.h"
#include "codegen/kernel_spec.h"
#include "runtime/kernel_cache.h"
#include "runtime/thread_pool.h"

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <sys/mman.h>

#include <cstdlib>
#include <filesystem>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ampfuse::bench {
namespace {

using codegen::KernelSpec;
using ir::DType;
using ir::ScalarBuilder;
using ir::ScalarOp;

constexpr int64_t kElements = int64_t{64} << 20;  // 64 Mi
constexpr int kThreads = 2;

runtime::ThreadPool& pool() {
  static runtime::ThreadPool p(kThreads);
  return p;
}

// One reusable, pre-faulted buffer per name.
void* buffer(const std::string& name, size_t bytes) {
  static std::map<std::string, std::pair<void*, size_t>> buffers;
  auto it = buffers.find(name);
  if (it != buffers.end() && it->second.second >= bytes) return it->second.first;
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, rounded);
  if (!p) std::abort();
  madvise(p, rounded, MADV_HUGEPAGE);
  // Pre-fault on the pool's threads, as the kernels will touch it, with finite values
  // (0x3F80 is 1.0 in bf16, 0x3F803F80 a float near 1.0).
  pool().parallel_for(static_cast<int64_t>(rounded), [p](int64_t b, int64_t e) {
    std::memset(static_cast<char*>(p) + b, 0x3F, static_cast<size_t>(e - b));
  });
  buffers[name] = {p, rounded};
  return p;
}

KernelSpec flat_spec(const std::string& name, ir::ScalarProgram body, const std::vector<DType>& ins, DType out) {
  KernelSpec s;
  s.name = name;
  s.shape = {kElements};
  for (size_t k = 0; k < ins.size(); ++k) s.inputs.push_back({"in" + std::to_string(k), ins[k], {1}});
  s.outputs.push_back({"out", out, {1}});
  std::vector<DType> all = ins;
  all.push_back(out);
  s.compute = ir::compute_type(all);
  s.body = std::move(body);
  return s;
}

// docs/design.md's C8 chain: a=f32(x); b=f32(y); c=a*b; d=c+0.5; e=max(d,0); f=e*1.5; g=f-a.
ir::ScalarProgram c8_body() {
  ScalarBuilder b(2);
  const auto a = b.input(0), y = b.input(1);
  const auto d = b.add(b.mul(a, y), b.constant(0.5));
  const auto f = b.mul(b.max(d, b.constant(0)), b.constant(1.5));
  return b.finish({b.sub(f, a)});
}

struct Launch {
  KernelSpec spec;
  std::shared_ptr<const runtime::CompiledKernel> kernel;
  std::vector<void*> data;
};

Launch prepare(KernelSpec spec, std::vector<void*> data) {
  auto kernel = runtime::KernelCache::global().get(spec);
  return {std::move(spec), std::move(kernel), std::move(data)};
}

void run(const Launch& l) { runtime::run_kernel(*l.kernel, l.spec, l.data, {}, {}, pool()); }

void report(benchmark::State& state, int64_t bytes_per_element, int64_t elements = kElements) {
  state.SetBytesProcessed(state.iterations() * elements * bytes_per_element);
}

void* bytes_of(const char* name, DType t) { return buffer(name, kElements * ir::dtype_size(t)); }

void BM_Memcpy(benchmark::State& state) {
  // Copies bytes_per_element / 2 per element: the same traffic as a kernel moving that many.
  const int64_t half = kElements * state.range(0) / 2;
  char* src = static_cast<char*>(buffer("memcpy.src", half));
  char* dst = static_cast<char*>(buffer("memcpy.dst", half));
  for (auto _ : state)
    pool().parallel_for(
        half, [&](int64_t b, int64_t e) { std::memcpy(dst + b, src + b, static_cast<size_t>(e - b)); }, 1 << 20,
        4096);
  report(state, state.range(0));
}

void BM_C8_Fused(benchmark::State& state) {
  const DType t = state.range(0) ? DType::f32 : DType::bf16;
  const Launch l = prepare(flat_spec("c8", c8_body(), {t, t}, t), {bytes_of("x", t), bytes_of("y", t), bytes_of("out", t)});
  for (auto _ : state) run(l);
  report(state, 3 * static_cast<int64_t>(ir::dtype_size(t)));
}

// C8 as a graph through the path users take: Executable::run_into the caller's buffers
// (into:1, what a framework does) or run() with returned buffers let go of each time
// (into:0, the CLI's loop), on the executor's own threads. Within 10 % of BM_C8_Fused is
// the goal: everything but the kernel (binding, plan walk) should cost nothing at this size.
void BM_C8_Executor(benchmark::State& state) {
  const DType t = state.range(0) ? DType::f32 : DType::bf16;
  const std::string type = fmt::format("{}[{}]", ir::dtype_name(t), kElements);
  ir::Graph g = ir::parse_graph(fmt::format(R"(graph {{
    %x = var input : {0}
    %y = var input : {0}
    %a = amp_cast(%x) {{dtype=f32}}
    %b = amp_cast(%y) {{dtype=f32}}
    %c = elemwise_mul(%a, %b)
    %d = _plus_scalar(%c) {{scalar=0.5}}
    %e = _maximum_scalar(%d) {{scalar=0}}
    %f = _mul_scalar(%e) {{scalar=1.5}}
    %h = elemwise_sub(%f, %a)
    %o = amp_cast(%h) {{dtype={1}}}
    return %o
  }})", type, ir::dtype_name(t)));
  ir::infer_types(g);
  const engine::Executable exe = engine::Executable::compile(g);
  if (exe.compile_stats().kernels != 1) state.SkipWithError("C8 did not fuse into one kernel");
  const ir::TensorType tt{t, {kElements}};
  runtime::Bindings vars;
  vars["x"] = runtime::Tensor::wrap(bytes_of("x", t), tt);
  vars["y"] = runtime::Tensor::wrap(bytes_of("y", t), tt);
  std::vector<runtime::Tensor> into = {runtime::Tensor::wrap(bytes_of("out", t), tt)};
  const bool caller_buffers = state.range(1) != 0;
  exe.run(vars);  // the run context (and its output buffer) exists before timing
  for (auto _ : state) {
    if (caller_buffers)
      exe.run_into(vars, into);
    else
      benchmark::DoNotOptimize(exe.run(vars));
  }
  report(state, 3 * static_cast<int64_t>(ir::dtype_size(t)));
}

// The same fused kernel with streaming stores forced on or off, launched by hand.
void BM_C8_FusedStreaming(benchmark::State& state) {
  const DType t = state.range(0) ? DType::f32 : DType::bf16;
  const Launch l = prepare(flat_spec("c8", c8_body(), {t, t}, t), {bytes_of("x", t), bytes_of("y", t), bytes_of("out", t)});
  const int64_t shape[] = {kElements}, strides[] = {1, 1, 1};
  const codegen::KernelArgs args{l.data.data(), shape, strides, nullptr, nullptr, state.range(1)};
  for (auto _ : state)
    pool().parallel_for(
        kElements, [&](int64_t b, int64_t e) { l.kernel->fn(b, e, &args); }, 16384, 64);
  report(state, 3 * static_cast<int64_t>(ir::dtype_size(t)));
}

// The unfused AMP path: one compiled kernel per op, f32 intermediates in memory.
void BM_C8_Unfused(benchmark::State& state) {
  const DType t = state.range(0) ? DType::f32 : DType::bf16;
  auto unary = [](auto&& make) {
    ScalarBuilder b(1);
    return b.finish({make(b, b.input(0))});
  };
  auto binary = [](ScalarOp op) {
    ScalarBuilder b(2);
    return b.finish({b.binary(op, b.input(0), b.input(1))});
  };
  void *x = bytes_of("x", t), *y = bytes_of("y", t), *out = bytes_of("out", t);
  void *a = bytes_of("a", DType::f32), *bb = bytes_of("b", DType::f32), *t1 = bytes_of("t1", DType::f32),
       *t2 = bytes_of("t2", DType::f32);
  const auto copy = [](ScalarBuilder&, ScalarBuilder::Val v) { return v; };
  std::vector<Launch> steps;
  steps.push_back(prepare(flat_spec("to_f32", unary(copy), {t}, DType::f32), {x, a}));
  steps.push_back(prepare(flat_spec("to_f32", unary(copy), {t}, DType::f32), {y, bb}));
  steps.push_back(prepare(flat_spec("mul", binary(ScalarOp::mul), {DType::f32, DType::f32}, DType::f32), {a, bb, t1}));
  steps.push_back(prepare(flat_spec("add_c", unary([](ScalarBuilder& b, auto v) { return b.add(v, b.constant(0.5)); }),
                                    {DType::f32}, DType::f32),
                          {t1, t2}));
  steps.push_back(prepare(flat_spec("relu", unary([](ScalarBuilder& b, auto v) { return b.max(v, b.constant(0)); }),
                                    {DType::f32}, DType::f32),
                          {t2, t1}));
  steps.push_back(prepare(flat_spec("mul_c", unary([](ScalarBuilder& b, auto v) { return b.mul(v, b.constant(1.5)); }),
                                    {DType::f32}, DType::f32),
                          {t1, t2}));
  steps.push_back(prepare(flat_spec("sub", binary(ScalarOp::sub), {DType::f32, DType::f32}, DType::f32), {t2, a, t1}));
  steps.push_back(prepare(flat_spec("to_out", unary(copy), {DType::f32}, t), {t1, out}));
  for (auto _ : state)
    for (const Launch& s : steps) run(s);
  report(state, 3 * static_cast<int64_t>(ir::dtype_size(t)));
}

// f32 NCHW -> bf16 NHWC in one pass: the output is written in order, the input read
// through permuted strides.
// H and W come merged (as the planner lowers them), H*W given: a power of two puts the C
// planes a block reads a power of two apart; real planes (56*56, 28*28) are not.
void BM_CastTranspose(benchmark::State& state) {
  const int64_t c = state.range(0), hw = state.range(1), n = kElements / (c * hw);
  const bool reverse = state.range(2) != 0;
  KernelSpec s;
  if (!reverse) {
    // f32 NCHW -> bf16 NHWC: the iteration space is the output's, x read through permuted
    // strides; H and W as one dimension, as the planner lowers it (coalesce_dimensions).
    s.name = "cast_nhwc";
    s.shape = {n, hw, c};
    s.inputs = {{"x", DType::f32, {c * hw, 1, hw}}};
    s.outputs = {{"y", DType::bf16, codegen::row_major_strides(s.shape)}};
  } else {
    // bf16 NHWC -> f32 NCHW, H and W as one dimension likewise.
    s.name = "cast_nchw";
    s.shape = {n, c, hw};
    s.inputs = {{"x", DType::bf16, {hw * c, 1, c}}};
    s.outputs = {{"y", DType::f32, codegen::row_major_strides(s.shape)}};
  }
  ScalarBuilder b(1);
  s.body = b.finish({b.input(0)});
  const Launch l = prepare(s, {bytes_of(reverse ? "xr" : "x", s.inputs[0].dtype), bytes_of(reverse ? "outr" : "out", s.outputs[0].dtype)});
  state.SetLabel(reverse ? fmt::format("[{},{},{}] NHWC -> NCHW", n, hw, c) : fmt::format("[{},{},{}] -> NHWC", n, c, hw));
  for (auto _ : state) run(l);
  report(state, 6, n * c * hw);
}

// A kernel cache hit: the key of a compiled spec computed and found (what compiling a graph
// again with a new batch size costs per kernel).
void BM_KernelCacheHit(benchmark::State& state) {
  ScalarBuilder b(2);
  const KernelSpec s = flat_spec("hit", [&] {
    const auto x = b.input(0), y = b.input(1);
    return b.finish({b.max(b.add(b.mul(x, y), b.constant(0.5)), b.constant(0))});
  }(), {DType::bf16, DType::f32}, DType::bf16);
  runtime::KernelCache::global().get(s);
  for (auto _ : state) benchmark::DoNotOptimize(runtime::KernelCache::global().get(s));
}

// Whole models through the executor (issue #5): f32 or bf16 AMP, fused or one kernel per
// op. resnet152 at batch 1 (224x224) and the Sockeye transformer (its sequence length is
// fixed at 100 by its positional encodings). Skipped when models/ is absent.
struct ModelBench {
  const char* file;
  std::map<std::string, ir::Shape> shapes;
  std::vector<std::string> fp32_ops;
};
const ModelBench kModelBenches[] = {
    {"resnet152-mxnet-symbolic-symbol.json", {{"data", {1, 3, 224, 224}}}, {}},
    {"sockeye_transformer-parabank2-symbol.json",
     {{"source", {1, 100, 3}}, {"target", {1, 100}}, {"target_label", {1, 100}}},
     {"Embedding"}},
};

void BM_Model(benchmark::State& state) {
  const ModelBench& m = kModelBenches[state.range(0)];
  const bool bf16 = state.range(1) != 0, fuse = state.range(2) != 0;
  const std::string path = std::string(AMPFUSE_MODELS_DIR) + "/" + m.file;
  if (!std::filesystem::exists(path)) {
    state.SkipWithError(("no model at " + path).c_str());
    return;
  }
  ir::MxnetImportOptions io;
  io.input_shapes = m.shapes;
  ir::Graph g = ir::load_mxnet_json_file(path, io);
  const runtime::Bindings vars = runtime::random_bindings(g, 1);
  if (bf16) {
    engine::AmpOptions o;
    o.target = DType::bf16;
    o.fp32_ops = m.fp32_ops;
    o.cast_params_offline = true;  // a deployed model stores its weights in bf16 once
    g = engine::convert_for_amp(g, o);
  }
  runtime::Bindings run_vars;
  for (const ir::Node& n : g.nodes)
    if (n.is_var()) {
      const runtime::Tensor& t = vars.at(n.name);
      run_vars[n.name] = t.dtype() == n.outputs[0].dtype ? t : runtime::cast(t, n.outputs[0].dtype);
    }
  engine::ExecutorOptions eo;
  eo.fuse = fuse;
  eo.pool = &pool();
  eo.constant_params = true;  // inference: weights stay bound (widened/reordered once)
  eo.fold_batchnorm = fuse;   // as `ampfuse run` does for fused runs
  eo.fuse_epilogues = fuse;
  eo.row_kernels = fuse;
  const engine::Executable exe = engine::Executable::compile(g, eo);
  exe.run(run_vars);  // warm: first-touch of buffers, oneDNN primitives, weight-only steps
  for (auto _ : state) benchmark::DoNotOptimize(exe.run(run_vars));
  state.SetLabel(fmt::format("{} {} {}: {} kernels, {} external", std::string(m.file).substr(0, std::string(m.file).find('-')),
                             bf16 ? "bf16" : "f32", fuse ? "fused" : "unfused", exe.compile_stats().kernels,
                             exe.compile_stats().external_ops));
}

// LossScaler::unscale_and_check over one 64 Mi-element gradient of dtype f32 (0), bf16 (1)
// or f16 (2): a generated kernel (engine/training/multi_tensor.h). Each iteration
// unscales twice, by 2 and by 1/2, so the values come back to where they started (powers of
// two are exact) and never drift into subnormals or overflow. A pass reads and writes every
// element once.
void BM_LossScalerUnscale(benchmark::State& state) {
  static constexpr DType kDtypes[] = {DType::f32, DType::bf16, DType::f16};
  const DType dtype = kDtypes[state.range(0)];
  std::vector<runtime::Tensor> grads;
  grads.emplace_back(ir::TensorType{dtype, {kElements}});
  std::memset(grads[0].raw(), 0x3F, grads[0].bytes());  // finite values near 1 in every dtype
  engine::LossScalerOptions opts;
  opts.min_scale = 0.25;
  engine::LossScaler up(opts), down(opts);
  up.set_scale(0.5);
  down.set_scale(2.0);
  up.unscale_and_check(grads, &pool());  // first touch outside the timed loop
  down.unscale_and_check(grads, &pool());
  for (auto _ : state) {
    benchmark::DoNotOptimize(up.unscale_and_check(grads, &pool()));
    benchmark::DoNotOptimize(down.unscale_and_check(grads, &pool()));
  }
  report(state, 2 * 2 * static_cast<int64_t>(ir::dtype_size(dtype)));
  state.SetLabel(std::string(ir::dtype_name(dtype)));
}

BENCHMARK(BM_Memcpy)->Arg(6)->Arg(12)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_C8_Fused)->ArgName("f32")->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_C8_Executor)
    ->ArgNames({"f32", "into"})
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_C8_FusedStreaming)
    ->ArgNames({"f32", "nt"})
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_C8_Unfused)->ArgName("f32")->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CastTranspose)
    ->ArgNames({"C", "HW", "reverse"})
    ->ArgsProduct({{64}, {16384, 16400, 3136, 784}, {0, 1}})
    ->ArgsProduct({{3}, {349184}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_LossScalerUnscale)->ArgName("dtype")->DenseRange(0, 2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_KernelCacheHit)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Model)
    ->ArgNames({"model", "bf16", "fused"})
    ->ArgsProduct({{0, 1}, {0, 1}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ampfuse::bench

BENCHMARK_MAIN();
