#include "runtime/disk_cache.h"

#include "runtime/fault_injection.h"

#include "ir/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ampfuse::runtime {

namespace fs = std::filesystem;

namespace {

// Entry layout (little-endian, as the machines that can run the code are):
//   magic "AMPFKC\0\0" | u32 format | u32 key bytes | u64 payload bytes | u64 checksum |
//   key | payload
// The checksum covers key and payload. A new layout bumps kFormat: old files then read as
// "wrong format" and are replaced.
constexpr char kMagic[8] = {'A', 'M', 'P', 'F', 'K', 'C', '\0', '\0'};
// 2: the word-at-a-time hash (entry names and checksums) and plan entries (engine/plan_cache.h).
constexpr uint32_t kFormat = 2;
constexpr size_t kHeaderBytes = 8 + 4 + 4 + 8 + 8;
constexpr const char* kEntrySuffix = ".akc";
constexpr const char* kTempPrefix = ".tmp-";
// A temporary file this old belongs to a writer that died: removed at the next scan.
constexpr auto kStaleTemp = std::chrono::minutes(10);

// A 64-bit hash that takes 8 bytes a step (the last step zero-padded) and ends with
// splitmix64's avalanche. Each step, h = (h ^ word) * odd, is a bijection of h for a fixed
// word and of the word for a fixed h, so a changed byte always changes the sum; the lengths
// are mixed in, so zero padding cannot hide a trailing zero byte. Not cryptographic: the
// key comparison, not the hash, is what guarantees an entry belongs to its key. (Format 1
// hashed byte by byte, FNV-1a: about 8 times slower over the plans' large keys and entries.)
uint64_t hash64(std::string_view a, std::string_view b, uint64_t seed) {
  constexpr uint64_t kOdd = 0x9e3779b97f4a7c15ull;
  uint64_t h = 1469598103934665603ull ^ seed;
  for (std::string_view part : {a, b}) {
    size_t i = 0;
    for (; i + 8 <= part.size(); i += 8) {
      uint64_t w;
      std::memcpy(&w, part.data() + i, 8);
      h = (h ^ w) * kOdd;
    }
    uint64_t tail = 0;
    if (i < part.size()) std::memcpy(&tail, part.data() + i, part.size() - i);
    h = (h ^ tail) * kOdd;
    h = (h ^ part.size()) * kOdd;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

template <class T>
void put(std::string& out, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));
  out.append(bytes, sizeof(T));
}

template <class T>
T get(const std::string& in, size_t at) {
  T v;
  std::memcpy(&v, in.data() + at, sizeof(T));
  return v;
}

struct Parsed {
  std::string error;  // "" when whole
  std::string key, payload;
};

Parsed parse(const std::string& bytes) {
  Parsed p;
  if (bytes.size() < kHeaderBytes) {
    p.error = fmt::format("truncated ({} bytes, shorter than the header)", bytes.size());
    return p;
  }
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    p.error = "not a kernel cache entry (bad magic)";
    return p;
  }
  const auto format = get<uint32_t>(bytes, 8);
  if (format != kFormat) {
    p.error = fmt::format("entry format {}, this ampfuse reads {}", format, kFormat);
    return p;
  }
  const auto key_bytes = get<uint32_t>(bytes, 12);
  const auto payload_bytes = get<uint64_t>(bytes, 16);
  const auto checksum = get<uint64_t>(bytes, 24);
  if (bytes.size() - kHeaderBytes != key_bytes + payload_bytes) {
    p.error = fmt::format("{} bytes where the header says {}", bytes.size(), kHeaderBytes + key_bytes + payload_bytes);
    return p;
  }
  const std::string_view key(bytes.data() + kHeaderBytes, key_bytes);
  const std::string_view payload(bytes.data() + kHeaderBytes + key_bytes, payload_bytes);
  if (hash64(key, payload, 0) != checksum) {
    p.error = "checksum mismatch (corrupt)";
    return p;
  }
  p.key = key;
  p.payload = payload;
  return p;
}

bool read_file(const std::string& path, std::string& out, int& error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = errno;
    return false;
  }
  out.clear();
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      error = errno;
      ::close(fd);
      return false;
    }
    if (n == 0) break;
    out.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return true;
}

// Writes all of `bytes` (or, with `halfway`, the first half and then fails with EIO).
int write_all(int fd, std::string_view bytes, bool halfway) {
  const size_t limit = halfway ? bytes.size() / 2 : bytes.size();
  size_t done = 0;
  while (done < limit) {
    const ssize_t n = ::write(fd, bytes.data() + done, limit - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    done += static_cast<size_t>(n);
  }
  return halfway ? EIO : 0;
}


std::string default_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/ampfuse";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/ampfuse";
  return "";
}

}  // namespace

thread_local int64_t disk_loads_here = 0;

int64_t disk_loads_on_this_thread() { return disk_loads_here; }
void count_disk_load_on_this_thread() { ++disk_loads_here; }

const std::string& DiskCache::build_identity() {
  static const std::string identity = [] {
    Dl_info info{};
    struct stat st{};
    // The main program's name may be relative to a directory since left: then /proc/self/exe.
    const bool found = ::dladdr(reinterpret_cast<void*>(&DiskCache::build_identity), &info) && info.dli_fname &&
                       ::stat(info.dli_fname, &st) == 0;
    if (!found && ::stat("/proc/self/exe", &st) != 0) return std::string("unknown");
    return fmt::format("inode {}:{} {} bytes {}.{:09}", st.st_dev, st.st_ino, st.st_size, st.st_mtim.tv_sec,
                       st.st_mtim.tv_nsec);
  }();
  return identity;
}

DiskCache::DiskCache(std::string dir, int64_t max_bytes)
    : dir_(std::move(dir)), max_bytes_(max_bytes) {
  if (dir_.empty()) fail("kernel cache: empty directory name");
  if (max_bytes_ <= 0) fail("kernel cache '{}': the size limit must be positive, not {} bytes", dir_, max_bytes_);
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_)) fail("kernel cache: cannot create directory '{}': {}", dir_, ec.message());
}

DiskCache* DiskCache::process() {
  static DiskCache* cache = []() -> DiskCache* {
    const char* set = std::getenv(kCacheDirVariable);
    const std::string dir = set && *set ? set : default_dir();
    if (dir == "0" || dir.empty()) return nullptr;
    int64_t max_bytes = kDefaultCacheMaxBytes;
    if (const char* mb = std::getenv(kCacheMaxMbVariable); mb && *mb) {
      char* end = nullptr;
      const long long v = std::strtoll(mb, &end, 10);
      if (*end != '\0' || v <= 0) {
        fmt::print(stderr, "ampfuse: warning: {}={}: expected a positive number of MiB; using {}\n",
                   kCacheMaxMbVariable, mb, kDefaultCacheMaxBytes >> 20);
      } else {
        max_bytes = static_cast<int64_t>(v) << 20;
      }
    }
    try {
      return new DiskCache(dir, max_bytes);  // never destroyed, like the kernel cache
    } catch (const Error& e) {
      fmt::print(stderr, "ampfuse: warning: {} (set {}=0 to turn the cache off); kernels are not cached on disk\n",
                 e.what(), kCacheDirVariable);
      return nullptr;
    }
  }();
  return cache;
}

std::string DiskCache::path_of(const std::string& key) const {
  return fmt::format("{}/{:016x}{:016x}{}", dir_, hash64(key, {}, 1), hash64(key, {}, 2), kEntrySuffix);
}

std::string DiskCache::verify_file(const std::string& path) {
  std::string bytes;
  int error = 0;
  if (!read_file(path, bytes, error)) return fmt::format("cannot read: {}", std::strerror(error));
  return parse(bytes).error;
}

void DiskCache::warn(const std::string& message) {
  {
    std::lock_guard lock(mutex_);
    if (warned_) return;
    warned_ = true;
  }
  fmt::print(stderr, "ampfuse: warning: kernel cache: {} (further cache warnings of this process are not shown)\n",
             message);
}

std::optional<std::string> DiskCache::load(const std::string& key) {
  const std::string path = path_of(key);
  std::string bytes;
  int error = 0;
  if (!read_file(path, bytes, error)) {
    if (error != ENOENT) warn(fmt::format("cannot read '{}': {}; recompiling", path, std::strerror(error)));
    std::lock_guard lock(mutex_);
    ++(error == ENOENT ? stats_.misses : stats_.rejected);
    return std::nullopt;
  }
  Parsed p = parse(bytes);
  if (p.error.empty() && p.key != key) p.error = "the entry belongs to another key (hash collision or foreign file)";
  if (!p.error.empty()) {
    warn(fmt::format("ignoring '{}': {}; recompiling", path, p.error));
    std::lock_guard lock(mutex_);
    ++stats_.rejected;
    return std::nullopt;
  }
  // Least recently used eviction goes by mtime: a hit makes the entry young again.
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
  std::lock_guard lock(mutex_);
  ++stats_.hits;
  return std::move(p.payload);
}

void DiskCache::reject(const std::string& key, const std::string& why) {
  warn(fmt::format("ignoring '{}': {}; rebuilding it", path_of(key), why));
  std::lock_guard lock(mutex_);
  ++stats_.rejected;
}

bool DiskCache::store(const std::string& key, std::string_view payload) {
  static std::atomic<uint64_t> temp_counter{0};
  const std::string path = path_of(key);
  // Unique per process and call: concurrent writers of one key never share a temporary file.
  const std::string temp = fmt::format("{}/{}{}-{}", dir_, kTempPrefix, ::getpid(), temp_counter++);
  std::string bytes;
  bytes.reserve(kHeaderBytes + key.size() + payload.size());
  bytes.append(kMagic, sizeof(kMagic));
  put<uint32_t>(bytes, kFormat);
  put<uint32_t>(bytes, static_cast<uint32_t>(key.size()));
  put<uint64_t>(bytes, payload.size());
  put<uint64_t>(bytes, hash64(key, payload, 0));
  bytes += key;
  bytes += payload;

  std::string failure;
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    failure = fmt::format("cannot create '{}': {}", temp, std::strerror(errno));
  } else {
    const bool fault = fault_strikes(Fault::cache_write);
    const int error = write_all(fd, bytes, fault);
    // close() can report a delayed write error (NFS, a full disk): it counts like write's.
    const int close_error = ::close(fd) == 0 ? 0 : errno;
    if (error || close_error) {
      failure = fault ? fmt::format("writing '{}' stopped half-way {}", temp, injected_fault_note())
                             : fmt::format("writing '{}' failed: {}", temp, std::strerror(error ? error : close_error));
      ::unlink(temp.c_str());
    } else if (::rename(temp.c_str(), path.c_str()) != 0) {
      failure = fmt::format("cannot rename '{}' to '{}': {}", temp, path, std::strerror(errno));
      ::unlink(temp.c_str());
    }
  }
  if (!failure.empty()) {
    warn(failure + "; what it holds (a kernel, a plan) is used from memory but not cached on disk");
    std::lock_guard lock(mutex_);
    ++stats_.store_failures;
    return false;
  }
  std::lock_guard lock(mutex_);
  ++stats_.stores;
  if (!total_bytes_) {
    evict_locked();  // the first store counts what is there (and trims it)
  } else {
    *total_bytes_ += static_cast<int64_t>(bytes.size());
    if (*total_bytes_ > max_bytes_) evict_locked();
  }
  return true;
}

void DiskCache::evict_locked() {
  struct File {
    std::string path;
    int64_t bytes;
    fs::file_time_type mtime;
  };
  std::vector<File> files;
  int64_t total = 0;
  std::error_code ec;
  const auto now = fs::file_time_type::clock::now();
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e;
    const std::string name = it->path().filename().string();
    const auto mtime = it->last_write_time(e);
    if (e) continue;  // removed meanwhile by another process
    if (name.starts_with(kTempPrefix)) {
      if (now - mtime > kStaleTemp) fs::remove(it->path(), e);
      continue;
    }
    if (!name.ends_with(kEntrySuffix)) continue;
    const auto size = it->file_size(e);
    if (e) continue;
    files.push_back({it->path().string(), static_cast<int64_t>(size), mtime});
    total += static_cast<int64_t>(size);
  }
  if (total > max_bytes_) {
    // Oldest first, down to three quarters of the limit, so that the next stores do not
    // each scan the directory again.
    std::sort(files.begin(), files.end(), [](const File& a, const File& b) { return a.mtime < b.mtime; });
    const int64_t target = max_bytes_ / 4 * 3;
    for (const File& f : files) {
      if (total <= target) break;
      std::error_code e;
      if (fs::remove(f.path, e)) ++stats_.evictions;
      total -= f.bytes;  // gone either way: removed now or by another process
    }
  }
  total_bytes_ = total;
}

DiskCacheStats DiskCache::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace ampfuse::runtime
