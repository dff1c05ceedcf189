#include "ir/input_file.h"

#include "ir/error.h"

#include <cerrno>
#include <cstring>
#include <sys/stat.h>

namespace ampfuse::ir {

namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a file";
}

}  // namespace

std::ifstream open_regular_file(const std::string& path, uint64_t* size) {
  // stat() before opening: opening a FIFO for reading would block until a writer comes.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) fail("{}: no such file", path);
    fail("{}: cannot open the file: {}", path, std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) fail("{}: not a regular file ({})", path, kind_of(st.st_mode));
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open the file: {}", path, std::strerror(errno));
  *size = static_cast<uint64_t>(st.st_size);
  return in;
}

std::string read_regular_file(const std::string& path) {
  uint64_t size = 0;
  std::ifstream in = open_regular_file(path, &size);
  std::string text(size, '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  // A file that changed size since stat: read what is there now, to its end.
  if (static_cast<uint64_t>(in.gcount()) != size) fail("{}: cannot read the file (it changed while being read?)", path);
  if (in.peek() != std::char_traits<char>::eof()) fail("{}: cannot read the file (it grew while being read)", path);
  return text;
}

}  // namespace ampfuse::ir
