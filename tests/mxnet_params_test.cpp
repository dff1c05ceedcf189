// MXNet .params files: the fixtures MXNet 1.9.1 wrote (tests/data/params/README.md) read as
// MXNet loads them and written back byte for byte, every version and dtype, round trips,
// and one clean error for every truncation point and for corrupt or foreign files.
#include "runtime/mxnet_params.h"

#include "runtime/npy.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

namespace ampfuse::runtime {
namespace {

using ir::DType;

std::string fixture(const std::string& name) { return std::string(AMPFUSE_TESTDATA_DIR) + "/params/" + name; }

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f) << path;
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

NDArrayList read_bytes(const std::string& bytes, const std::string& source = "mem.params") {
  std::istringstream in(bytes);
  return read_mxnet_params(in, bytes.size(), source);
}

std::string written(const NDArrayList& list) {
  std::ostringstream out;
  write_mxnet_params(out, list);
  return out.str();
}

std::string error_of(const std::string& bytes) {
  try {
    read_bytes(bytes);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Equal values, NaN equal to NaN, -0 distinct from +0.
void expect_same_values(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  for (int64_t i = 0; i < got.size(); ++i) {
    const double a = got.get_f64(i), b = want.get_f64(i);
    if (std::isnan(b)) {
      EXPECT_TRUE(std::isnan(a)) << what << "[" << i << "]";
    } else {
      EXPECT_EQ(a, b) << what << "[" << i << "]";
      EXPECT_EQ(std::signbit(a), std::signbit(b)) << what << "[" << i << "]";
    }
  }
}

struct Fixture {
  const char* file;
  std::vector<std::string> names;  // empty: an unnamed list
  std::vector<DType> dtypes;
  bool written_by_mxnet;  // false: packed by hand in a version MXNet 1.9.1 no longer writes
};

const Fixture kFixtures[] = {
    {"named.params", {"arg:fc_weight", "arg:fc_bias", "aux:bn_moving_var"}, {DType::f32, DType::f32, DType::f32}, true},
    {"unnamed.params", {}, {DType::f32, DType::f32}, true},
    {"dtypes.params",
     {"float32", "float16", "float64", "uint8", "int8", "int32", "int64", "bool", "bfloat16"},
     {DType::f32, DType::f16, DType::f64, DType::u8, DType::i8, DType::i32, DType::i64, DType::boolean, DType::bf16},
     true},
    {"np_shape.params", {"scalar", "empty", "vector"}, {DType::f32, DType::f32, DType::f32}, true},
    {"legacy_v1.params", {"arg:a", "arg:b"}, {DType::f32, DType::i32}, false},
    {"legacy_v0.params", {"arg:a", "arg:b"}, {DType::f32, DType::i32}, false},
};

TEST(MxnetParams, ReadsEveryFixtureAsMxnetLoadsIt) {
  for (const Fixture& f : kFixtures) {
    SCOPED_TRACE(f.file);
    const NDArrayList list = read_mxnet_params(fixture(f.file));
    EXPECT_EQ(list.names, f.names);
    ASSERT_EQ(list.arrays.size(), f.dtypes.size());
    for (size_t k = 0; k < list.arrays.size(); ++k) {
      EXPECT_EQ(list.arrays[k].dtype(), f.dtypes[k]) << k;
      const Tensor want = read_npy(fixture(fmt::format("expected/{}.{}.npy", f.file, k)));  // bf16 as f32
      expect_same_values(list.arrays[k], want, fmt::format("{} array {}", f.file, k));
    }
  }
}

TEST(MxnetParams, ShapesOfTheNumpySemanticsFixture) {
  const NDArrayList list = read_mxnet_params(fixture("np_shape.params"));
  ASSERT_EQ(list.arrays.size(), 3u);
  EXPECT_EQ(list.arrays[0].shape(), ir::Shape{});
  EXPECT_EQ(list.arrays[0].get_f64(0), 2.5);
  EXPECT_EQ(list.arrays[1].shape(), (ir::Shape{0, 3}));
}

TEST(MxnetParams, WritesTheBytesMxnetWrote) {
  for (const Fixture& f : kFixtures) {
    if (!f.written_by_mxnet) continue;
    SCOPED_TRACE(f.file);
    const std::string bytes = file_bytes(fixture(f.file));
    EXPECT_EQ(written(read_bytes(bytes)), bytes);
  }
}

TEST(MxnetParams, LegacyVersionsAreWrittenAsVersion2WithTheSameArrays) {
  for (const char* file : {"legacy_v0.params", "legacy_v1.params"}) {
    const NDArrayList old = read_mxnet_params(fixture(file));
    const std::string bytes = written(old);
    EXPECT_EQ(bytes.substr(24, 4), std::string("\xc9\xfa\x93\xf9", 4)) << file;  // the first array's magic
    const NDArrayList again = read_bytes(bytes);
    EXPECT_EQ(again.names, old.names);
    ASSERT_EQ(again.arrays.size(), old.arrays.size());
    for (size_t k = 0; k < old.arrays.size(); ++k) {
      EXPECT_EQ(again.arrays[k].dtype(), old.arrays[k].dtype());
      expect_same_values(again.arrays[k], old.arrays[k], fmt::format("{} array {}", file, k));
    }
  }
}

TEST(MxnetParams, RoundTripsEveryDtypeThroughAFile) {
  testing::ScopedTempDir dir;
  NDArrayList list;
  for (DType t : ir::kAllDTypes) {
    Tensor a({t, {2, 3}});
    for (int64_t i = 0; i < a.size(); ++i) a.set_f64(i, t == DType::boolean ? i % 2 : static_cast<double>(i) - 2);
    list.arrays.push_back(a);
    list.names.push_back(fmt::format("arg:{}", ir::dtype_name(t)));
  }
  write_mxnet_params(dir.file("all.params"), list);
  const NDArrayList back = read_mxnet_params(dir.file("all.params"));
  EXPECT_EQ(back.names, list.names);
  ASSERT_EQ(back.arrays.size(), list.arrays.size());
  for (size_t k = 0; k < list.arrays.size(); ++k) {
    EXPECT_EQ(back.arrays[k].dtype(), list.arrays[k].dtype());
    expect_same_values(back.arrays[k], list.arrays[k], list.names[k]);
  }
}

TEST(MxnetParams, ZeroDimensionalArraysAreWrittenInVersion3) {
  NDArrayList list;
  list.arrays = {Tensor::zeros({DType::f32, {2}}), Tensor::zeros({DType::i64, {}})};
  const std::string bytes = written(list);
  EXPECT_EQ(bytes.substr(24, 4), std::string("\xca\xfa\x93\xf9", 4));
  const NDArrayList back = read_bytes(bytes);
  EXPECT_TRUE(back.names.empty());
  ASSERT_EQ(back.arrays.size(), 2u);
  EXPECT_EQ(back.arrays[1].shape(), ir::Shape{});
  EXPECT_EQ(back.arrays[1].dtype(), DType::i64);
}

TEST(MxnetParams, WritingNeedsOneNamePerArray) {
  NDArrayList list;
  list.arrays = {Tensor::zeros({DType::f32, {2}})};
  list.names = {"a", "b"};
  std::ostringstream out;
  EXPECT_THROW(write_mxnet_params(out, list), Error);
  testing::ScopedTempDir dir;
  list.names = {"a"};
  try {
    write_mxnet_params(dir.file("no/such/dir.params"), list);
    FAIL() << "wrote into a missing directory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dir.params: cannot open for writing"), std::string::npos) << e.what();
  }
}

TEST(MxnetParams, EveryTruncationIsOneCleanError) {
  for (const Fixture& f : kFixtures) {
    const std::string bytes = file_bytes(fixture(f.file));
    for (size_t n = 0; n < bytes.size(); ++n) {
      const std::string message = error_of(bytes.substr(0, n));
      EXPECT_EQ(message.rfind("mem.params: ", 0), 0u) << f.file << " cut at " << n << ": '" << message << "'";
      EXPECT_TRUE(message.find("truncated") != std::string::npos || message.find("not an MXNet") != std::string::npos)
          << f.file << " cut at " << n << ": " << message;
    }
  }
}

TEST(MxnetParams, EveryCorruptByteIsReadOrRefusedNeverACrash) {
  // Each byte set to 0xFF and to 0x7F in turn: the reader either gives arrays or throws Error.
  for (const char* file : {"named.params", "np_shape.params", "legacy_v0.params"}) {
    const std::string bytes = file_bytes(fixture(file));
    for (size_t i = 0; i < bytes.size(); ++i) {
      for (char c : {'\xff', '\x7f'}) {
        std::string bad = bytes;
        bad[i] = c;
        try {
          read_bytes(bad);
        } catch (const Error& e) {
          EXPECT_EQ(std::string(e.what()).rfind("mem.params: ", 0), 0u) << e.what();
        }
      }
    }
  }
}

// A v2 array of one float32 from its parts, and a file around arrays.
std::string v2_array(int32_t stype = 0, int32_t dev_type = 1, int32_t flag = 0, const std::string& data = std::string(4, '\0')) {
  std::string s;
  auto put = [&](auto v) { s.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(uint32_t{0xF993FAC9});
  put(stype);
  put(int32_t{1});
  put(int64_t{1});
  put(dev_type);
  put(int32_t{0});
  put(flag);
  return s + data;
}

std::string list_file(const std::vector<std::string>& arrays, const std::vector<std::string>& names) {
  std::string s;
  auto put = [&](uint64_t v) { s.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(0x112);
  put(0);
  put(arrays.size());
  for (const std::string& a : arrays) s += a;
  put(names.size());
  for (const std::string& n : names) {
    put(n.size());
    s += n;
  }
  return s;
}

void expect_error(const std::string& bytes, const std::string& part) {
  const std::string message = error_of(bytes);
  EXPECT_NE(message.find(part), std::string::npos) << "got: '" << message << "'\nexpected: " << part;
}

TEST(MxnetParams, CorruptAndForeignFilesAreRefusedWithTheReason) {
  const std::string ok = list_file({v2_array()}, {"w"});
  ASSERT_EQ(read_bytes(ok).arrays.size(), 1u);
  expect_error("", "mem.params: not an MXNet .params file");
  expect_error(file_bytes(fixture("expected/named.params.0.npy")), "not an MXNet .params file");
  expect_error("{\"nodes\": []}\n", "not an MXNet .params file");
  expect_error(list_file({v2_array(1)}, {"w"}), "array 0 of 1: stored as row_sparse; ampfuse reads dense arrays only");
  expect_error(list_file({v2_array(2)}, {"w"}), "stored as csr");
  expect_error(list_file({v2_array(7)}, {"w"}), "corrupt: unknown storage type 7");
  expect_error(list_file({v2_array(0, 9)}, {"w"}), "corrupt: unknown device type 9");
  expect_error(list_file({v2_array(0, 1, 8, std::string(2, '\0'))}, {"w"}), "dtype int16 (type flag 8) is not supported");
  expect_error(list_file({v2_array(0, 1, 11, std::string(8, '\0'))}, {"w"}), "dtype uint64 (type flag 11)");
  expect_error(list_file({v2_array(0, 1, 13)}, {"w"}), "corrupt: unknown type flag 13");
  expect_error(list_file({v2_array(), v2_array()}, {"w"}), "corrupt: 1 names for 2 arrays");
  expect_error(ok + "x", "corrupt: 1 bytes after the last name");
  expect_error(list_file({std::string("\x01\x02\x03\x04", 4)}, {}), "neither a format magic (0xF993FAC8-0xF993FACA) nor a rank");
  // An array saved without data: rank 0 in version 2, rank -1 in version 3.
  expect_error(list_file({std::string("\xc9\xfa\x93\xf9\0\0\0\0\0\0\0\0", 12)}, {"w"}), "array 0 of 1: saved without data");
  expect_error(list_file({std::string("\xca\xfa\x93\xf9\0\0\0\0\xff\xff\xff\xff", 12)}, {"w"}), "saved without data");
  // Counts and sizes larger than the file are refused before anything is allocated.
  std::string huge_count = ok;
  huge_count[16] = '\x7f';
  expect_error(huge_count, "arrays announced in");
  std::string huge_rank = ok;
  huge_rank[24 + 8 + 3] = '\x7f';
  expect_error(huge_rank, "truncated: a shape of rank");
  std::string huge_extent = ok;
  huge_extent[24 + 12 + 6] = '\x7f';
  expect_error(huge_extent, "truncated: 35747322042253313 elements of 4 bytes announced");
  std::string overflow = list_file({v2_array(0, 1, 0, "")}, {"w"});  // rank 2, extents 2^62 and 4
  overflow.insert(24 + 12, std::string("\0\0\0\0\0\0\0\x40", 8));
  overflow[24 + 8] = 2;
  overflow[24 + 20] = 4;
  expect_error(overflow, "has more than 2^63 elements");
  std::string long_name = ok;
  long_name[ok.size() - 1 - 8] = '\x7f';
  expect_error(long_name, "name 0 of 1: truncated: a name of");
}

TEST(MxnetParams, ReadingAPathNamesIt) {
  testing::ScopedTempDir dir;
  try {
    read_mxnet_params(dir.file("missing.params"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.params: no such file"), std::string::npos) << e.what();
  }
  try {
    read_mxnet_params(dir.path().string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(": not a regular file (a directory)"), std::string::npos) << e.what();
  }
  try {
    read_mxnet_params(fixture("README.md"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), fixture("README.md") +
                                         ": not an MXNet .params file (it does not start with the NDArray list magic 0x112)");
  }
}

TEST(MxnetParams, ParamsByNameDropsArgAndAuxPrefixes) {
  const NDArrayList list = read_mxnet_params(fixture("named.params"));
  const std::map<std::string, Tensor> by_name = params_by_name(list, "named.params");
  ASSERT_EQ(by_name.size(), 3u);
  EXPECT_TRUE(by_name.count("fc_weight") && by_name.count("fc_bias") && by_name.count("bn_moving_var"));
  EXPECT_EQ(by_name.at("fc_weight").shape(), (ir::Shape{2, 3}));
}

TEST(MxnetParams, ParamsByNameRefusesUnnamedListsAndTwiceNamedVariables) {
  const NDArrayList unnamed = read_mxnet_params(fixture("unnamed.params"));
  try {
    params_by_name(unnamed, "u.params");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "u.params: an unnamed list of 2 arrays (mx.nd.save of a list); parameters need "
                                     "names (save a dict)");
  }
  NDArrayList twice;
  twice.arrays = {Tensor::zeros({DType::f32, {1}}), Tensor::zeros({DType::f32, {1}})};
  twice.names = {"arg:w", "aux:w"};
  try {
    params_by_name(twice, "t.params");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "t.params: arrays 'arg:w' and 'aux:w' both name the variable 'w'");
  }
}

}  // namespace
}  // namespace ampfuse::runtime
