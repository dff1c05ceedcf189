// .npy reading and writing: numpy's byte layout, every dtype, and the errors.
#include "runtime/npy.h"

#include "ir/lowp.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>

namespace ampfuse::runtime {
namespace {

using ampfuse::testing::ScopedTempDir;
using ir::DType;

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// A file as numpy lays it out: magic, version, little-endian header length, the dict padded
// with spaces and a newline to a multiple of 64 bytes in all, then the data.
std::string npy_file(const std::string& dict, const std::string& data, int major = 1) {
  const size_t prefix = major == 1 ? 10 : 12;
  const size_t total = (prefix + dict.size() + 1 + 63) / 64 * 64;
  const std::string header = dict + std::string(total - prefix - dict.size() - 1, ' ') + "\n";
  std::string out = std::string("\x93NUMPY", 6) + static_cast<char>(major) + '\0';
  for (size_t i = 0; i < prefix - 8; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  return out + header + data;
}

template <class T>
std::string bytes_of(std::initializer_list<T> values) {
  std::string out;
  for (T v : values) out.append(reinterpret_cast<const char*>(&v), sizeof v);
  return out;
}

// np.save("x.npy", np.array([[1, -2, 3], [4, 5, -2147483648]], dtype=np.int32)), byte by byte.
const std::string kInt32File =
    std::string("\x93NUMPY\x01\x00\x76\x00", 10) +
    "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }" + std::string(58, ' ') + "\n" +
    std::string("\x01\x00\x00\x00\xfe\xff\xff\xff\x03\x00\x00\x00"
                "\x04\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x80",
                24);

TEST(NpyTest, ReadsNumpysByteLayout) {
  ScopedTempDir dir;
  write_file(dir.file("a.npy"), kInt32File);
  const Tensor t = read_npy(dir.file("a.npy"));
  ASSERT_EQ(t.dtype(), DType::i32);
  ASSERT_EQ(t.shape(), (ir::Shape{2, 3}));
  const int32_t expected[] = {1, -2, 3, 4, 5, std::numeric_limits<int32_t>::min()};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(t.data<int32_t>()[i], expected[i]) << i;
}

TEST(NpyTest, WritesNumpysByteLayout) {
  ScopedTempDir dir;
  Tensor t({DType::i32, {2, 3}});
  const int32_t values[] = {1, -2, 3, 4, 5, std::numeric_limits<int32_t>::min()};
  std::memcpy(t.raw(), values, sizeof values);
  write_npy(dir.file("a.npy"), t);
  EXPECT_EQ(read_file(dir.file("a.npy")), kInt32File);
}

TEST(NpyTest, WritesScalarAndVectorShapesAsPythonTuples) {
  ScopedTempDir dir;
  Tensor scalar({DType::f64, {}});
  scalar.set_f64(0, 2.5);
  write_npy(dir.file("s.npy"), scalar);
  EXPECT_EQ(read_file(dir.file("s.npy")),
            npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (), }", bytes_of<double>({2.5})));

  Tensor vec = Tensor::zeros({DType::u8, {5}});
  vec.data<uint8_t>()[4] = 255;
  write_npy(dir.file("v.npy"), vec);
  EXPECT_EQ(read_file(dir.file("v.npy")),
            npy_file("{'descr': '|u1', 'fortran_order': False, 'shape': (5,), }", std::string("\0\0\0\0\xff", 5)));
}

// Values that stress each type: signed zero, infinities, NaN, subnormals, extremes.
Tensor sample(DType t) {
  Tensor x({t, {2, 4}});
  const double floats[] = {-0.0, 1.0 / 3, INFINITY, -INFINITY, NAN, 1e-45, -65504, 6e-8};
  for (int i = 0; i < 8; ++i) x.set_f64(i, ir::is_float(t) ? floats[i] : i * 37 - 100);
  if (t == DType::i64) x.data<int64_t>()[0] = std::numeric_limits<int64_t>::min();
  if (t == DType::f64) x.data<double>()[5] = 4.9406564584124654e-324;  // the smallest subnormal
  return x;
}

TEST(NpyTest, EveryDTypeRoundTripsBitExactly) {
  ScopedTempDir dir;
  for (DType t : ir::kAllDTypes) {
    if (t == DType::bf16) continue;  // no numpy type: see the next test
    SCOPED_TRACE(std::string(ir::dtype_name(t)));
    const Tensor x = sample(t);
    write_npy(dir.file("x.npy"), x);
    const Tensor y = read_npy(dir.file("x.npy"));
    ASSERT_EQ(y.type(), x.type());
    EXPECT_EQ(std::memcmp(x.raw(), y.raw(), x.bytes()), 0);
  }
}

TEST(NpyTest, Bf16IsWrittenAsExactF32) {
  ScopedTempDir dir;
  const Tensor x = sample(DType::bf16);
  write_npy(dir.file("x.npy"), x);
  EXPECT_NE(read_file(dir.file("x.npy")).find("'descr': '<f4'"), std::string::npos);
  const Tensor y = read_npy(dir.file("x.npy"));
  ASSERT_EQ(y.type(), (ir::TensorType{DType::f32, {2, 4}}));
  for (int i = 0; i < 8; ++i) {
    const uint16_t bits = x.data<uint16_t>()[i];
    // A bf16 is the top half of the f32 with the same value.
    EXPECT_EQ(std::bit_cast<uint32_t>(y.data<float>()[i]), static_cast<uint32_t>(bits) << 16) << i;
  }
}

TEST(NpyTest, EmptyArrayHasNoData) {
  ScopedTempDir dir;
  write_npy(dir.file("e.npy"), Tensor({DType::f32, {0, 3}}));
  const Tensor y = read_npy(dir.file("e.npy"));
  EXPECT_EQ(y.type(), (ir::TensorType{DType::f32, {0, 3}}));
  EXPECT_EQ(read_file(dir.file("e.npy")).size(), 128u);  // the header alone
}

TEST(NpyTest, ReadsVersion2And3Headers) {
  ScopedTempDir dir;
  for (int major : {2, 3}) {
    write_file(dir.file("v.npy"),
               npy_file("{'descr': '<f2', 'fortran_order': False, 'shape': (2,), }",
                        bytes_of<uint16_t>({0x3C00, 0xC000}), major));
    const Tensor t = read_npy(dir.file("v.npy"));
    ASSERT_EQ(t.type(), (ir::TensorType{DType::f16, {2}}));
    EXPECT_EQ(t.get_f64(0), 1.0);
    EXPECT_EQ(t.get_f64(1), -2.0);
  }
}

TEST(NpyTest, AcceptsOtherSpellingsOfTheHeader) {
  ScopedTempDir dir;
  // Key order, double quotes, Python 2 longs, no trailing comma, '=' and '<' byte orders.
  const std::pair<std::string, ir::TensorType> cases[] = {
      {"{'shape': (1L, 2L), 'descr': '=i8', 'fortran_order': False}", {DType::i64, {1, 2}}},
      {R"({"descr": "<i1", "fortran_order": False, "shape": (2, 1)})", {DType::i8, {2, 1}}},
      {"{'descr': '|b1', 'fortran_order': True, 'shape': (2,), }", {DType::boolean, {2}}},  // 1-d: same layout
  };
  for (const auto& [dict, type] : cases) {
    SCOPED_TRACE(dict);
    const size_t bytes = static_cast<size_t>(ir::num_elements(type.shape)) * ir::dtype_size(type.dtype);
    write_file(dir.file("h.npy"), npy_file(dict, std::string(bytes, '\1')));
    EXPECT_EQ(read_npy(dir.file("h.npy")).type(), type);
  }
}

TEST(NpyTest, NonZeroBoolBytesReadAsTrue) {
  ScopedTempDir dir;
  write_file(dir.file("b.npy"),
             npy_file("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", std::string("\0\x02\xff", 3)));
  const Tensor t = read_npy(dir.file("b.npy"));
  EXPECT_EQ(t.data<uint8_t>()[0], 0);
  EXPECT_EQ(t.data<uint8_t>()[1], 1);
  EXPECT_EQ(t.data<uint8_t>()[2], 1);
}

TEST(NpyTest, RejectsWhatItCannotRepresentNamingTheFile) {
  ScopedTempDir dir;
  const std::string path = dir.file("bad.npy");
  auto read_header = [&](const std::string& dict) {
    write_file(path, npy_file(dict, std::string(64, '\0')));
    return read_npy(path);
  };
  EXPECT_ERROR(read_header("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }"),
               path + ": big-endian data ('>f4')");
  EXPECT_ERROR(read_header("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }"), "Fortran-ordered");
  EXPECT_ERROR(read_header("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }"), "unsupported dtype '<c8'");
  EXPECT_ERROR(read_header("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }"), "unsupported dtype '|O'");
  EXPECT_ERROR(read_header("{'descr': '<u4', 'fortran_order': False, 'shape': (2,), }"), "unsupported dtype '<u4'");
  EXPECT_ERROR(read_header("{'descr': '|f4', 'fortran_order': False, 'shape': (2,), }"), "only for one-byte types");
  EXPECT_ERROR(read_header("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }"), "structured arrays");
  EXPECT_ERROR(read_header("{'descr': '<f4', 'shape': (2,), }"), "no 'fortran_order' key");
  EXPECT_ERROR(read_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}"), "unexpected key 'x'");
  EXPECT_ERROR(read_header("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }"), "non-negative integers");
  EXPECT_ERROR(read_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2,"), "malformed header");
  EXPECT_ERROR(read_header("{'descr': '<f4', 'fortran_order': False, 'shape': (3037000500, 3037000500), }"),
               "more than 2^63 elements");
  // Found by the fuzzer (fuzz/corpus/npy/regression_descr_line_break.npy): a descr holding a
  // line break, which the message printed raw, so the error was two lines.
  EXPECT_ERROR(read_header("{'descr': '|b\r\xff" "2', 'fortran_order': False, 'shape': (2,), }"),
               "unsupported dtype '|b\\x0d\\xff2'");
  EXPECT_ERROR(read_header("{'descr': '\rf4', 'fortran_order': False, 'shape': (2,), }"), "(byte order '\\x0d')");
}

TEST(NpyTest, RejectsCorruptFilesNamingTheFile) {
  ScopedTempDir dir;
  const std::string path = dir.file("bad.npy");
  auto read_bytes = [&](const std::string& bytes) {
    write_file(path, bytes);
    return read_npy(path);
  };
  const std::string f4x4 = "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }";
  EXPECT_ERROR(read_bytes(npy_file(f4x4, std::string(15, '\0'))),
               path + ": truncated data: 4 elements of 4 bytes announced, 15 bytes present");
  EXPECT_ERROR(read_bytes(kInt32File.substr(0, 60)), "truncated header: 118 bytes announced, 50 present");
  EXPECT_ERROR(read_bytes("\x93NUMP"), "not a .npy file");
  EXPECT_ERROR(read_bytes("PK\x03\x04 a zip file, perhaps an .npz"), path + ": not a .npy file");
  std::string v4 = kInt32File;
  v4[6] = 4;
  EXPECT_ERROR(read_bytes(v4), "unsupported .npy format version 4.0");
  EXPECT_ERROR(read_npy(dir.file("missing.npy")), dir.file("missing.npy") + ": no such file");
  EXPECT_ERROR(read_npy(dir.path().string()), dir.path().string() + ": not a regular file (a directory)");
  EXPECT_ERROR(read_npy("/dev/null"), "/dev/null: not a regular file (a device)");
  // More data than the header declares: a header gone wrong, not a file to read in part.
  EXPECT_ERROR(read_bytes(npy_file(f4x4, std::string(20, '\0'))),
               path + ": 4 bytes after the data: the header declares 4 elements of 4 bytes (16 bytes), the file holds 20");
}

TEST(NpyTest, WriteFailureNamesTheFile) {
  ScopedTempDir dir;
  const std::string path = dir.file("no_such_dir/x.npy");
  EXPECT_ERROR(write_npy(path, Tensor::zeros({DType::f32, {2}})), path + ": cannot open for writing");
}

}  // namespace
}  // namespace ampfuse::runtime
