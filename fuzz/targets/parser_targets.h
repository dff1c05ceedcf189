// Fuzz targets for the four parsers of files users hand to ampfuse: the MXNet JSON
// importer, the textual IR parser, .npy and MXNet .params readers.
//
// A target parses one input. Rejecting it with ampfuse::Error is correct behaviour as long
// as the message is one non-empty line (what the CLI prints after "error: "); any other
// exception type is a finding. Crashes, sanitizer reports and hangs are findings of the
// driver that runs the target: libFuzzer (`make fuzz`, fuzz/CMakeLists.txt) or the replay
// test in ctest (tests/parser_fuzz_test.cpp), which shares these sources.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace ampfuse::fuzz {

// What a target made of one input: accepted, rejected properly, or a finding, what is wrong
// ("an exception of type St12out_of_range: ...", "a multi-line error: ...").
struct Verdict {
  bool accepted = false;
  std::optional<std::string> finding;
};
using ParserTarget = Verdict (*)(std::span<const uint8_t> input);

Verdict fuzz_mxnet_json(std::span<const uint8_t> input);
Verdict fuzz_text_ir(std::span<const uint8_t> input);
Verdict fuzz_npy(std::span<const uint8_t> input);
Verdict fuzz_mxnet_params(std::span<const uint8_t> input);

struct NamedTarget {
  std::string_view name;  // also the folder of its seed corpus, fuzz/corpus/<name>/
  ParserTarget run;
};
inline constexpr NamedTarget kParserTargets[] = {
    {"mxnet_json", fuzz_mxnet_json},
    {"text_ir", fuzz_text_ir},
    {"npy", fuzz_npy},
    {"mxnet_params", fuzz_mxnet_params},
};

}  // namespace ampfuse::fuzz
