// ampfuse::Error, the one exception type users see, without fmt: the public headers
// (include/ampfuse/ampfuse.h) include this; ir/error.h adds fail() and with_context().
#pragma once

#include <stdexcept>

namespace ampfuse {

// A user-facing error. The message is complete on its own ("model.json: node 'conv0'
// (Convolution): input 1 has shape [3] but ..."); callers add context by catching and
// rethrowing with a prefix (see with_context in ir/error.h).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace ampfuse
