// libFuzzer's entry for one parser target (fuzz/CMakeLists.txt compiles this file once per
// target with AMPFUSE_FUZZ_TARGET naming it): a finding is printed and aborts, so libFuzzer
// saves the input as a crash.
#include "fuzz/targets/parser_targets.h"

#include <cstdio>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const ampfuse::fuzz::Verdict v = ampfuse::fuzz::AMPFUSE_FUZZ_TARGET({data, size});
  if (v.finding) {
    std::fprintf(stderr, "ampfuse fuzz finding: %s\n", v.finding->c_str());
    std::abort();
  }
  return 0;
}
