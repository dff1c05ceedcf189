// The persistent kernel cache: compiled code (CPU object files, CUBINs) on disk, shared by
// every process that uses the same directory.
//
// An entry is one file named by a 128-bit hash of its key text. The key text holds everything
// that changes the code (the caller's business: ampfuse and LLVM/NVRTC versions, target CPU
// and features, options, the kernel signature) and is stored inside the entry, so a hash
// collision or a file from another key reads as a miss, never as the wrong code. A header
// (magic, format version, sizes, a 64-bit checksum of key and payload) catches truncated and
// corrupt files. Entries are written to a temporary file in the same directory and renamed
// into place (rename(2) is atomic on one file system): a reader sees either no entry or a
// whole one, whatever other processes are writing at the time. A bad entry is ignored with
// one warning per cache object (the caller recompiles and its store replaces the entry).
//
// Size: at most max_bytes of entries; past it a store evicts the least recently used ones
// (a hit sets the entry's mtime to now). The running total is counted from a scan of the
// directory at the first store plus what this process wrote, so entries other processes
// wrote meanwhile are found at the next scan (an eviction, or the next process's first store).
//
// AMPFUSE_CACHE_DIR chooses the directory of the process's cache (default
// $XDG_CACHE_HOME/ampfuse, else ~/.cache/ampfuse; "0" turns it off), AMPFUSE_CACHE_MAX_MB its
// size (default 1024). AMPFUSE_FAULT=cache_write (a test switch) makes every store stop
// half-way through writing its temporary file and fail, as a full disk would.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace ampfuse::runtime {

inline constexpr const char* kCacheDirVariable = "AMPFUSE_CACHE_DIR";
inline constexpr const char* kCacheMaxMbVariable = "AMPFUSE_CACHE_MAX_MB";
inline constexpr int64_t kDefaultCacheMaxBytes = int64_t{1024} << 20;

struct DiskCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;          // no entry (a rejected one counts under rejected only)
  int64_t rejected = 0;        // corrupt, truncated, wrong version or another key's entry
  int64_t stores = 0;
  int64_t store_failures = 0;  // the entry was not written (the kernel is still used)
  int64_t evictions = 0;
};

class DiskCache {
 public:
  // Creates `dir` (and its parents) when missing; throws ampfuse::Error when it cannot.
  explicit DiskCache(std::string dir, int64_t max_bytes = kDefaultCacheMaxBytes);
  DiskCache(const DiskCache&) = delete;
  DiskCache& operator=(const DiskCache&) = delete;

  // The process's cache as AMPFUSE_CACHE_DIR and AMPFUSE_CACHE_MAX_MB say, made on first
  // call; nullptr when turned off, or (after one warning) when the directory cannot be made.
  static DiskCache* process();

  // The payload stored under `key`, or nullopt (no entry, or a bad one: warned once).
  std::optional<std::string> load(const std::string& key);
  // Stores `payload` under `key`. Never throws: a failure (a full disk, a read-only
  // directory, the injected fault) is warned once and returns false; nothing partial is
  // ever visible under the entry's name.
  bool store(const std::string& key, std::string_view payload);
  // For a payload the caller cannot use although its entry is whole (a plan that does not
  // read back, engine/plan_cache.h): counted as rejected and warned about once, as a
  // corrupt entry is; the caller rebuilds and its store replaces the entry.
  void reject(const std::string& key, const std::string& why);

  // The file an entry for `key` lives in.
  std::string path_of(const std::string& key) const;
  // Checks a file's header and checksum (not its key): "" when whole, else the reason.
  static std::string verify_file(const std::string& path);

  // The file holding ampfuse's code (the executable, or libampfuse.so) by device, inode,
  // size and modification time, for the keys: the version number does not change while
  // ampfuse is developed, yet a rebuilt code generator may emit other code for the same
  // kernel, so each build gets entries of its own (other builds' age out by LRU eviction).
  static const std::string& build_identity();

  const std::string& dir() const { return dir_; }
  int64_t max_bytes() const { return max_bytes_; }
  DiskCacheStats stats() const;

 private:
  void warn(const std::string& message);
  void evict_locked();  // with mutex_ held

  const std::string dir_;
  const int64_t max_bytes_;
  mutable std::mutex mutex_;
  DiskCacheStats stats_;
  bool warned_ = false;
  std::optional<int64_t> total_bytes_;  // entries' bytes as far as this object knows
};

// Kernels the calling thread loaded from a disk cache so far (CPU and CUDA): the executor
// takes the difference around its compile to tell disk loads from compilations.
int64_t disk_loads_on_this_thread();
void count_disk_load_on_this_thread();

}  // namespace ampfuse::runtime
