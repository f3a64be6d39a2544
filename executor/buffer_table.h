// The schedule's buffers as a backend holds them, by id (backend.h: alloc, free and every
// op that names one). Both backends keep theirs here, so both refuse the same schedule
// errors: an id allocated twice, one used before its alloc or after its free, one used in a
// role it was not allocated for (a K,V block read as dK,dV), a transfer past an id's end
// (and, in backend.h, check_kv_tokens: a K,V block named with another block's token list).
// The CUDA path relies on none of them happening; the cpu backend refusing them too is
// what lets CI, with no GPU, catch a schedule or ring loop that would break it.
#pragma once

#include <cstddef>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>

#include "executor/backend.h"

namespace rm::exec {

template <class Memory>
class BufferTable {
 public:
  explicit BufferTable(const char* backend) : backend_(backend) {}

  Memory& add(int id, BufferRole role, Memory mem) {
    if (buffers_.count(id) != 0) fail(id, "allocated twice");
    return buffers_.emplace(id, Entry{role, std::move(mem)}).first->second.mem;
  }
  // Takes `id` out, handing back its role and memory (a pool may keep them).
  std::pair<BufferRole, Memory> remove(int id) {
    auto it = find(id);
    std::pair<BufferRole, Memory> r{it->second.role, std::move(it->second.mem)};
    buffers_.erase(it);
    return r;
  }
  Memory& get(int id) { return find(id)->second.mem; }
  const Memory& get(int id) const { return const_cast<BufferTable*>(this)->get(id); }
  // `id`, which an op uses as `role`.
  Memory& get(int id, BufferRole role) {
    auto it = find(id);
    if (it->second.role != role) fail(id, "used with the wrong content");
    return it->second.mem;
  }
  // `id`, of `have` bytes (`size_of` of its memory), for a transfer of `bytes` at `offset`:
  // a message part that reaches past the buffer's end is a schedule error, not a write
  // into whatever lies beyond it.
  template <class SizeOf>
  Memory& get_span(int id, std::size_t offset, std::size_t bytes, SizeOf size_of) {
    Memory& m = get(id);
    const std::size_t have = size_of(m);
    if (offset + bytes > have)
      throw std::runtime_error(std::string(backend_) + " backend: transfer of " + std::to_string(bytes) +
                               " bytes at offset " + std::to_string(offset) + " exceeds buffer " +
                               std::to_string(id) + " (" + std::to_string(have) + " bytes; schedule error)");
    return m;
  }

 private:
  struct Entry {
    BufferRole role;
    Memory mem;
  };
  [[noreturn]] void fail(int id, const char* what) const {
    throw std::runtime_error(std::string(backend_) + " backend: buffer " + std::to_string(id) + " " + what +
                             " (schedule error)");
  }
  typename std::map<int, Entry>::iterator find(int id) {
    auto it = buffers_.find(id);
    if (it == buffers_.end()) fail(id, "used before alloc");
    return it;
  }
  const char* backend_;
  std::map<int, Entry> buffers_;
};

}  // namespace rm::exec
