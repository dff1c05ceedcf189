// ampfuse_cuda_bandwidth: fused elementwise chains on the GPU against the device's peak
// memory bandwidth (docs/cuda.md). For 2^20 to 2^28 elements it times, with CUDA events:
//   copy      f32 -> f32 through a generated kernel (8 bytes an element): the practical peak
//   c8_bf16   bench/README.md's C8 chain fused: two bf16 inputs, bf16 output (6 bytes)
//   c8_f32    the same chain with f32 inputs and output (12 bytes)
// and prints one CSV row per case and size: bytes moved at minimum / median time, as GB/s
// and as a percentage of the peak (2 x memory clock x bus width from cuDeviceGetAttribute;
// the H200's data-sheet 4.8 TB/s is printed beside it when the device is an H200).
// Usage: ampfuse_cuda_bandwidth [out.csv]. Without a GPU it prints why and exits 0.
#include "codegen/kernel_spec.h"
#include "ir/error.h"
#include "ir/scalar_program.h"
#include "runtime/cuda/cuda_driver.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace {

using namespace ampfuse;
namespace cu = runtime::cuda;

codegen::KernelSpec make_spec(const std::string& name, ir::ScalarProgram body, const std::vector<ir::DType>& ins,
                              ir::DType out, int64_t n) {
  codegen::KernelSpec s;
  s.name = name;
  s.shape = {n};
  for (size_t k = 0; k < ins.size(); ++k) s.inputs.push_back({fmt::format("in{}", k), ins[k], {1}});
  s.outputs.push_back({"out", out, {1}});
  s.compute = ir::DType::f32;
  s.body = std::move(body);
  return s;
}

// a = x; b = y; c = a*b; d = c+0.5; e = max(d,0); f = e*1.5; g = f-a (bench/README.md's C8).
ir::ScalarProgram c8() {
  ir::ScalarBuilder b(2);
  const auto a = b.input(0), y = b.input(1);
  const auto e = b.max(b.add(b.mul(a, y), b.constant(0.5)), b.constant(0));
  return b.finish({b.sub(b.mul(e, b.constant(1.5)), a)});
}

ir::ScalarProgram copy() {
  ir::ScalarBuilder b(1);
  return b.finish({b.input(0)});
}

}  // namespace

int main(int argc, char** argv) {
  const std::string why = cu::cuda_available();
  if (!why.empty()) {
    std::printf("ampfuse_cuda_bandwidth skipped: %s\n", why.c_str());
    return 0;
  }
  try {
    const cu::DeviceProperties& dev = cu::cuda_device();
    const double peak = dev.peak_bandwidth_gbs();
    const bool h200 = dev.name.find("H200") != std::string::npos;
    std::printf("# %s, sm_%d, %d SMs; peak %.0f GB/s from memory clock %d kHz x %d-bit bus%s\n", dev.name.c_str(),
                dev.arch, dev.multiprocessors, peak, dev.memory_clock_khz, dev.bus_width_bits,
                h200 ? " (H200 data sheet: 4800 GB/s)" : "");
    std::string csv = "case,elements,bytes,median_ms,gbs,pct_peak_attr,pct_peak_datasheet,registers\n";
    struct Case {
      const char* name;
      ir::ScalarProgram body;
      std::vector<ir::DType> ins;
      ir::DType out;
    };
    const std::vector<Case> cases = {
        {"copy", copy(), {ir::DType::f32}, ir::DType::f32},
        {"c8_bf16", c8(), {ir::DType::bf16, ir::DType::bf16}, ir::DType::bf16},
        {"c8_f32", c8(), {ir::DType::f32, ir::DType::f32}, ir::DType::f32},
    };
    for (const Case& c : cases) {
      for (int log2n = 20; log2n <= 28; log2n += 2) {
        const int64_t n = int64_t{1} << log2n;
        const codegen::KernelSpec spec = make_spec(c.name, c.body, c.ins, c.out, n);
        const auto kernel = cu::cuda_kernel(spec);
        std::vector<std::unique_ptr<cu::DeviceBuffer>> bufs;
        std::vector<uint64_t> ptrs;
        int64_t bytes = 0;
        for (ir::DType t : c.ins) {
          bufs.push_back(std::make_unique<cu::DeviceBuffer>(n * ir::dtype_size(t)));
          bufs.back()->zero();
          ptrs.push_back(bufs.back()->ptr());
          bytes += n * static_cast<int64_t>(ir::dtype_size(t));
        }
        bufs.push_back(std::make_unique<cu::DeviceBuffer>(n * ir::dtype_size(c.out)));
        ptrs.push_back(bufs.back()->ptr());
        bytes += n * static_cast<int64_t>(ir::dtype_size(c.out));
        // Enough launches per sample for ~2 ms of work at peak, 7 samples, the median.
        const int reps = static_cast<int>(std::clamp<int64_t>(static_cast<int64_t>(2e-3 * 4e12 / bytes), 1, 1000));
        for (int w = 0; w < 3; ++w) cu::launch_cuda_kernel(*kernel, spec, ptrs);
        cu::cuda_synchronize();
        std::vector<double> ms;
        for (int s = 0; s < 7; ++s)
          ms.push_back(cu::cuda_time_ms([&] {
                         for (int r = 0; r < reps; ++r) cu::launch_cuda_kernel(*kernel, spec, ptrs);
                       }) /
                       reps);
        std::sort(ms.begin(), ms.end());
        const double med = ms[ms.size() / 2];
        const double gbs = static_cast<double>(bytes) / (med * 1e-3) / 1e9;
        const double pct = peak > 0 ? 100 * gbs / peak : 0;
        const double pct_sheet = h200 ? 100 * gbs / 4800 : 0;
        std::printf("%-8s 2^%d  %8.3f ms  %7.0f GB/s  %5.1f %% of peak%s  (%d registers)\n", c.name, log2n, med, gbs,
                    pct, h200 ? fmt::format(", {:.1f} % of 4.8 TB/s", pct_sheet).c_str() : "", kernel->registers);
        csv += fmt::format("{},{},{},{:.4f},{:.1f},{:.1f},{:.1f},{}\n", c.name, n, bytes, med, gbs, pct, pct_sheet,
                           kernel->registers);
      }
    }
    if (argc > 1) std::ofstream(argv[1]) << csv;
  } catch (const Error& e) {
    std::fprintf(stderr, "ampfuse_cuda_bandwidth: %s\n", e.what());
    return 1;
  }
  return 0;
}
