// Opening the files ampfuse reads (MXNet symbol JSON, .npy, .params, saved loss-scaler state),
// in one place, so that each refuses what is not a file the same way: a directory, a FIFO or
// a device (/dev/null) is "PATH: not a regular file (a directory)", never "no such file",
// an empty read, or a read that blocks forever on a FIFO.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

namespace ampfuse::ir {

// An open binary stream at the start of the regular file `path`, and its size in bytes.
// Throws ampfuse::Error starting with the path: "no such file", "not a regular file (a
// directory|a FIFO|a device|a socket)", or "cannot open the file: <reason>".
std::ifstream open_regular_file(const std::string& path, uint64_t* size);

// The whole of the regular file `path`. Same errors, and "cannot read the file".
std::string read_regular_file(const std::string& path);

}  // namespace ampfuse::ir
