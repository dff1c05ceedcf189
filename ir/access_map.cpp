#include "ir/access_map.h"

namespace ampfuse::ir {

AccessMap AccessMap::identity(size_t rank) {
  AccessMap m;
  for (size_t k = 0; k < rank; ++k) {
    m.iter_dim.push_back(static_cast<int32_t>(k));
    m.scale.push_back(1);
    m.offset.push_back(0);
  }
  return m;
}

AccessMap AccessMap::broadcast(const Shape& in, const Shape& out) {
  AccessMap m;
  const size_t lead = out.size() - in.size();
  for (size_t k = 0; k < in.size(); ++k) {
    const size_t d = k + lead;
    const bool repeat = in[k] == 1 && out[d] != 1;
    m.iter_dim.push_back(repeat ? -1 : static_cast<int32_t>(d));
    m.scale.push_back(repeat ? 0 : 1);
    m.offset.push_back(0);
  }
  return m;
}

bool AccessMap::is_identity() const { return *this == identity(iter_dim.size()); }

}  // namespace ampfuse::ir
