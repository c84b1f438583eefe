#include "gateway/http/web_assets.h"

namespace strait::gateway {

const WebAsset* FindWebAsset(std::string_view path) {
  if (path == "/") path = "/index.html";
  for (const WebAsset& asset : EmbeddedWebAssets()) {
    if (asset.path == path) return &asset;
  }
  return nullptr;
}

std::string_view ContentTypeOf(std::string_view path) {
  if (path.ends_with(".html")) return "text/html; charset=utf-8";
  if (path.ends_with(".js")) return "text/javascript; charset=utf-8";
  if (path.ends_with(".css")) return "text/css; charset=utf-8";
  if (path.ends_with(".svg")) return "image/svg+xml";
  return "application/octet-stream";
}

}  // namespace strait::gateway
