#include "server/web/web_page.h"

namespace nmt::server {

const WebAsset* find_web_asset(std::string_view url) {
  if (url == "/index.html") url = "/";
  for (const WebAsset& asset : web_assets()) {
    if (asset.url == url) return &asset;
  }
  return nullptr;
}

}  // namespace nmt::server
