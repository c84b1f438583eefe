#include "site/data/fashion_mnist.h"

#include <zlib.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace strait::site {
namespace {

constexpr char kPackageHint[] =
    " (Fashion-MNIST comes with the Debian package dataset-fashion-mnist)";

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

// Reads exactly `bytes` bytes of the decompressed stream.
absl::Status ReadExactly(gzFile f, const std::string& path, void* dst, size_t bytes) {
  auto* out = static_cast<unsigned char*>(dst);
  while (bytes > 0) {
    const unsigned chunk = bytes > (1u << 30) ? (1u << 30) : static_cast<unsigned>(bytes);
    const int got = gzread(f, out, chunk);
    if (got <= 0) {
      int err = 0;
      const char* msg = gzerror(f, &err);
      return absl::DataLossError(absl::StrCat(path, ": truncated or corrupt gzip IDX file",
                                              err != Z_OK ? absl::StrCat(" (", msg, ")") : "",
                                              kPackageHint));
    }
    out += got;
    bytes -= static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

uint32_t BigEndian(const unsigned char* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]};
}

// Opens an IDX file and checks its header: magic 0x00000800 | dims, then the dimensions.
absl::StatusOr<GzFile> OpenIdx(const std::string& path, int dims, std::vector<uint32_t>* shape) {
  GzFile f(gzopen(path.c_str(), "rb"));
  if (f == nullptr) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path, kPackageHint));
  }
  unsigned char header[4 + 4 * 3];
  STRAIT_RETURN_IF_ERROR(ReadExactly(f.get(), path, header, 4 + 4 * dims));
  const uint32_t magic = BigEndian(header);
  if (magic != (0x800u | static_cast<uint32_t>(dims))) {
    return absl::DataLossError(absl::StrCat(path, ": not an IDX file of unsigned bytes with ", dims,
                                            " dimensions (magic 0x", absl::Hex(magic), ")",
                                            kPackageHint));
  }
  shape->clear();
  for (int i = 0; i < dims; ++i) shape->push_back(BigEndian(header + 4 + 4 * i));
  return f;
}

std::string FilePrefix(const std::string& dir, Split split) {
  return absl::StrCat(dir, "/", split == Split::kTrain ? "train" : "t10k");
}

}  // namespace

absl::StatusOr<int64_t> FashionMnistSize(const std::string& dir, Split split) {
  const std::string labels_path = FilePrefix(dir, split) + "-labels-idx1-ubyte.gz";
  std::vector<uint32_t> shape;
  STRAIT_ASSIGN_OR_RETURN(GzFile labels, OpenIdx(labels_path, 1, &shape));
  return int64_t{shape[0]};
}

absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir, Split split) {
  const std::string prefix = FilePrefix(dir, split);
  const std::string images_path = prefix + "-images-idx3-ubyte.gz";
  const std::string labels_path = prefix + "-labels-idx1-ubyte.gz";

  std::vector<uint32_t> image_shape, label_shape;
  STRAIT_ASSIGN_OR_RETURN(GzFile images, OpenIdx(images_path, 3, &image_shape));
  STRAIT_ASSIGN_OR_RETURN(GzFile labels, OpenIdx(labels_path, 1, &label_shape));
  if (image_shape[1] != 28 || image_shape[2] != 28 || image_shape[0] == 0 ||
      image_shape[0] > 1'000'000) {
    return absl::DataLossError(
        absl::StrCat(images_path, ": expected N x 28 x 28 images with 0 < N <= 10^6, found ",
                     image_shape[0], " x ", image_shape[1], " x ", image_shape[2], kPackageHint));
  }
  if (label_shape[0] != image_shape[0]) {
    return absl::DataLossError(absl::StrCat(labels_path, " has ", label_shape[0], " labels but ",
                                            images_path, " has ", image_shape[0], " images",
                                            kPackageHint));
  }

  Dataset d;
  d.size = image_shape[0];
  d.features = 28 * 28;
  d.classes = 10;
  std::vector<unsigned char> bytes(static_cast<size_t>(d.size) * d.features);
  STRAIT_RETURN_IF_ERROR(ReadExactly(images.get(), images_path, bytes.data(), bytes.size()));
  d.inputs.resize(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) {
    d.inputs[i] = (bytes[i] / 255.0f - kFashionMnistMean) / kFashionMnistStd;
  }
  bytes.resize(d.size);
  STRAIT_RETURN_IF_ERROR(ReadExactly(labels.get(), labels_path, bytes.data(), bytes.size()));
  d.labels.resize(d.size);
  for (int64_t i = 0; i < d.size; ++i) {
    if (bytes[i] >= d.classes) {
      return absl::DataLossError(absl::StrCat(labels_path, ": label ", bytes[i], " of sample ", i,
                                              " is not in [0, 10)", kPackageHint));
    }
    d.labels[i] = bytes[i];
  }
  return d;
}

}  // namespace strait::site
