// Frames a site pulls come from the network through a gateway it does not trust: whatever the
// header and body, opening and decoding one returns an error or a tensor that matches its header,
// never a crash. Input: u16 header length | FrameHeader (protobuf) | body. The expected key and
// shape are taken from the header itself so that the fuzzer gets past those checks into the codec.
// A payload left for a backend (DecodeBoundary, the path of a GPU site) goes on into the CPU
// backend's decoder, as it would into the GPU's.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "site/backend/cpu/cpu_backend.h"
#include "site/exchange/frame_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t header_size = data[0] | size_t{data[1]} << 8;
  if (2 + header_size > size) return 0;
  strait::site::ReceivedFrame frame;
  if (!frame.header.ParseFromArray(data + 2, static_cast<int>(header_size))) return 0;
  frame.body.assign(reinterpret_cast<const char*>(data + 2 + header_size), size - 2 - header_size);
  const std::vector<int64_t> shape(frame.header.shape().begin(), frame.header.shape().end());
  const strait::v1::TensorKey key = frame.header.key();
  // Unsealed link: straight into the codec chain's decoder, or the bytes of a teacher's targets.
  strait::site::FrameDecoder plain(nullptr, 1 << 20);
  (void)plain.Decode(key, shape, frame);
  (void)plain.DecodeBytes(key, frame);
  auto boundary = plain.DecodeBoundary(key, shape, frame);
  if (boundary.ok() && boundary->encoded) {
    static const auto backend = strait::site::CreateCpuBackend(1);
    const strait::site::BoundaryIn in = boundary->in();
    std::vector<float> values(boundary->payload.element_count);
    (void)(*backend)->DecodeValues(*in.stage, in.payload, static_cast<int64_t>(values.size()),
                                   values.data());
  }
  // Sealed link: the opener must refuse what it did not seal.
  strait::crypto::DirectionKey direction;
  auto opener = strait::crypto::Opener::Create(direction);
  if (opener.ok()) {
    strait::site::FrameDecoder sealed(*std::move(opener), 1 << 20);
    (void)sealed.Decode(key, shape, std::move(frame));
  }
  return 0;
}
