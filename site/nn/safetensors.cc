#include "site/nn/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "compression/float_bits.h"
#include "core/status.h"

namespace strait::site {
namespace {

absl::Status Corrupt(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("safetensors: ", what));
}

uint64_t DtypeBytes(const std::string& dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "F16" || dtype == "BF16") return 2;
  return 0;
}

void PutU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// One tensor's entry of a header, checked on its own (offsets against the data's size).
absl::StatusOr<SafetensorsEntry> ParseEntry(const std::string& name, const nlohmann::json& j,
                                            uint64_t data_bytes) {
  if (!j.is_object() || !j.contains("dtype") || !j.contains("shape") ||
      !j.contains("data_offsets")) {
    return Corrupt(absl::StrCat("tensor '", name, "' lacks dtype, shape or data_offsets"));
  }
  SafetensorsEntry e;
  const nlohmann::json &dtype = j["dtype"], &shape = j["shape"], &offsets = j["data_offsets"];
  if (!dtype.is_string() || DtypeBytes(dtype.get<std::string>()) == 0) {
    return Corrupt(absl::StrCat("tensor '", name, "' has dtype ", dtype.dump(),
                                "; this reader takes F32, F16 and BF16"));
  }
  e.dtype = dtype.get<std::string>();
  if (!shape.is_array() || shape.size() > 8) {
    return Corrupt(absl::StrCat("tensor '", name, "' has a shape that is no list of 0 to 8 sizes"));
  }
  uint64_t numel = 1;
  for (const nlohmann::json& d : shape) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 40)) {
      return Corrupt(absl::StrCat("tensor '", name, "' has a size that is no count: ", d.dump()));
    }
    e.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
    numel *= d.get<uint64_t>();
    if (numel > (uint64_t{1} << 40)) {
      return Corrupt(absl::StrCat("tensor '", name, "' holds over 2^40 values"));
    }
  }
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    return Corrupt(absl::StrCat("tensor '", name, "' has data_offsets that are no [begin, end]"));
  }
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  if (e.begin > e.end || e.end > data_bytes) {
    return Corrupt(absl::StrCat("tensor '", name, "' lies at [", e.begin, ", ", e.end,
                                ") of a data section of ", data_bytes,
                                " bytes (truncated, or its header lies)"));
  }
  if (e.end - e.begin != numel * DtypeBytes(e.dtype)) {
    return Corrupt(absl::StrCat("tensor '", name, "' takes ", e.end - e.begin, " bytes; ", numel,
                                " values of ", e.dtype, " take ", numel * DtypeBytes(e.dtype)));
  }
  return e;
}

}  // namespace

std::string EncodeSafetensors(const std::vector<NamedTensor>& tensors, SafetensorsDtype dtype,
                              const std::map<std::string, std::string>& metadata) {
  const uint64_t width = dtype == SafetensorsDtype::kF32 ? 4 : 2;
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const NamedTensor& t : tensors) {
    const uint64_t bytes = t.values.size() * width;
    header[t.name] = {{"dtype", dtype == SafetensorsDtype::kF32 ? "F32" : "BF16"},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // The data starts 8-byte aligned.
  std::string out;
  out.reserve(8 + text.size() + offset);
  PutU64(out, text.size());
  out += text;
  for (const NamedTensor& t : tensors) {
    for (float v : t.values) {
      if (dtype == SafetensorsDtype::kF32) {
        const uint32_t bits = compression::FloatBits(v);
        for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
      } else {
        const uint16_t bits = compression::FloatToBf16Bits(v);
        out.push_back(static_cast<char>(bits & 0xff));
        out.push_back(static_cast<char>(bits >> 8));
      }
    }
  }
  return out;
}

uint64_t SafetensorsHeaderLength(std::string_view first8) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(first8[i]);
  return n;
}

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(std::string_view prefix,
                                                         uint64_t file_size) {
  if (prefix.size() < 8 || file_size < 8) return Corrupt("shorter than its 8-byte header length");
  const uint64_t n = SafetensorsHeaderLength(prefix);
  if (n > kMaxSafetensorsHeaderBytes || n > file_size - 8) {
    return Corrupt(absl::StrCat("a header of ", n, " bytes in a file of ", file_size,
                                " (truncated, or not safetensors)"));
  }
  if (prefix.size() < 8 + n) return Corrupt("the header is cut short");
  const nlohmann::json j =
      nlohmann::json::parse(prefix.substr(8, n), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Corrupt("the header is no JSON object");
  SafetensorsHeader header;
  header.data_start = 8 + n;
  const uint64_t data_bytes = file_size - header.data_start;
  for (const auto& [name, value] : j.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) return Corrupt("__metadata__ is no object");
      for (const auto& [key, text] : value.items()) {
        if (!text.is_string()) return Corrupt(absl::StrCat("metadata '", key, "' is no string"));
        header.metadata[key] = text.get<std::string>();
      }
      continue;
    }
    STRAIT_ASSIGN_OR_RETURN(header.tensors[name], ParseEntry(name, value, data_bytes));
  }
  // The tensors tile the data section: no overlap, no hole, nothing after the last.
  std::vector<const SafetensorsEntry*> order;
  for (const auto& [name, e] : header.tensors) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t next = 0;
  for (const SafetensorsEntry* e : order) {
    if (e->begin != next) {
      return Corrupt(absl::StrCat("the tensors ", e->begin < next ? "overlap" : "leave a hole",
                                  " at byte ", std::min(e->begin, next), " of the data"));
    }
    next = e->end;
  }
  if (next != data_bytes) {
    return Corrupt(
        absl::StrCat("the tensors take ", next, " bytes of a data section of ", data_bytes));
  }
  return header;
}

absl::StatusOr<std::vector<float>> DecodeSafetensorsTensor(const SafetensorsEntry& entry,
                                                           std::string_view bytes) {
  const uint64_t width = DtypeBytes(entry.dtype);
  if (width == 0 || bytes.size() != entry.end - entry.begin || bytes.size() % width != 0) {
    return Corrupt(absl::StrCat("a tensor of ", bytes.size(), " bytes of ", entry.dtype));
  }
  std::vector<float> values(bytes.size() / width);
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  for (size_t i = 0; i < values.size(); ++i, p += width) {
    if (width == 4) {
      values[i] = compression::BitsFloat(static_cast<uint32_t>(p[0]) | (uint32_t{p[1]} << 8) |
                                         (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24));
    } else {
      const auto bits = static_cast<uint16_t>(p[0] | (p[1] << 8));
      values[i] = entry.dtype == "BF16" ? compression::Bf16BitsToFloat(bits)
                                        : compression::HalfBitsToFloat(bits);
    }
  }
  return values;
}

absl::StatusOr<std::vector<NamedTensor>> DecodeSafetensors(std::string_view file) {
  STRAIT_ASSIGN_OR_RETURN(const SafetensorsHeader header,
                          ParseSafetensorsHeader(file, file.size()));
  std::vector<NamedTensor> tensors;
  for (const auto& [name, e] : header.tensors) {
    NamedTensor t{name, e.shape, {}};
    STRAIT_ASSIGN_OR_RETURN(
        t.values,
        DecodeSafetensorsTensor(e, file.substr(header.data_start + e.begin, e.end - e.begin)));
    tensors.push_back(std::move(t));
  }
  return tensors;
}

}  // namespace strait::site
