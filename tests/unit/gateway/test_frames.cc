#include "test_frames.h"

namespace strait::gateway::testing {

JobSpec ThreeSiteSpec() {
  JobSpec spec;
  spec.name = "fed";
  spec.training.microbatches = 4;
  for (const char* id : {"a", "b", "c"}) spec.sites.push_back(SiteSpec{.id = id});
  return spec;
}

v1::TensorKey Key(uint64_t step, uint32_t microbatch, uint32_t boundary, v1::Direction direction,
                  uint32_t generation) {
  v1::TensorKey key;
  key.set_job("fed");
  key.set_step(step);
  key.set_microbatch(microbatch);
  key.set_boundary(boundary);
  key.set_direction(direction);
  key.set_generation(generation);
  return key;
}

v1::FrameHeader Header(const v1::TensorKey& key, uint64_t wire_bytes, uint32_t chunks) {
  v1::FrameHeader header;
  *header.mutable_key() = key;
  header.set_dtype(v1::FLOAT32);
  header.add_shape(2);
  header.add_shape(3);
  header.set_raw_bytes(24);
  header.set_wire_bytes(wire_bytes);
  header.set_chunk_count(chunks);
  return header;
}

FramePtr Frame(const v1::TensorKey& key, uint64_t wire_bytes) {
  return std::make_shared<StoredFrame>(Header(key, wire_bytes),
                                       std::vector<std::string>{std::string(wire_bytes, 'x')});
}

std::shared_ptr<StoredFrame> ArrivingFrame(const v1::TensorKey& key, uint32_t chunks) {
  return std::make_shared<StoredFrame>(Header(key, 10ull * chunks, chunks));
}

}  // namespace strait::gateway::testing
