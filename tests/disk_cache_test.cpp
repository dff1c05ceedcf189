// The persistent kernel cache (runtime/disk_cache.h): entries survive a "restart" (a new
// in-memory cache, or a new process), bad entries are rebuilt with one warning, a write
// that fails half-way leaves nothing behind, the size limit evicts the least recently used,
// and threads and processes share one directory.
#include "cli_util.h"
#include "engine/api/block.h"
#include "engine/execution/executor.h"
#include "ir/builder.h"
#include "runtime/cuda/nvrtc_compiler.h"
#include "runtime/disk_cache.h"
#include "runtime/fault_injection.h"
#include "runtime/interpreter.h"
#include "runtime/kernel_cache.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include <fcntl.h>
#include <sys/stat.h>

namespace ampfuse {
namespace {

namespace fs = std::filesystem;
using engine::Executable;
using engine::ExecutorOptions;
using ir::DType;
using ir::ValueRef;
using runtime::DiskCache;
using runtime::KernelCache;
using runtime::Tensor;

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> entries_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const std::string& f : files_in(dir))
    if (f.ends_with(".akc")) names.push_back(f);
  return names;
}

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << bytes;
}

int count(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

Tensor random_tensor(DType dt, ir::Shape shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  Tensor t({dt, std::move(shape)});
  for (int64_t i = 0; i < t.size(); ++i) t.set_f64(i, u(rng));
  return t;
}

// Sets a variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// ---- The store alone ---------------------------------------------------------------------

TEST(DiskCache, StoredEntryLoadsInANewCacheObject) {
  testing::ScopedTempDir dir;
  {
    DiskCache a(dir.path().string());
    EXPECT_TRUE(a.store("key one", "payload one"));
    EXPECT_EQ(a.load("key one"), "payload one");
    EXPECT_EQ(a.load("key two"), std::nullopt);
    EXPECT_EQ(a.stats().hits, 1);
    EXPECT_EQ(a.stats().misses, 1);
  }
  DiskCache b(dir.path().string());
  EXPECT_EQ(b.load("key one"), "payload one");
  ASSERT_EQ(entries_in(dir.path().string()).size(), 1u);
  EXPECT_EQ(DiskCache::verify_file(entries_in(dir.path().string())[0]), "");
}

// Every kind of bad entry reads as a miss, with one warning per cache object, never as data.
TEST(DiskCache, CorruptTruncatedForeignAndOldEntriesAreIgnoredWithOneWarning) {
  testing::ScopedTempDir dir;
  DiskCache writer(dir.path().string());
  const std::string payload(1000, 'p');
  ASSERT_TRUE(writer.store("key", payload));
  ASSERT_TRUE(writer.store("other key", "other payload"));
  const std::string path = writer.path_of("key");
  const std::string good = read_all(path);

  std::vector<std::pair<std::string, std::string>> bad;  // what, bytes
  std::string flipped = good;
  flipped[flipped.size() - 10] ^= 0x20;
  bad.emplace_back("a flipped payload byte", flipped);
  bad.emplace_back("truncated", good.substr(0, good.size() - 1));
  bad.emplace_back("truncated inside the header", good.substr(0, 12));
  bad.emplace_back("empty", "");
  std::string old_format = good;
  old_format[8] = 0;  // the format field (u32 after the 8-byte magic)
  bad.emplace_back("another format version", old_format);
  bad.emplace_back("another key's entry", read_all(writer.path_of("other key")));
  std::string magic = good;
  magic[0] = 'X';
  bad.emplace_back("not an entry", magic);

  for (const auto& [what, bytes] : bad) {
    SCOPED_TRACE(what);
    write_all(path, bytes);
    DiskCache reader(dir.path().string());
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(reader.load("key"), std::nullopt);
    EXPECT_EQ(reader.load("key"), std::nullopt);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(count(err, "warning: kernel cache"), 1) << err;
    EXPECT_NE(err.find(path), std::string::npos) << err;
    EXPECT_EQ(reader.stats().rejected, 2);
    EXPECT_EQ(reader.stats().hits, 0);
    // The rebuilt entry replaces the bad one.
    EXPECT_TRUE(reader.store("key", payload));
    EXPECT_EQ(reader.load("key"), payload);
  }
}

// The injected fault stops the write half-way: store fails, says so once, and leaves neither
// an entry nor its temporary file.
TEST(DiskCache, WriteFailingHalfWayLeavesNothingBehind) {
  testing::ScopedTempDir dir;
  runtime::ScopedFault fault("cache_write");
  DiskCache cache(dir.path().string());
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(cache.store("key", std::string(4096, 'x')));
  EXPECT_FALSE(cache.store("key 2", std::string(4096, 'y')));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(count(err, "warning: kernel cache"), 1) << err;
  EXPECT_NE(err.find("half-way"), std::string::npos) << err;
  EXPECT_EQ(cache.stats().store_failures, 2);
  EXPECT_TRUE(files_in(dir.path().string()).empty());
  EXPECT_EQ(cache.load("key"), std::nullopt);
}

// Past the limit, the least recently used entries go (a load makes an entry recent).
TEST(DiskCache, SizeLimitEvictsLeastRecentlyUsed) {
  testing::ScopedTempDir dir;
  const std::string payload(1000, 'p');
  DiskCache cache(dir.path().string(), 3500);  // three entries of ~1040 bytes fit, four do not
  for (const char* key : {"e1", "e2", "e3"}) ASSERT_TRUE(cache.store(key, payload));
  // Stored e1 < e2 < e3 in age, whatever the clock's resolution.
  const time_t now = time(nullptr);
  int age = 300;
  for (const char* key : {"e1", "e2", "e3"}) {
    const timespec t[2] = {{now - age, 0}, {now - age, 0}};
    ASSERT_EQ(utimensat(AT_FDCWD, cache.path_of(key).c_str(), t, 0), 0);
    age -= 100;
  }
  ASSERT_TRUE(cache.load("e1"));  // e1 is now the most recently used
  ASSERT_TRUE(cache.store("e4", payload));
  // Down to three quarters of the limit: e2 and e3, the least recently used, are gone.
  EXPECT_TRUE(fs::exists(cache.path_of("e1")));
  EXPECT_FALSE(fs::exists(cache.path_of("e2")));
  EXPECT_FALSE(fs::exists(cache.path_of("e3")));
  EXPECT_TRUE(fs::exists(cache.path_of("e4")));
  EXPECT_EQ(cache.stats().evictions, 2);
}

TEST(DiskCache, UnusableDirectoryIsAnErrorNamingIt) {
  testing::ScopedTempDir dir;
  write_all(dir.file("plain"), "x");
  EXPECT_ERROR(DiskCache(dir.file("plain") + "/sub"), "plain/sub");
}

// ---- Kernels through the disk cache ------------------------------------------------------

// tanh(x * w) + x, f32, fused into one kernel; `variant` changes the structure.
ir::Graph pointwise(int variant = 0, int64_t n = 1000) {
  ir::GraphBuilder b;
  const ValueRef x = b.input("x", {DType::f32, {n}});
  const ValueRef w = b.input("w", {DType::f32, {n}});
  ValueRef y = b.op("tanh", {b.op("elemwise_mul", {x, w})});
  for (int i = 0; i < variant; ++i) y = b.op(i % 2 ? "negative" : "sigmoid", {y});
  b.output(b.op("elemwise_add", {y, x}));
  return b.finish();
}

// Bit for bit: the same kernel, compiled or loaded.
void expect_same(const std::vector<Tensor>& want, const std::vector<Tensor>& got) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t k = 0; k < want.size(); ++k) {
    ASSERT_EQ(want[k].type(), got[k].type());
    EXPECT_EQ(std::memcmp(want[k].raw(), got[k].raw(), want[k].bytes()), 0) << "output " << k;
  }
}

// Against the interpreter: the kernels' vector tanh/sigmoid differ from its scalar ones in
// the last bits.
void expect_close(const std::vector<Tensor>& want, const std::vector<Tensor>& got) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t k = 0; k < want.size(); ++k) {
    ASSERT_EQ(want[k].type(), got[k].type());
    for (int64_t i = 0; i < want[k].size(); ++i)
      ASSERT_NEAR(want[k].get_f64(i), got[k].get_f64(i), 1e-5 * std::max(1.0, std::fabs(want[k].get_f64(i))))
          << "output " << k << " element " << i;
  }
}

std::vector<Tensor> interpreted(const ir::Graph& g) { return runtime::interpret(g, runtime::random_bindings(g, 7)); }

struct Compiled {
  engine::CompileStats stats;
  std::vector<Tensor> outputs;
};

Compiled compile_and_run(const ir::Graph& g, KernelCache& cache) {
  ExecutorOptions opts;
  opts.cache = &cache;
  const Executable exe = Executable::compile(g, opts);
  return {exe.compile_stats(), exe.run(runtime::random_bindings(g, 7))};
}

TEST(KernelCacheDisk, ANewCacheLoadsTheKernelFromDiskWithoutCompiling) {
  testing::ScopedTempDir dir;
  DiskCache disk(dir.path().string());
  const ir::Graph g = pointwise();

  KernelCache first(&disk);
  const Compiled cold = compile_and_run(g, first);
  EXPECT_EQ(cold.stats.kernels, 1);
  EXPECT_EQ(cold.stats.compilations, 1);
  EXPECT_EQ(cold.stats.disk_loads, 0);
  EXPECT_EQ(entries_in(dir.path().string()).size(), 1u);
  expect_close(interpreted(g), cold.outputs);

  KernelCache restarted(&disk);  // a new process's cache, the same directory
  const Compiled warm = compile_and_run(g, restarted);
  EXPECT_EQ(warm.stats.compilations, 1);
  EXPECT_EQ(warm.stats.disk_loads, 1);
  EXPECT_EQ(restarted.stats().disk_loads, 1);
  expect_same(cold.outputs, warm.outputs);

  // In memory now: neither compiled nor loaded again.
  const Compiled again = compile_and_run(g, restarted);
  EXPECT_EQ(again.stats.compilations, 0);
  EXPECT_EQ(again.stats.cache_hits, 1);
}

TEST(KernelCacheDisk, CorruptEntryIsRebuiltWithOneWarningAndTheRightResult) {
  testing::ScopedTempDir dir;
  DiskCache disk(dir.path().string());
  const ir::Graph g = pointwise(2);
  Compiled cold;
  {
    KernelCache first(&disk);
    cold = compile_and_run(g, first);
  }
  const auto entries = entries_in(dir.path().string());
  ASSERT_EQ(entries.size(), static_cast<size_t>(cold.stats.compilations));
  for (const std::string& e : entries) {
    std::string bytes = read_all(e);
    bytes[bytes.size() / 2] ^= 0x01;  // inside the object code
    write_all(e, bytes);
  }

  DiskCache disk2(dir.path().string());  // a fresh process: its one warning not yet spent
  KernelCache second(&disk2);
  ::testing::internal::CaptureStderr();
  const Compiled rebuilt = compile_and_run(g, second);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(count(err, "warning: kernel cache"), 1) << err;
  EXPECT_EQ(rebuilt.stats.disk_loads, 0);
  EXPECT_EQ(rebuilt.stats.compilations, cold.stats.compilations);
  EXPECT_EQ(disk2.stats().rejected, cold.stats.compilations);
  expect_same(cold.outputs, rebuilt.outputs);
  expect_close(interpreted(g), rebuilt.outputs);
  for (const std::string& e : entries) EXPECT_EQ(DiskCache::verify_file(e), "") << "the rebuild replaced " << e;

  KernelCache third(&disk2);
  EXPECT_EQ(compile_and_run(g, third).stats.disk_loads, cold.stats.compilations);
}

// A cache write that fails half-way: the kernel is compiled and right, the next call is
// served, and no entry (whole or partial) is ever used.
TEST(KernelCacheDisk, WriteFailingHalfWayStillServesRightResults) {
  testing::ScopedTempDir dir;
  const ir::Graph g = pointwise(1);
  const ir::Graph next = pointwise(3);
  {
    runtime::ScopedFault fault("cache_write");
    DiskCache disk(dir.path().string());
    KernelCache cache(&disk);
    ::testing::internal::CaptureStderr();
    const Compiled c = compile_and_run(g, cache);
    const Compiled n = compile_and_run(next, cache);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("half-way"), std::string::npos) << err;
    expect_close(interpreted(g), c.outputs);
    expect_close(interpreted(next), n.outputs);
    EXPECT_GT(n.stats.compilations, 0);
    EXPECT_EQ(disk.stats().store_failures, c.stats.compilations + n.stats.compilations);
    EXPECT_TRUE(files_in(dir.path().string()).empty());
  }
  DiskCache disk(dir.path().string());
  KernelCache restarted(&disk);
  const Compiled c = compile_and_run(g, restarted);
  EXPECT_EQ(c.stats.disk_loads, 0);
  EXPECT_GT(c.stats.compilations, 0);
  expect_close(interpreted(g), c.outputs);
}

// Threads compiling the same and different graphs through one cache with a disk cache
// (the ThreadSanitizer run's main case, `make tsan`): every result right, each kernel
// compiled or loaded once.
TEST(KernelCacheDisk, ThreadsCompileSameAndDifferentGraphsThroughOneCache) {
  testing::ScopedTempDir dir;
  DiskCache disk(dir.path().string());
  for (int round = 0; round < 2; ++round) {  // round 1: a new cache over a warm directory
    KernelCache cache(&disk);
    constexpr int kThreads = 6;
    std::vector<Compiled> got(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] { got[t] = compile_and_run(pointwise(t % 3), cache); });
    for (std::thread& t : threads) t.join();
    int produced = 0, loaded = 0;
    for (int t = 0; t < kThreads; ++t) {
      const ir::Graph g = pointwise(t % 3);
      expect_close(interpreted(g), got[t].outputs);
      produced += got[t].stats.compilations;
      loaded += got[t].stats.disk_loads;
      EXPECT_EQ(got[t].stats.compilations + got[t].stats.cache_hits, got[t].stats.kernels) << t;
    }
    // Each distinct kernel produced once, by one thread: as many as there are entries.
    EXPECT_EQ(produced, cache.stats().compilations);
    EXPECT_EQ(static_cast<size_t>(produced), entries_in(dir.path().string()).size());
    EXPECT_GE(produced, 3) << "three structures";
    EXPECT_EQ(loaded, round == 0 ? 0 : produced);
  }
}

// Blocks called from several threads at once (one block per thread, as Block asks), their
// kernels compiled through one cache with a disk cache.
TEST(KernelCacheDisk, BlocksCalledFromSeveralThreads) {
  testing::ScopedTempDir dir;
  DiskCache disk(dir.path().string());
  KernelCache cache(&disk);
  auto make = [] {
    auto b = std::make_unique<engine::FunctionBlock>("pw", [](engine::F& f, const std::vector<engine::Sym>& in) {
      engine::Sym y = f.tanh(f.broadcast_mul(in[0], f.param("w")));
      return std::vector<engine::Sym>{f.broadcast_add(f.mul_scalar(y, 0.5), in[0])};
    });
    b->add_param("w", random_tensor(DType::f32, {8}, 5));
    return b;
  };
  const Tensor x = random_tensor(DType::f32, {16, 8}, 1);
  const std::vector<Tensor> want = (*make())({x});  // eager: the interpreter
  constexpr int kThreads = 4;
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      auto b = make();
      engine::HybridizeOptions ho;
      ho.exec.cache = &cache;
      b->hybridize(ho);
      for (int call = 0; call < 5; ++call) {
        const std::vector<Tensor> got = (*b)({x});
        for (size_t k = 0; k < got.size(); ++k)
          for (int64_t i = 0; i < got[k].size(); ++i)
            if (std::fabs(got[k].get_f64(i) - want[k].get_f64(i)) > 1e-6) ++mismatches;
      }
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// CUBINs go through the same store (no GPU needed: NVRTC alone).
TEST(DiskCache, NvrtcBinaryIsStoredAndLoaded) {
  if (!runtime::cuda::nvrtc_available()) GTEST_SKIP() << "this build has no NVRTC";
  testing::ScopedTempDir dir;
  DiskCache disk(dir.path().string());
  const std::string source = "extern \"C\" __global__ void cached_kernel(float* x) { x[threadIdx.x] *= 2.0f; }\n";
  const runtime::cuda::NvrtcOptions opts;
  bool from_disk = true;
  const runtime::cuda::NvrtcResult cold =
      runtime::cuda::nvrtc_compile_cached(source, "cached_kernel", opts, "test key", &disk, &from_disk);
  EXPECT_FALSE(from_disk);
  ASSERT_EQ(entries_in(dir.path().string()).size(), 1u);
  const runtime::cuda::NvrtcResult warm =
      runtime::cuda::nvrtc_compile_cached(source, "cached_kernel", opts, "test key", &disk, &from_disk);
  EXPECT_TRUE(from_disk);
  EXPECT_EQ(warm.binary, cold.binary);
  EXPECT_EQ(warm.cubin, cold.cubin);
  EXPECT_EQ(warm.arch, cold.arch);
  EXPECT_EQ(warm.log, cold.log);
  runtime::cuda::nvrtc_compile_cached(source, "cached_kernel", opts, "another key", &disk, &from_disk);
  EXPECT_FALSE(from_disk);
}

// ---- Processes -------------------------------------------------------------------------

std::string run_args(const std::string& dir) {
  return fmt::format("AMPFUSE_CACHE_DIR='{}' '{}' run --no-baseline --repeat 1 --json", dir, AMPFUSE_CLI_PATH);
}

// Several processes filling one empty directory at once: each succeeds with the same
// outputs, every entry is whole, and a later process compiles nothing.
TEST(DiskCacheCli, ConcurrentProcessesShareOneDirectory) {
  testing::ScopedTempDir dir;
  const std::string cache = dir.file("cache");
  constexpr int kProcesses = 4;
  std::string script;
  for (int p = 0; p < kProcesses; ++p)
    script += fmt::format("{} > '{}' 2> '{}' & ", run_args(cache), dir.file(fmt::format("out{}", p)),
                          dir.file(fmt::format("err{}", p)));
  script += "wait";
  ASSERT_EQ(run_shell(script).status, 0);
  std::set<std::string> outputs;
  for (int p = 0; p < kProcesses; ++p) {
    CliResult r;
    r.status = 0;
    r.out = read_all(dir.file(fmt::format("out{}", p)));
    r.err = read_all(dir.file(fmt::format("err{}", p)));
    const nlohmann::json j = parse_json(r);
    ASSERT_TRUE(j.contains("outputs")) << r.err;
    outputs.insert(j["outputs"].dump());
    EXPECT_EQ(r.err.find("warning: kernel cache"), std::string::npos) << r.err;
  }
  EXPECT_EQ(outputs.size(), 1u) << "every process computed the same outputs";
  const auto entries = entries_in(cache);
  ASSERT_FALSE(entries.empty());
  for (const std::string& e : entries) EXPECT_EQ(DiskCache::verify_file(e), "") << e;
  for (const std::string& f : files_in(cache)) EXPECT_TRUE(f.ends_with(".akc")) << "left behind: " << f;

  const CliResult again = run_shell(run_args(cache));
  ASSERT_EQ(again.status, 0) << again.err;
  const nlohmann::json plan = parse_json(again)["plan"];
  EXPECT_EQ(plan["kernels_cold"], 0);
  EXPECT_EQ(plan["kernels_disk"], static_cast<int>(entries.size()) - 1) << "one entry is the plan";
  EXPECT_EQ(plan["plan_from_disk"], true);
  EXPECT_EQ(parse_json(again)["outputs"].dump(), *outputs.begin());
}

// The report's line and AMPFUSE_CACHE_DIR=0.
TEST(DiskCacheCli, ReportSaysWhereKernelsCameFrom) {
  testing::ScopedTempDir dir;
  const std::string args = "run --no-baseline --repeat 1";
  const CliResult cold = run_shell(fmt::format("AMPFUSE_CACHE_DIR='{}' '{}' {}", dir.path().string(), AMPFUSE_CLI_PATH, args));
  ASSERT_EQ(cold.status, 0) << cold.err;
  EXPECT_NE(cold.out.find("(cold "), std::string::npos) << cold.out;
  EXPECT_NE(cold.out.find(", disk 0, memory "), std::string::npos) << cold.out;
  const CliResult warm = run_shell(fmt::format("AMPFUSE_CACHE_DIR='{}' '{}' {}", dir.path().string(), AMPFUSE_CLI_PATH, args));
  EXPECT_NE(warm.out.find("(cold 0, disk "), std::string::npos) << warm.out;
  const CliResult off = run_shell(fmt::format("AMPFUSE_CACHE_DIR=0 '{}' {}", AMPFUSE_CLI_PATH, args));
  EXPECT_NE(off.out.find(", disk 0, memory "), std::string::npos) << off.out;
}

}  // namespace
}  // namespace ampfuse
