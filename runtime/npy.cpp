#include "runtime/npy.h"

#include "ir/error.h"
#include "ir/input_file.h"

#include <bit>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <vector>

namespace ampfuse::runtime {

static_assert(std::endian::native == std::endian::little, "npy I/O assumes a little-endian host");

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;
// numpy pads the header so the data starts on a 64-byte boundary (ARRAY_ALIGN).
constexpr size_t kAlign = 64;

struct NpyType {
  char kind;  // numpy's type character: f, i, u, b
  int size;
  DType dtype;
};
constexpr NpyType kTypes[] = {
    {'f', 2, DType::f16}, {'f', 4, DType::f32}, {'f', 8, DType::f64}, {'i', 1, DType::i8},
    {'u', 1, DType::u8},  {'i', 4, DType::i32}, {'i', 8, DType::i64}, {'b', 1, DType::boolean},
};

// ---------------------------------------------------------------------------------------
// The header is a Python dict literal, e.g.
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// This reads the subset numpy writes: strings, True/False/None, ints, tuples, lists, dicts.

struct PyValue {
  enum class Kind { none, boolean, integer, string, sequence, dict } kind = Kind::none;
  bool boolean = false;
  int64_t integer = 0;
  std::string string;
  std::vector<PyValue> items;      // sequence entries, or dict values
  std::vector<std::string> keys;   // dict keys, one per item
};

// The header text with anything unprintable escaped, for messages about corrupt files.
std::string printable(std::string_view s) {
  std::string out;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    out += (u < 0x20 || u >= 0x7f) ? fmt::format("\\x{:02x}", u) : std::string(1, c);
  }
  return out;
}

class HeaderParser {
 public:
  explicit HeaderParser(std::string_view s) : s_(s) {}

  PyValue dict() {
    PyValue v = value();
    skip_space();
    if (pos_ != s_.size()) bad("unexpected text after the dict");
    if (v.kind != PyValue::Kind::dict) bad("the header is not a dict");
    return v;
  }

 private:
  [[noreturn]] void bad(std::string_view why) const {
    fail("malformed header '{}' ({} at offset {})", printable(s_), why, pos_);
  }
  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  bool accept(char c) {
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool accept_word(std::string_view w) {
    skip_space();
    if (s_.substr(pos_, w.size()) != w) return false;
    pos_ += w.size();
    return true;
  }

  PyValue value() {
    skip_space();
    if (pos_ >= s_.size()) bad("unexpected end");
    PyValue v;
    const char c = s_[pos_];
    if (c == '\'' || c == '"') {
      v.kind = PyValue::Kind::string;
      v.string = string();
    } else if (c == '{') {
      v.kind = PyValue::Kind::dict;
      dict_body(v);
    } else if (c == '(' || c == '[') {
      v.kind = PyValue::Kind::sequence;
      v.items = sequence(c == '(' ? ')' : ']');
    } else if (accept_word("True")) {
      v.kind = PyValue::Kind::boolean;
      v.boolean = true;
    } else if (accept_word("False")) {
      v.kind = PyValue::Kind::boolean;
    } else if (accept_word("None")) {
      v.kind = PyValue::Kind::none;
    } else {
      v.kind = PyValue::Kind::integer;
      v.integer = integer();
    }
    return v;
  }

  std::string string() {
    const char q = s_[pos_++];
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != q) {
      if (s_[pos_] == '\\') ++pos_;  // numpy's descr strings hold no escapes; keep the next char
      if (pos_ < s_.size()) out += s_[pos_++];
    }
    if (pos_ >= s_.size()) bad("unterminated string");
    ++pos_;
    return out;
  }

  int64_t integer() {
    const char* first = s_.data() + pos_;
    int64_t v = 0;
    auto [p, ec] = std::from_chars(first, s_.data() + s_.size(), v);
    if (ec == std::errc::result_out_of_range) bad("integer out of range");
    if (ec != std::errc()) bad("expected a value");
    pos_ += static_cast<size_t>(p - first);
    if (pos_ < s_.size() && s_[pos_] == 'L') ++pos_;  // Python 2 long: "3L"
    return v;
  }

  std::vector<PyValue> sequence(char close) {
    ++pos_;
    std::vector<PyValue> items;
    while (!accept(close)) {
      items.push_back(value());
      if (!accept(',')) {
        if (!accept(close)) bad(fmt::format("expected ',' or '{}'", close));
        break;
      }
    }
    return items;
  }

  void dict_body(PyValue& d) {
    ++pos_;
    while (!accept('}')) {
      skip_space();
      if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) bad("expected a quoted key");
      d.keys.push_back(string());
      if (!accept(':')) bad("expected ':'");
      d.items.push_back(value());
      if (!accept(',')) {
        if (!accept('}')) bad("expected ',' or '}'");
        break;
      }
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
};

struct Header {
  DType dtype;
  Shape shape;
};

// '<' and '=' (native, little-endian here) for every type; '|' ("not applicable") and
// '<' for one-byte types, as numpy writes '|i1'.
DType parse_descr(const std::string& descr) {
  // Messages show the descr escaped: a corrupt one may hold line breaks (an error is one line).
  const std::string shown = printable(descr);
  if (descr.size() < 3) fail("unsupported dtype '{}'", shown);
  const char order = descr[0];
  const char kind = descr[1];
  int size = 0;
  for (char c : std::string_view(descr).substr(2)) {
    if (c < '0' || c > '9' || size > 1000) fail("unsupported dtype '{}'", shown);
    size = size * 10 + (c - '0');
  }
  if (order == '>')
    fail("big-endian data ('{}') is not supported; convert it with arr.astype('<{}{}')", shown,
         printable(std::string_view(&kind, 1)), size);
  if (order != '<' && order != '=' && order != '|')
    fail("unsupported dtype '{}' (byte order '{}')", shown, printable(std::string_view(&order, 1)));
  for (const NpyType& t : kTypes) {
    if (t.kind != kind || t.size != size) continue;
    if (order == '|' && size != 1) fail("dtype '{}': byte order '|' is only for one-byte types", shown);
    return t.dtype;
  }
  fail("unsupported dtype '{}' (supported: <f2 <f4 <f8 |i1 |u1 <i4 <i8 |b1)", shown);
}

Header parse_header(std::string_view text) {
  const PyValue d = HeaderParser(text).dict();
  const PyValue* descr = nullptr;
  const PyValue* fortran = nullptr;
  const PyValue* dims = nullptr;
  for (size_t i = 0; i < d.keys.size(); ++i) {
    const std::string& k = d.keys[i];
    const PyValue** slot = k == "descr" ? &descr : k == "fortran_order" ? &fortran : k == "shape" ? &dims : nullptr;
    if (!slot) fail("the header has an unexpected key '{}'", printable(k));
    if (*slot) fail("the header has the key '{}' twice", k);
    *slot = &d.items[i];
  }
  if (!descr) fail("the header has no 'descr' key");
  if (!fortran) fail("the header has no 'fortran_order' key");
  if (!dims) fail("the header has no 'shape' key");
  using Kind = PyValue::Kind;
  if (descr->kind != Kind::string) fail("'descr' is not a string (structured arrays are not supported)");
  if (fortran->kind != Kind::boolean) fail("'fortran_order' is not True or False");
  if (dims->kind != Kind::sequence) fail("'shape' is not a tuple");
  Header h;
  h.dtype = parse_descr(descr->string);
  for (const PyValue& e : dims->items) {
    if (e.kind != Kind::integer || e.integer < 0) fail("'shape' holds something other than non-negative integers");
    h.shape.push_back(e.integer);
  }
  // A Fortran-ordered array of rank <= 1 is laid out as in C order; numpy writes such
  // arrays with fortran_order False anyway, but other writers may not.
  if (fortran->boolean && h.shape.size() > 1)
    fail("Fortran-ordered arrays are not supported; save with np.ascontiguousarray(arr)");
  (void)ir::num_elements(h.shape);  // throws on overflow
  return h;
}

uint32_t read_le(const std::string& bytes, size_t n) {
  uint32_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  return v;
}

// Up to n bytes from the stream's position: fewer only at the end of the file.
std::string read_up_to(std::istream& in, size_t n) {
  std::string s(n, '\0');
  in.read(s.data(), static_cast<std::streamsize>(n));
  s.resize(static_cast<size_t>(in.gcount()));
  return s;
}

// Every length is checked against `file_size` before it is read or allocated, so a
// corrupt header cannot ask for a huge buffer.
Tensor read_npy_stream(std::istream& in, uint64_t file_size) {
  const std::string prefix = read_up_to(in, kMagicSize + 2);
  if (prefix.size() < kMagicSize || prefix.compare(0, kMagicSize, kMagic, kMagicSize) != 0)
    fail("not a .npy file (it does not start with \\x93NUMPY)");
  if (prefix.size() < kMagicSize + 2) fail("truncated header");
  const int major = static_cast<unsigned char>(prefix[6]);
  const int minor = static_cast<unsigned char>(prefix[7]);
  if (major < 1 || major > 3 || minor != 0) fail("unsupported .npy format version {}.{}", major, minor);
  const size_t len_size = major == 1 ? 2 : 4;
  const std::string len_bytes = read_up_to(in, len_size);
  if (len_bytes.size() < len_size) fail("truncated header");
  const uint64_t header_len = read_le(len_bytes, len_size);
  const uint64_t header_start = kMagicSize + 2 + len_size;
  if (file_size - header_start < header_len)
    fail("truncated header: {} bytes announced, {} present", header_len, file_size - header_start);
  const Header h = parse_header(read_up_to(in, header_len));

  const uint64_t available = file_size - header_start - header_len;
  const int64_t count = ir::num_elements(h.shape);
  const size_t item = ir::dtype_size(h.dtype);
  if (static_cast<uint64_t>(count) > available / item)
    fail("truncated data: {} elements of {} bytes announced, {} bytes present", count, item, available);
  // numpy's own np.load ignores bytes after the array; a file with more data than its header
  // declares is more likely a header that went wrong (a shape edited or written short), so
  // it is refused rather than read in part.
  if (available != static_cast<uint64_t>(count) * item)
    fail("{} bytes after the data: the header declares {} elements of {} bytes ({} bytes), the file holds {}",
         available - static_cast<uint64_t>(count) * item, count, item, static_cast<uint64_t>(count) * item, available);
  Tensor t(TensorType{h.dtype, h.shape});
  in.read(static_cast<char*>(t.raw()), static_cast<std::streamsize>(t.bytes()));
  if (static_cast<size_t>(in.gcount()) != t.bytes()) fail("read error after {} bytes of data", in.gcount());
  if (h.dtype == DType::boolean)  // the Tensor contract is 0/1; numpy reads any non-zero as True
    for (int64_t i = 0; i < t.size(); ++i) t.data<uint8_t>()[i] = t.data<uint8_t>()[i] != 0;
  return t;
}

std::string descr_of(DType t) {
  for (const NpyType& n : kTypes)
    if (n.dtype == t) return fmt::format("{}{}{}", n.size == 1 ? '|' : '<', n.kind, n.size);
  fail("no .npy dtype for {}", ir::dtype_name(t));
}

// numpy's own spelling, so files diff cleanly against np.save output.
std::string header_dict(const TensorType& t) {
  std::string shape;
  if (t.shape.size() == 1) shape = fmt::format("({},)", t.shape[0]);
  else shape = fmt::format("({})", fmt::join(t.shape, ", "));
  return fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", descr_of(t.dtype), shape);
}

}  // namespace

Tensor read_npy(const std::string& path) {
  uint64_t size = 0;
  std::ifstream in = ir::open_regular_file(path, &size);
  return with_context(path, [&] { return read_npy_stream(in, size); });
}

Tensor read_npy(std::istream& in, uint64_t size, const std::string& source) {
  return with_context(source, [&] { return read_npy_stream(in, size); });
}

void write_npy(const std::string& path, const Tensor& t) {
  // numpy has no bfloat16: its values widen to f32 exactly.
  const Tensor data = t.dtype() == DType::bf16 ? cast(t, DType::f32) : t;
  std::string header = header_dict(data.type());
  // Version 1.0 stores the header length in 2 bytes; 2.0 (same header) in 4 when it is longer.
  size_t len_size = 2;
  auto padded_len = [&] {  // header + '\n' + spaces, so the data starts aligned
    const size_t prefix = kMagicSize + 2 + len_size;
    return (prefix + header.size() + 1 + kAlign - 1) / kAlign * kAlign - prefix;
  };
  if (padded_len() > 0xFFFF) len_size = 4;
  header.append(padded_len() - header.size() - 1, ' ');
  header += '\n';

  std::string out(kMagic, kMagicSize);
  out += static_cast<char>(len_size == 2 ? 1 : 2);
  out += '\0';
  for (size_t i = 0; i < len_size; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  out += header;

  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail("{}: cannot open for writing", path);
  f.write(out.data(), static_cast<std::streamsize>(out.size()));
  if (data.bytes()) f.write(static_cast<const char*>(data.raw()), static_cast<std::streamsize>(data.bytes()));
  f.close();
  if (!f) fail("{}: write failed", path);
}

}  // namespace ampfuse::runtime
