#include <utility>

#include "site/backend/backend.h"

namespace strait::site {

absl::StatusOr<DeviceBuffer> DeviceBuffer::Create(Backend* backend, size_t bytes) {
  absl::StatusOr<void*> ptr = backend->Allocate(bytes);
  if (!ptr.ok()) return ptr.status();
  DeviceBuffer buffer;
  buffer.backend_ = backend;
  buffer.ptr_ = *ptr;
  buffer.bytes_ = bytes;
  return buffer;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : backend_(std::exchange(other.backend_, nullptr)),
      ptr_(std::exchange(other.ptr_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (backend_ != nullptr) backend_->Free(ptr_);
    backend_ = std::exchange(other.backend_, nullptr);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (backend_ != nullptr) backend_->Free(ptr_);
}

}  // namespace strait::site
