// The parser fuzz targets (fuzz/targets/parser_targets.h) replayed in ctest: each target over
// its seed corpus (fuzz/corpus/<target>/) and a few thousand deterministic mutations of it,
// so the sanitizer build checks the parsers for memory errors and undefined behaviour on
// every `make test`. The long coverage-guided runs are libFuzzer's (`make fuzz`). A finding
// prints the target, the seed file and the mutation, and saves the input in the working
// directory as parser_fuzz_finding_<target>_<n> to replay with the libFuzzer binary.
#include "fuzz/targets/parser_targets.h"
#include "runtime/random.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace ampfuse::fuzz {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

// Mutations per target, spread over its seeds (at least kMinPerSeed each).
constexpr int kMutationsPerTarget = 3000;
constexpr int kMinPerSeed = 8;

struct Seed {
  std::string name;
  Bytes bytes;
};

std::vector<Seed> corpus(std::string_view target) {
  std::vector<Seed> seeds;
  const fs::path dir = fs::path(AMPFUSE_FUZZ_CORPUS_DIR) / target;
  if (!fs::is_directory(dir)) return seeds;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    std::ifstream f(e.path(), std::ios::binary);
    seeds.push_back({e.path().filename().string(), Bytes(std::istreambuf_iterator<char>(f), {})});
  }
  // Directory order differs between file systems; the mutations must not.
  std::sort(seeds.begin(), seeds.end(), [](const Seed& a, const Seed& b) { return a.name < b.name; });
  return seeds;
}

// Byte mutations of the kinds that find parser bugs: bit flips, boundary bytes and integers,
// structural characters, deleted, duplicated and truncated ranges, numbers made huge or
// negative, and splices of two seeds.
class Mutator {
 public:
  Mutator(uint64_t seed, const std::vector<Seed>& all) : rng_(seed), all_(all) {}

  Bytes mutate(Bytes b) {
    for (int k = 1 + pick(3); k > 0; --k) once(b);
    return b;
  }

 private:
  size_t pick(size_t n) { return n ? static_cast<size_t>(rng_.next() % n) : 0; }

  void once(Bytes& b) {
    static constexpr uint8_t kBytes[] = {0,   0xFF, 0x7F, 0x80, '0', '9', '-', '"', '[', ']',
                                         '{', '}',  ',',  ':',  '%', '(', ')', '\\', '\n', 'e'};
    static constexpr uint32_t kWords[] = {0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFF, 0x10000, 0xF993FAC9};
    static constexpr const char* kNumbers[] = {"-1", "0", "99999999999999999999", "4294967296", "-9223372036854775808",
                                               "1e999", "nan", "2147483648"};
    const size_t at = pick(b.size() + 1);
    switch (pick(9)) {
      case 0:
        if (!b.empty()) b[pick(b.size())] ^= static_cast<uint8_t>(1u << pick(8));
        return;
      case 1:
        if (!b.empty()) b[pick(b.size())] = kBytes[pick(std::size(kBytes))];
        return;
      case 2: {  // delete a range
        const size_t n = std::min(b.size() - std::min(at, b.size()), 1 + pick(16));
        b.erase(b.begin() + static_cast<std::ptrdiff_t>(at), b.begin() + static_cast<std::ptrdiff_t>(at + n));
        return;
      }
      case 3: {  // duplicate a range in place
        if (b.empty()) return;
        const size_t from = pick(b.size()), n = std::min(b.size() - from, 1 + pick(64));
        const Bytes piece(b.begin() + static_cast<std::ptrdiff_t>(from),
                          b.begin() + static_cast<std::ptrdiff_t>(from + n));
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), piece.begin(), piece.end());
        return;
      }
      case 4: b.resize(pick(b.size() + 1)); return;  // truncate
      case 5: {  // a boundary 32-bit integer, little-endian (lengths and counts of binary formats)
        const uint32_t w = kWords[pick(std::size(kWords))];
        for (size_t i = 0; i < 4 && at + i < b.size(); ++i) b[at + i] = static_cast<uint8_t>(w >> (8 * i));
        return;
      }
      case 6: {  // a digit run replaced by a boundary number (extents, indices, attributes)
        size_t i = at;
        while (i < b.size() && !(b[i] >= '0' && b[i] <= '9')) ++i;
        if (i == b.size()) return;
        size_t j = i;
        while (j < b.size() && b[j] >= '0' && b[j] <= '9') ++j;
        const std::string n = kNumbers[pick(std::size(kNumbers))];
        b.erase(b.begin() + static_cast<std::ptrdiff_t>(i), b.begin() + static_cast<std::ptrdiff_t>(j));
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(i), n.begin(), n.end());
        return;
      }
      case 7: {  // this seed's head on another seed's tail
        const Bytes& other = all_[pick(all_.size())].bytes;
        const size_t from = pick(other.size() + 1);
        b.resize(std::min(at, b.size()));
        b.insert(b.end(), other.begin() + static_cast<std::ptrdiff_t>(from), other.end());
        return;
      }
      default: b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), kBytes[pick(std::size(kBytes))]); return;
    }
  }

  runtime::SplitMix64 rng_;
  const std::vector<Seed>& all_;
};

class ParserFuzz : public testing::TestWithParam<NamedTarget> {};

TEST_P(ParserFuzz, SeedsAndMutationsAreParsedOrRejectedInOneLine) {
  const NamedTarget target = GetParam();
  const std::vector<Seed> seeds = corpus(target.name);
  ASSERT_GE(seeds.size(), 5u) << "fuzz/corpus/" << target.name << " holds too few seeds";
  int findings = 0, runs = 0;
  auto run = [&](const Seed& seed, int mutation, const Bytes& input) {
    ++runs;
    const std::optional<std::string> f = target.run(input).finding;
    if (!f) return;
    const std::string saved = "parser_fuzz_finding_" + std::string(target.name) + "_" + std::to_string(findings);
    std::ofstream(saved, std::ios::binary).write(reinterpret_cast<const char*>(input.data()),
                                                  static_cast<std::streamsize>(input.size()));
    if (++findings <= 5)
      ADD_FAILURE() << target.name << ": seed " << seed.name << ", mutation " << mutation << " (saved as " << saved
                    << "): " << *f;
  };
  const int per_seed = std::max(kMinPerSeed, kMutationsPerTarget / static_cast<int>(seeds.size()));
  for (size_t s = 0; s < seeds.size(); ++s) {
    run(seeds[s], -1, seeds[s].bytes);
    Mutator m(s + 1, seeds);
    for (int k = 0; k < per_seed; ++k) run(seeds[s], k, m.mutate(seeds[s].bytes));
  }
  EXPECT_EQ(findings, 0) << "findings in " << runs << " inputs";
  RecordProperty("inputs", runs);
}

// The seed files are real files, accepted, so that the mutations start past the first
// checks; those named err_* (the importer's error cases, a big-endian .npy) or
// regression_* (inputs the fuzzers found) must be rejected, in one line.
TEST_P(ParserFuzz, SeedsAreAcceptedOrNamedAsErrors) {
  const NamedTarget target = GetParam();
  const std::vector<Seed> seeds = corpus(target.name);
  ASSERT_FALSE(seeds.empty());
  int accepted = 0;
  for (const Seed& s : seeds) {
    const Verdict v = target.run(s.bytes);
    const bool error_case = s.name.starts_with("err_") || s.name.starts_with("regression_");
    EXPECT_EQ(v.accepted, !error_case) << target.name << "/" << s.name << (v.finding ? ": " + *v.finding : "");
    accepted += v.accepted;
  }
  EXPECT_GE(2 * accepted, static_cast<int>(seeds.size()) / 2) << "the corpus is mostly error cases";
}

INSTANTIATE_TEST_SUITE_P(Targets, ParserFuzz, testing::ValuesIn(kParserTargets),
                         [](const testing::TestParamInfo<NamedTarget>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace ampfuse::fuzz
