// A growable byte buffer that does not initialise what it grows into, so that reusing one across
// calls costs no allocation and no memset in steady state.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>

#include "absl/types/span.h"

namespace strait::compression {

// Not thread-safe; owns its storage (8-byte aligned at least, as operator new[] returns).
class ByteBuffer {
 public:
  uint8_t* data() { return data_.get(); }
  const uint8_t* data() const { return data_.get(); }
  size_t size() const { return size_; }
  absl::Span<const uint8_t> span() const { return {data_.get(), size_}; }

  // Sets the size; bytes past the old size are uninitialised. Keeps the contents up to
  // min(old size, n). Allocates only when n exceeds the capacity.
  void Resize(size_t n) {
    if (n > capacity_) {
      size_t capacity = std::max(n, capacity_ + capacity_ / 2);
      std::unique_ptr<uint8_t[]> grown(new uint8_t[capacity]);
      if (size_ > 0) std::memcpy(grown.get(), data_.get(), size_);
      data_ = std::move(grown);
      capacity_ = capacity;
    }
    size_ = n;
  }

 private:
  std::unique_ptr<uint8_t[]> data_;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

}  // namespace strait::compression
