// Environment defaults of ampfuse_tests, set before any test runs. ctest cannot hand a
// discovered test more than one variable (CMake's GoogleTest module passes ENVIRONMENT's
// list on as separate properties, so only the first arrived), so the binary sets its own:
// every test strict (AMPFUSE_STRICT=1: a kernel that does not compile is an error, never a
// silent fallback) and the build's own disk kernel cache, never the user's. A value already
// in the environment wins, so a test or a developer can still choose.
#include <cstdlib>

namespace {

[[maybe_unused]] const bool kDefaultsSet = [] {
  setenv("AMPFUSE_STRICT", "1", 0);
  setenv("AMPFUSE_CACHE_DIR", AMPFUSE_TEST_CACHE_DIR, 0);
  return true;
}();

}  // namespace
