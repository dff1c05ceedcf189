#include "runtime/mxnet_params.h"

#include "ir/error.h"
#include "ir/input_file.h"
#include "ir/mxnet_type_flags.h"

#include <bit>
#include <filesystem>
#include <fstream>
#include <optional>

namespace ampfuse::runtime {

static_assert(std::endian::native == std::endian::little, ".params I/O assumes a little-endian host");

namespace {

// The format, from MXNet's NDArray::Save and NDArray::Load (src/ndarray/ndarray.cc), every
// number little-endian:
//   file   uint64 0x112 (kMXAPINDArrayListMagic), uint64 reserved (0),
//          uint64 n, n arrays, uint64 m (0 or n), m names as uint64 length + bytes
//   array  v2/v3: uint32 magic, int32 storage type, shape, context, int32 type flag, data
//          v1:    uint32 magic, shape (as v2), context, type flag, data
//          v0:    shape with uint32 extents, whose uint32 rank stands where the magic is
//   shape  v1-v3: int32 rank, rank x int64 extents
//   context int32 device type (1 cpu, 2 gpu, 3 cpu_pinned, 5 cpu_shared), int32 device id
// An array saved without data ("none": rank 0 before v3, rank -1 or an extent -1 in v3)
// ends after its shape. Sparse arrays (storage types 1, 2) carry a storage shape before the
// shape and index arrays after the data.
constexpr uint64_t kListMagic = 0x112;
constexpr uint32_t kV1Magic = 0xF993FAC8;
constexpr uint32_t kV2Magic = 0xF993FAC9;
constexpr uint32_t kV3Magic = 0xF993FACA;
constexpr int32_t kDefaultStorage = 0;
constexpr int32_t kCpuDevice = 1;
// A legacy (v0) array's first word is its rank; a larger word is neither that nor a magic.
constexpr uint32_t kMaxLegacyRank = 32;

// Bytes from a stream that holds `size` of them: every length is checked against what is
// left before anything is read or allocated.
class Reader {
 public:
  Reader(std::istream& in, uint64_t size) : in_(in), left_(size) {}

  uint64_t left() const { return left_; }

  template <class T>
  T read(const char* what) {
    T v;
    bytes(&v, sizeof v, what);
    return v;
  }

  void bytes(void* out, uint64_t n, const char* what) {
    if (n > left_) fail("truncated: {} needs {} bytes, {} are left", what, n, left_);
    in_.read(static_cast<char*>(out), static_cast<std::streamsize>(n));
    if (static_cast<uint64_t>(in_.gcount()) != n) fail("read error in {}", what);
    left_ -= n;
  }

 private:
  std::istream& in_;
  uint64_t left_;
};

std::string_view storage_name(int32_t stype) {
  switch (stype) {
    case 1: return "row_sparse";
    case 2: return "csr";
    default: return "";
  }
}

// mshadow's type flags that MXNet has and ampfuse does not.
std::string_view unsupported_type_name(int32_t flag) {
  switch (flag) {
    case 8: return "int16";
    case 9: return "uint16";
    case 10: return "uint32";
    case 11: return "uint64";
    default: return "";
  }
}

// nullopt: the array was saved without data (MXNet's "none" array).
std::optional<Shape> read_shape(Reader& r, uint32_t version, uint32_t first_word) {
  if (version == 0) {  // v0: the first word was the rank; uint32 extents
    if (first_word == 0) return std::nullopt;
    Shape s(first_word);
    for (int64_t& d : s) d = r.read<uint32_t>("an extent");
    return s;
  }
  const int32_t rank = r.read<int32_t>("the rank");
  if (version == 3 && rank == -1) return std::nullopt;  // numpy semantics: unknown shape
  if (version != 3 && rank == 0) return std::nullopt;   // legacy semantics: no shape
  if (rank < 0) fail("corrupt: rank {}", rank);
  if (static_cast<uint64_t>(rank) > r.left() / sizeof(int64_t))
    fail("truncated: a shape of rank {} needs {} bytes, {} are left", rank, uint64_t(rank) * 8, r.left());
  Shape s(static_cast<size_t>(rank));
  bool known = true;
  for (int64_t& d : s) {
    d = r.read<int64_t>("an extent");
    if (d == -1 && version == 3) known = false;
    else if (d < 0) fail("corrupt: negative extent {}", d);
  }
  if (!known) return std::nullopt;
  return s;
}

Tensor read_array(Reader& r) {
  const uint32_t magic = r.read<uint32_t>("the array header");
  uint32_t version = 0;
  if (magic == kV3Magic) version = 3;
  else if (magic == kV2Magic) version = 2;
  else if (magic == kV1Magic) version = 1;
  else if (magic > kMaxLegacyRank)
    fail("corrupt: the array starts with 0x{:08X}, neither a format magic (0xF993FAC8-0xF993FACA) nor a rank", magic);

  if (version >= 2) {
    const int32_t stype = r.read<int32_t>("the storage type");
    if (stype != kDefaultStorage) {
      if (!storage_name(stype).empty())
        fail("stored as {}; ampfuse reads dense arrays only (save it with .tostype('default'))", storage_name(stype));
      fail("corrupt: unknown storage type {}", stype);
    }
  }
  const std::optional<Shape> shape = read_shape(r, version, magic);
  if (!shape) fail("saved without data (an uninitialized NDArray with no shape)");
  const int32_t dev_type = r.read<int32_t>("the device type");
  r.read<int32_t>("the device id");
  if (dev_type != 1 && dev_type != 2 && dev_type != 3 && dev_type != 5)
    fail("corrupt: unknown device type {}", dev_type);
  const int32_t flag = r.read<int32_t>("the type flag");
  const std::optional<DType> dtype = ir::dtype_from_mxnet_flag(flag);
  if (!dtype) {
    if (!unsupported_type_name(flag).empty())
      fail("dtype {} (type flag {}) is not supported by ampfuse", unsupported_type_name(flag), flag);
    fail("corrupt: unknown type flag {}", flag);
  }
  const int64_t count = ir::num_elements(*shape);  // throws on overflow
  const size_t item = ir::dtype_size(*dtype);
  if (static_cast<uint64_t>(count) > r.left() / item)
    fail("truncated: {} elements of {} bytes announced, {} bytes are left", count, item, r.left());
  Tensor t(TensorType{*dtype, *shape});
  r.bytes(t.raw(), t.bytes(), "the data");
  if (*dtype == DType::boolean)  // the Tensor contract is 0/1; MXNet reads any non-zero as true
    for (int64_t i = 0; i < t.size(); ++i) t.data<uint8_t>()[i] = t.data<uint8_t>()[i] != 0;
  return t;
}

NDArrayList read_list(Reader& r) {
  if (r.left() < sizeof(uint64_t) || r.read<uint64_t>("the header") != kListMagic)
    fail("not an MXNet .params file (it does not start with the NDArray list magic 0x112)");
  r.read<uint64_t>("the header");  // reserved; MXNet does not check it either
  const uint64_t n = r.read<uint64_t>("the array count");
  // The smallest array (a v0 one saved without data) takes 4 bytes.
  if (n > r.left() / 4) fail("truncated or corrupt: {} arrays announced in the {} bytes left", n, r.left());
  NDArrayList list;
  for (uint64_t k = 0; k < n; ++k)
    list.arrays.push_back(with_context(fmt::format("array {} of {}", k, n), [&] { return read_array(r); }));
  const uint64_t m = r.read<uint64_t>("the name count");
  if (m != 0 && m != n) fail("corrupt: {} names for {} arrays", m, n);
  for (uint64_t k = 0; k < m; ++k) {
    with_context(fmt::format("name {} of {}", k, m), [&] {
      const uint64_t len = r.read<uint64_t>("the name length");
      if (len > r.left()) fail("truncated: a name of {} bytes, {} are left", len, r.left());
      std::string name(len, '\0');
      r.bytes(name.data(), len, "the name");
      list.names.push_back(std::move(name));
    });
  }
  if (r.left() != 0) fail("corrupt: {} bytes after the last name", r.left());
  return list;
}

template <class T>
void put(std::ostream& out, T v) {
  out.write(reinterpret_cast<const char*>(&v), sizeof v);
}

}  // namespace

NDArrayList read_mxnet_params(std::istream& in, uint64_t size, const std::string& source) {
  return with_context(source, [&] {
    Reader r(in, size);
    return read_list(r);
  });
}

NDArrayList read_mxnet_params(const std::string& path) {
  uint64_t size = 0;
  std::ifstream in = ir::open_regular_file(path, &size);
  return read_mxnet_params(in, size, path);
}

void write_mxnet_params(std::ostream& out, const NDArrayList& list) {
  if (!list.names.empty() && list.names.size() != list.arrays.size())
    fail("{} names for {} arrays", list.names.size(), list.arrays.size());
  // Version 2 has no 0-d or zero-size arrays (rank 0 and extent 0 mean "unknown" there).
  bool numpy_shapes = false;
  for (const Tensor& t : list.arrays)
    numpy_shapes = numpy_shapes || t.shape().empty() || t.size() == 0;
  put<uint64_t>(out, kListMagic);
  put<uint64_t>(out, 0);
  put<uint64_t>(out, list.arrays.size());
  for (const Tensor& a : list.arrays) {
    const Tensor t = a.contiguous();
    put<uint32_t>(out, numpy_shapes ? kV3Magic : kV2Magic);
    put<int32_t>(out, kDefaultStorage);
    put<int32_t>(out, static_cast<int32_t>(t.shape().size()));
    for (int64_t d : t.shape()) put<int64_t>(out, d);
    put<int32_t>(out, kCpuDevice);
    put<int32_t>(out, 0);
    put<int32_t>(out, ir::mxnet_flag_of(t.dtype()));
    if (t.bytes()) out.write(static_cast<const char*>(t.raw()), static_cast<std::streamsize>(t.bytes()));
  }
  put<uint64_t>(out, list.names.size());
  for (const std::string& name : list.names) {
    put<uint64_t>(out, name.size());
    out.write(name.data(), static_cast<std::streamsize>(name.size()));
  }
}

void write_mxnet_params(const std::string& path, const NDArrayList& list) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail("{}: cannot open for writing", path);
  with_context(path, [&] { write_mxnet_params(f, list); });
  f.close();
  if (!f) fail("{}: write failed", path);
}

std::string param_variable_name(const std::string& array_name) {
  if (array_name.starts_with("arg:") || array_name.starts_with("aux:")) return array_name.substr(4);
  return array_name;
}

std::map<std::string, Tensor> params_by_name(const NDArrayList& list, const std::string& source) {
  if (list.names.empty() && !list.arrays.empty())
    fail("{}: an unnamed list of {} arrays (mx.nd.save of a list); parameters need names (save a dict)", source,
         list.arrays.size());
  std::map<std::string, Tensor> out;
  std::map<std::string, std::string> spelled;  // variable name -> the name in the file
  for (size_t k = 0; k < list.arrays.size(); ++k) {
    const std::string& full = list.names[k];
    const std::string name = param_variable_name(full);
    if (name.empty()) fail("{}: array {} has an empty name ('{}')", source, k, full);
    auto [it, fresh] = spelled.emplace(name, full);
    if (!fresh) fail("{}: arrays '{}' and '{}' both name the variable '{}'", source, it->second, full, name);
    out.emplace(name, list.arrays[k]);
  }
  return out;
}

}  // namespace ampfuse::runtime
