#include "site/data/token_index.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace strait::site {
namespace {

using Json = nlohmann::json;

constexpr char kFormatName[] = "strait-token-shards";
// Bounds that keep every sum and product below 2^63 (2^48 tokens = 1 PiB of uint32).
constexpr int64_t kMaxTokens = int64_t{1} << 48;
constexpr int64_t kMaxBytes = int64_t{1} << 56;
constexpr size_t kMaxIndexBytes = size_t{1} << 31;
constexpr size_t kMaxFileName = 255;

absl::Status Corrupt(const std::string& path, absl::string_view field, absl::string_view what) {
  return absl::DataLossError(absl::StrCat(path, ": ", field, ": ", what,
                                          "; the index is damaged or not of this version: run "
                                          "`strait data prepare` again"));
}

// obj[key] as an integer in [min, max].
absl::StatusOr<int64_t> Integer(const Json& obj, const char* key, const std::string& field,
                                int64_t min, int64_t max, const std::string& path) {
  const auto it = obj.find(key);
  if (it == obj.end()) return Corrupt(path, field, "missing");
  if (!it->is_number_integer()) return Corrupt(path, field, "not an integer");
  int64_t v = 0;
  if (it->is_number_unsigned()) {
    const uint64_t u = it->get<uint64_t>();
    if (u > static_cast<uint64_t>(max)) {
      return Corrupt(path, field, absl::StrCat(u, " is above ", max));
    }
    v = static_cast<int64_t>(u);
  } else {
    v = it->get<int64_t>();
  }
  if (v < min || v > max) {
    return Corrupt(path, field, absl::StrCat(v, " is outside [", min, ", ", max, "]"));
  }
  return v;
}

absl::StatusOr<std::string> String(const Json& obj, const char* key, const std::string& field,
                                   const std::string& path) {
  const auto it = obj.find(key);
  if (it == obj.end()) return Corrupt(path, field, "missing");
  if (!it->is_string()) return Corrupt(path, field, "not a string");
  return it->get<std::string>();
}

// A shard's file name: a plain name inside the directory, never a path out of it.
bool PlainFileName(const std::string& name) {
  if (name.empty() || name.size() > kMaxFileName || name == "." || name == "..") return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '-' || c == '_';
    if (!ok) return false;
  }
  return true;
}

absl::Status ParseHeader(const Json& j, const std::string& path, TokenIndex& index) {
  STRAIT_ASSIGN_OR_RETURN(const std::string format, String(j, "format", "format", path));
  if (format != kFormatName) {
    return Corrupt(path, "format", absl::StrCat("'", format, "', expected '", kFormatName, "'"));
  }
  STRAIT_ASSIGN_OR_RETURN(const int64_t version,
                          Integer(j, "version", "version", 0, INT32_MAX, path));
  if (version != kTokenIndexVersion) {
    return Corrupt(path, "version",
                   absl::StrCat(version, ", this build reads version ", kTokenIndexVersion));
  }
  STRAIT_ASSIGN_OR_RETURN(const std::string dtype, String(j, "dtype", "dtype", path));
  if (dtype != "uint16" && dtype != "uint32") {
    return Corrupt(path, "dtype", absl::StrCat("'", dtype, "', expected uint16 or uint32"));
  }
  index.dtype = dtype == "uint16" ? TokenDtype::kUint16 : TokenDtype::kUint32;
  const int64_t max_vocab = index.dtype == TokenDtype::kUint16 ? 65536 : INT32_MAX;
  STRAIT_ASSIGN_OR_RETURN(const int64_t vocab, Integer(j, "vocab", "vocab", 1, max_vocab, path));
  index.vocab = static_cast<int>(vocab);
  STRAIT_ASSIGN_OR_RETURN(index.tokenizer, String(j, "tokenizer", "tokenizer", path));
  if (index.tokenizer.empty()) return Corrupt(path, "tokenizer", "empty");
  STRAIT_ASSIGN_OR_RETURN(index.tokens, Integer(j, "tokens", "tokens", 1, kMaxTokens, path));
  return absl::OkStatus();
}

absl::Status ParseShards(const Json& j, const std::string& path, TokenIndex& index) {
  const auto it = j.find("shards");
  if (it == j.end() || !it->is_array() || it->empty()) {
    return Corrupt(path, "shards", "missing, not an array, or empty");
  }
  const int width = TokenWidth(index.dtype);
  std::set<std::string> files;
  int64_t sum = 0;
  for (size_t k = 0; k < it->size(); ++k) {
    const Json& s = (*it)[k];
    const std::string field = absl::StrCat("shards[", k, "]");
    if (!s.is_object()) return Corrupt(path, field, "not an object");
    TokenShard shard;
    STRAIT_ASSIGN_OR_RETURN(shard.file, String(s, "file", field + ".file", path));
    if (!PlainFileName(shard.file)) {
      return Corrupt(path, field + ".file", "not a plain file name inside the directory");
    }
    if (!files.insert(shard.file).second) {
      return Corrupt(path, field + ".file", absl::StrCat("'", shard.file, "' is named twice"));
    }
    STRAIT_ASSIGN_OR_RETURN(shard.tokens,
                            Integer(s, "tokens", field + ".tokens", 1, kMaxTokens, path));
    STRAIT_ASSIGN_OR_RETURN(shard.bytes, Integer(s, "bytes", field + ".bytes", 0, kMaxBytes, path));
    if (shard.bytes != shard.tokens * width) {
      return Corrupt(path, field + ".bytes",
                     absl::StrCat(shard.bytes, " for ", shard.tokens, " tokens of ", width,
                                  " bytes (", ToString(index.dtype), ")"));
    }
    sum += shard.tokens;
    if (sum > index.tokens) {
      return Corrupt(
          path, field + ".tokens",
          absl::StrCat("the shards hold more than the index's ", index.tokens, " tokens"));
    }
    index.shards.push_back(std::move(shard));
  }
  if (sum != index.tokens) {
    return Corrupt(path, "tokens",
                   absl::StrCat(index.tokens, ", but the shards hold ", sum, " tokens"));
  }
  return absl::OkStatus();
}

absl::Status ParseDocuments(const Json& j, const std::string& path, TokenIndex& index) {
  const auto it = j.find("documents");
  if (it == j.end() || !it->is_array() || it->empty()) {
    return Corrupt(path, "documents", "missing, not an array, or empty");
  }
  int64_t next = 0;
  index.documents.reserve(it->size());
  for (size_t k = 0; k < it->size(); ++k) {
    const Json& d = (*it)[k];
    const std::string field = absl::StrCat("documents[", k, "]");
    if (!d.is_object()) return Corrupt(path, field, "not an object");
    TokenDocument doc;
    STRAIT_ASSIGN_OR_RETURN(doc.offset,
                            Integer(d, "offset", field + ".offset", 0, kMaxTokens, path));
    if (doc.offset != next) {
      return Corrupt(path, field + ".offset",
                     absl::StrCat(doc.offset, ", but the documents before it end at ", next,
                                  " (documents tile the tokens in order)"));
    }
    STRAIT_ASSIGN_OR_RETURN(doc.tokens,
                            Integer(d, "tokens", field + ".tokens", 0, kMaxTokens, path));
    STRAIT_ASSIGN_OR_RETURN(doc.bytes, Integer(d, "bytes", field + ".bytes", 0, kMaxBytes, path));
    next += doc.tokens;
    if (next > index.tokens) {
      return Corrupt(path, field + ".tokens",
                     absl::StrCat("the document ends at token ", next, ", past the index's ",
                                  index.tokens, " tokens"));
    }
    index.documents.push_back(doc);
  }
  if (next != index.tokens) {
    return Corrupt(path, "documents",
                   absl::StrCat("they end at token ", next, " of ", index.tokens));
  }
  return absl::OkStatus();
}

}  // namespace

const char* ToString(TokenDtype dtype) {
  return dtype == TokenDtype::kUint16 ? "uint16" : "uint32";
}

std::string FormatTokenIndex(const TokenIndex& index) {
  nlohmann::ordered_json j;
  j["format"] = kFormatName;
  j["version"] = kTokenIndexVersion;
  j["dtype"] = ToString(index.dtype);
  j["vocab"] = index.vocab;
  j["tokenizer"] = index.tokenizer;
  j["tokens"] = index.tokens;
  j["shards"] = nlohmann::ordered_json::array();
  for (const TokenShard& s : index.shards) {
    j["shards"].push_back({{"file", s.file}, {"tokens", s.tokens}, {"bytes", s.bytes}});
  }
  // One line per document: a corpus of many documents stays readable and diffable.
  std::string out = j.dump(1);
  out.resize(out.size() - 2);  // "\n}"
  out += ",\n \"documents\": [";
  for (size_t k = 0; k < index.documents.size(); ++k) {
    const TokenDocument& d = index.documents[k];
    absl::StrAppend(&out, k == 0 ? "\n  " : ",\n  ", "{\"offset\": ", d.offset,
                    ", \"tokens\": ", d.tokens, ", \"bytes\": ", d.bytes, "}");
  }
  out += "\n ]\n}\n";
  return out;
}

absl::StatusOr<TokenIndex> ParseTokenIndex(absl::string_view json, const std::string& path) {
  if (json.size() > kMaxIndexBytes) {
    return Corrupt(path, "the file", absl::StrCat(json.size(), " bytes, more than an index holds"));
  }
  const Json j = Json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Corrupt(path, "the file", "not a JSON object");
  TokenIndex index;
  STRAIT_RETURN_IF_ERROR(ParseHeader(j, path, index));
  STRAIT_RETURN_IF_ERROR(ParseShards(j, path, index));
  STRAIT_RETURN_IF_ERROR(ParseDocuments(j, path, index));
  return index;
}

absl::StatusOr<TokenIndex> ReadTokenIndex(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / kTokenIndexFile).string();
  if (std::error_code error; std::filesystem::is_regular_file(dir, error)) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir,
        ": a file, but data.format: tokens reads a directory of token shards; make one with "
        "`strait data prepare --input ",
        dir, " --tokenizer bytes|MODEL --out DIR`, or read the text with data.format: text"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(
        path,
        ": cannot open the token shards' index (data.path with format: tokens); make it "
        "with `strait data prepare --input FILE... --tokenizer bytes|MODEL --out ",
        dir, "`"));
  }
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return ParseTokenIndex(text, path);
}

}  // namespace strait::site
