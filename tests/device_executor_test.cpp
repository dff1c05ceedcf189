// The executor (engine/execution/executor.h) on the emulated GPU (runtime/device_api.h),
// so in every build, without a GPU: small graphs aimed at views, slices, broadcasts, host
// round trips, variables as outputs and empty tensors; the default model; 200 of the
// differential fuzzer's graphs against the interpreter and against the CPU executor bit for
// bit (the emulated device runs the same CPU kernels); what is uploaded, downloaded and
// allocated; the non-finite flag; errors. The same checks run on a real GPU in
// tests/cuda_device_test.cpp.
#include "fuzz/differential.h"
#include "engine/execution/executor.h"
#include "runtime/kernel_cache.h"
#include "tests/cli_util.h"
#include "tests/executor_checks.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

namespace ampfuse::testing::device {
namespace {

using engine::CompileStats;
using engine::Executable;
using engine::ExecutorOptions;
using engine::RunStats;
using runtime::EmulatedDevice;

ExecutorOptions on(runtime::DeviceApi& device) {
  ExecutorOptions opts;
  opts.device = &device;
  return opts;
}

TEST(DeviceExecutor, SmallGraphsEqualTheInterpreter) {
  EmulatedDevice device;
  for (const NamedGraph& ng : device_graphs()) {
    SCOPED_TRACE(ng.name);
    EXPECT_TRUE(device_matches_interpreter(ng.graph, device, 1, {}, ng.exact, ExecutorOptions{.strict = !ng.falls_back}));
    EXPECT_TRUE(device_matches_interpreter(ng.graph, device, 2, {}, ng.exact,
                                           ExecutorOptions{.fuse = false, .strict = !ng.falls_back}));
    // Same kernels and oneDNN primitives as the CPU: the same bits.
    const runtime::Bindings vars = planted_bindings(ng.graph, 3);
    ExecutorOptions cpu{.strict = !ng.falls_back}, emulated = on(device);
    emulated.strict = cpu.strict;
    EXPECT_TRUE(same_outputs(Executable::compile(ng.graph, cpu).run(vars), Executable::compile(ng.graph, emulated).run(vars)));
  }
  EXPECT_EQ(device.counters().live_bytes, 0) << "every executable freed its device memory";
}

// The small graphs' plans hold what they were written for.
TEST(DeviceExecutor, SmallGraphsTakeTheIntendedPaths) {
  EmulatedDevice device;
  std::map<std::string, CompileStats> stats;
  for (const NamedGraph& ng : device_graphs()) {
    ExecutorOptions opts = on(device);
    opts.strict = !ng.falls_back;
    stats[ng.name] = Executable::compile(ng.graph, opts).compile_stats();
  }
  EXPECT_EQ(stats["round_trips"].external_ops, 3);
  EXPECT_EQ(stats["round_trips"].onednn_ops, 3);
  // The first FullyConnected and softmax read device values; the second FullyConnected
  // reads the first's output, on the host already.
  EXPECT_EQ(stats["round_trips"].host_round_trips, 2);
  EXPECT_EQ(stats["host_kernel_between_device_kernels"].fallbacks.size(), 1u);
  EXPECT_EQ(stats["host_kernel_between_device_kernels"].kernels, 3);
  EXPECT_EQ(stats["host_kernel_between_device_kernels"].host_round_trips, 1);
  EXPECT_GE(stats["views"].views, 2);
  for (const auto& [name, st] : stats) {
    EXPECT_EQ(st.device, device.name());
    if (name != "host_kernel_between_device_kernels") {
      EXPECT_TRUE(st.fallbacks.empty()) << name;
    }
  }
}

// The emulated device runs the CPU kernels, so it must equal the CPU executor bit for bit,
// transcendental graphs included; and the interpreter as the fuzzer requires.
// 60 graphs under AddressSanitizer (4x slower there; the release run covers all 200).
#ifdef __SANITIZE_ADDRESS__
constexpr uint64_t kDeviceFuzzGraphs = 60;
#else
constexpr uint64_t kDeviceFuzzGraphs = 200;
#endif

TEST(DeviceExecutor, FuzzerGraphsEqualTheInterpreterAndTheCpuExecutor) {
  EmulatedDevice device;
  const FuzzResult fr = fuzz_on_device(device, 1, kDeviceFuzzGraphs, fuzz::kTranscendentalUlps);
  EXPECT_EQ(fr.failures, 0) << "of " << fr.graphs << "; first: " << fr.first_failure;
  int mismatches = 0, transcendental = 0;
  for (uint64_t seed = 1; seed <= kDeviceFuzzGraphs; ++seed) {
    const fuzz::RandomGraph rg = fuzz::random_fusable_graph(seed);
    transcendental += rg.transcendental;
    const runtime::Bindings vars = planted_bindings(rg.graph, seed);
    const auto r = same_outputs(engine::Executable::compile(rg.graph).run(vars),
                                Executable::compile(rg.graph, on(device)).run(vars));
    if (!r && ++mismatches <= 3) ADD_FAILURE() << "seed " << seed << ": " << r.message();
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_GT(transcendental, 10);
}

TEST(DeviceExecutor, DefaultModelEqualsTheCpuExecutor) {
  EmulatedDevice device;
  const ir::Graph g = models::build_default_model(2);
  const Executable exe = Executable::compile(g, on(device));
  const CompileStats& st = exe.compile_stats();
  EXPECT_GT(exe.kernel_specs().size(), 0u);
  EXPECT_GT(st.external_ops, 0);
  EXPECT_GT(st.host_round_trips, 0);
  EXPECT_TRUE(st.fallbacks.empty()) << st.fallbacks[0];
  const runtime::Bindings vars = runtime::random_bindings(g, 3);
  RunStats rs;
  const std::vector<Tensor> got = exe.run(vars, &rs);
  // Same kernels, same oneDNN primitives, same inputs: the same bits. (A device keeps the
  // model's layout where the CPU's "auto" would run the convolution channels-last.)
  ExecutorOptions cpu;
  cpu.layout = "keep";
  EXPECT_TRUE(same_outputs(engine::Executable::compile(g, cpu).run(vars), got));
  EXPECT_TRUE(same_outputs(runtime::interpret(g, vars), got, {.ulps = 64, .epsilon = 1e-4 / 64}));
  EXPECT_GT(rs.uploads, 0);
  EXPECT_GT(rs.downloads, 0);
  EXPECT_GT(st.arena_bytes, 0);
}

// A variable read by several kernels is uploaded once; only what a host step or the caller
// needs comes back.
TEST(DeviceExecutor, UploadsEachVariableOnceAndDownloadsOnlyOutputs) {
  ir::GraphBuilder b;
  const ValueRef x = b.input("x", {DType::f32, {1000}});
  const ValueRef unused_by_device = b.input("w", {DType::f32, {7}});
  ValueRef v = x;
  for (int k = 0; k < 6; ++k) v = b.op("broadcast_add", {b.op("negative", {v}), x});
  b.output(v);
  b.output(unused_by_device);
  const ir::Graph g = b.finish();
  EmulatedDevice device;
  ExecutorOptions opts = on(device);
  opts.fuse = false;  // thirteen kernels, six of them read x
  const Executable exe = Executable::compile(g, opts);
  EXPECT_EQ(exe.kernel_specs().size(), 12u);
  const runtime::Bindings vars = runtime::random_bindings(g, 4);
  RunStats rs;
  const std::vector<Tensor> got = exe.run(vars, &rs);
  EXPECT_EQ(rs.uploads, 1);
  EXPECT_EQ(rs.upload_bytes, 4000);
  EXPECT_EQ(rs.downloads, 1);
  EXPECT_EQ(rs.download_bytes, 4000);
  EXPECT_EQ(device.counters().uploads, 1);
  EXPECT_EQ(device.counters().downloads, 1);
  EXPECT_EQ(got[1].raw(), vars.at("w").raw()) << "a variable output is the bound tensor, never copied";
  EXPECT_TRUE(same_outputs(runtime::interpret(g, vars), got));
}

// A value's slot is reused once it is dead (here each kernel writes over its input), and
// the arena outlives the run: a second run allocates nothing.
TEST(DeviceExecutor, BuffersAreReusedWithinAndAcrossRuns) {
  ir::GraphBuilder b;
  ValueRef v = b.input("x", {DType::f32, {4096}});
  for (int k = 0; k < 12; ++k)
    v = k % 2 ? b.op("negative", {v}) : b.op("_plus_scalar", {v}, {{"scalar", "1"}});
  b.output(v);
  const ir::Graph g = b.finish();
  EmulatedDevice device;
  ExecutorOptions opts = on(device);
  opts.fuse = false;
  const Executable exe = Executable::compile(g, opts);
  const runtime::Bindings vars = runtime::random_bindings(g, 1);
  RunStats rs;
  std::vector<Tensor> first = exe.run(vars, &rs);
  EXPECT_TRUE(same_outputs(runtime::interpret(g, vars), first));
  // x's copy, then every kernel in place: one slot of 16 KiB for thirteen values.
  EXPECT_EQ(exe.compile_stats().arena_bytes, 4096 * 4);
  EXPECT_EQ(exe.compile_stats().intermediate_bytes, 13 * 4096 * 4);
  EXPECT_EQ(exe.compile_stats().in_place, 12);
  const std::vector<Tensor> want = {first[0].clone()};
  first.clear();  // the caller lets go of the output: its buffer is reused
  const int64_t allocs = device.counters().allocs;
  EXPECT_TRUE(same_outputs(want, exe.run(vars, &rs)));
  EXPECT_EQ(device.counters().allocs, allocs);
  EXPECT_EQ(rs.allocations, 0);
}

TEST(DeviceExecutor, NonfiniteFlagSeesInputsAndRoundedOutputs) {
  ir::GraphBuilder b;
  const ValueRef x = b.input("x", {DType::f32, {100}});
  const ValueRef y = b.op("amp_cast", {b.op("_mul_scalar", {x}, {{"scalar", "2"}})}, {{"dtype", "float16"}});
  b.output(b.op("FullyConnected", {b.op("Reshape", {y}, {{"shape", "(10,10)"}}), b.input("w", {DType::f16, {4, 10}})},
                {{"num_hidden", "4"}, {"no_bias", "true"}}));
  b.output(b.op("amp_cast", {x}, {{"dtype", "bfloat16"}}));  // a second kernel with its own flag
  const ir::Graph g = b.finish();
  EmulatedDevice device;
  ExecutorOptions opts = on(device);
  opts.check_nonfinite = true;
  const Executable exe = Executable::compile(g, opts);
  runtime::Bindings vars = runtime::random_bindings(g, 1);
  Tensor& t = vars.at("x");
  for (int64_t i = 0; i < 100; ++i) t.set_f64(i, 0.5 * static_cast<double>(i));
  RunStats rs;
  exe.run(vars, &rs);
  EXPECT_FALSE(rs.nonfinite);
  t.set_f64(99, 40000);  // 80000 overflows f16: the stored output is +Inf
  exe.run(vars, &rs);
  EXPECT_TRUE(rs.nonfinite);
  t.set_f64(99, 1);
  exe.run(vars, &rs);
  EXPECT_FALSE(rs.nonfinite) << "the flags start at zero every run";
  t.set_f64(0, -INFINITY);
  exe.run(vars, &rs);
  EXPECT_TRUE(rs.nonfinite);
  opts.check_nonfinite = false;
  Executable::compile(g, opts).run(vars, &rs);
  EXPECT_FALSE(rs.nonfinite);
}

TEST(DeviceExecutor, EmptyTensorsNeverAllocate) {
  ir::GraphBuilder b;
  const ValueRef x = b.input("x", {DType::f32, {4, 0, 3}});
  b.output(b.op("transpose", {b.op("_mul_scalar", {x}, {{"scalar", "2"}})}, {{"axes", "(2,0,1)"}}));
  const ir::Graph g = b.finish();
  EmulatedDevice device;  // alloc(0) throws
  const Executable exe = Executable::compile(g, on(device));
  RunStats rs;
  const std::vector<Tensor> got = exe.run(runtime::random_bindings(g, 1), &rs);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].shape(), (ir::Shape{3, 4, 0}));
  EXPECT_EQ(device.counters().allocs, 0);
  EXPECT_EQ(device.counters().launches, 0);
  EXPECT_EQ(rs.uploads + rs.downloads, 0);
}

TEST(DeviceExecutor, BadBindingsNameTheVariable) {
  const ir::Graph g = device_graphs()[0].graph;
  EmulatedDevice device;
  const Executable exe = Executable::compile(g, on(device));
  runtime::Bindings vars = runtime::random_bindings(g, 1);
  vars.erase("w");
  EXPECT_ERROR(exe.run(vars), "variable 'w' is not bound");
  vars = runtime::random_bindings(g, 1);
  vars["x"] = Tensor({DType::f32, {2, 8, 5}});
  EXPECT_ERROR(exe.run(vars), "variable 'x' is bound to f32[2,8,5] but the graph needs f32[3,8,5]");
  vars["x"] = Tensor();
  EXPECT_ERROR(exe.run(vars), "variable 'x' is bound to a tensor without storage");
}

// What makes the emulation a test: device memory is not host memory, starts poisoned, and
// every access is checked against the live buffers.
TEST(DeviceExecutor, EmulatedDeviceKeepsItsMemoryApartAndChecked) {
  EmulatedDevice device;
  const runtime::DevicePtr p = device.alloc(8);
  uint32_t host[2] = {1, 2};
  device.download(host, p, 8);
  EXPECT_EQ(host[0], 0x7B7B7B7Bu);
  EXPECT_EQ(host[1], 0x7B7B7B7Bu);
  EXPECT_ERROR(device.upload(p, host, 12), "upload reads or writes 12 bytes at offset 0 of a 8-byte buffer");
  device.download(host, p + 4, 4);  // anywhere inside a buffer
  EXPECT_ERROR(device.download(host, p + 4, 8), "download reads or writes 8 bytes at offset 4 of a 8-byte buffer");
  EXPECT_ERROR(device.alloc(0), "allocation of 0 bytes");

  ir::GraphBuilder b;
  b.output(b.op("negative", {b.input("x", {DType::f32, {4}})}));
  const engine::Executable exe = Executable::compile(b.finish(), on(device));
  const codegen::KernelSpec& spec = *exe.kernel_specs().at(0);
  const auto kernel = device.prepare(spec);
  const runtime::DevicePtr in = device.alloc(16), out = device.alloc(16), short_out = device.alloc(12);
  const runtime::DevicePtr fits[] = {in, out};
  device.launch(*kernel, spec, fits, 0);
  const runtime::DevicePtr past_the_end[] = {in, short_out};
  EXPECT_ERROR(device.launch(*kernel, spec, past_the_end, 0), "operand 1 reads or writes 16 bytes at offset 0 of a 12-byte buffer");
  const runtime::DevicePtr host_memory[] = {reinterpret_cast<runtime::DevicePtr>(&host[0]), in};
  EXPECT_ERROR(device.launch(*kernel, spec, host_memory, 0), "outside every buffer");
  // Inside an arena, an access must stay inside one of the buffers the executor declared.
  const runtime::DevicePtr arena = device.alloc(32);
  const runtime::DeviceRegion regions[] = {{0, 16}, {16, 16}};
  device.declare_regions(arena, regions);
  const runtime::DevicePtr inside[] = {arena, arena + 16};
  device.launch(*kernel, spec, inside, 0);
  const runtime::DevicePtr across[] = {arena + 8, out};
  EXPECT_ERROR(device.launch(*kernel, spec, across, 0), "reads or writes bytes [8, 24) of an arena, which no declared buffer holds");
  device.free(arena);
  device.free(in);
  device.free(out);
  device.free(short_out);
  device.free(p);
  EXPECT_EQ(device.counters().live_bytes, 0);
}

// `ampfuse run --device cuda-emulated`: the CLI's device path without a GPU.
TEST(DeviceExecutor, CliRunsTheDefaultModelOnTheEmulatedDevice) {
  const CliResult r = run_cli("run --device cuda-emulated --repeat 2 --json");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = parse_json(r);
  EXPECT_EQ(j["plan"]["device"], EmulatedDevice().name());
  EXPECT_GT(j["plan"]["host_round_trips"].get<int>(), 0);
  EXPECT_GT(j["plan"]["kernels"].get<int>(), 0);
  EXPECT_GT(j["transfers"]["uploads"].get<int>(), 0);
  EXPECT_LT(j["max_rel_error"].get<double>(), 1e-4);
  const CliResult text = run_cli("run --device cuda-emulated --repeat 1 --no-baseline");
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("fused on cuda-emulated"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("copies:  a run uploads"), std::string::npos) << text.out;
}

}  // namespace
}  // namespace ampfuse::testing::device
