#pragma once
// The web page at `/` on the HTTP port (server/web/page/: plain HTML, CSS and JavaScript over
// LibreTranslate's API), compiled into the binary by embed.cmake: the server serves it with
// no files beside it, and the page loads nothing from elsewhere (it works offline).
#include <string>
#include <string_view>
#include <vector>

namespace nmt::server {

struct WebAsset {
  std::string_view url;           // "/", "/page/app.js", ...
  std::string_view content_type;  // with its charset
  std::string_view bytes;
};

// Every file of the page (the generated web_assets.cc).
const std::vector<WebAsset>& web_assets();

// The file served at `url` (the path, without the query), or nullptr.
const WebAsset* find_web_asset(std::string_view url);

// The Content-Security-Policy the page is served with: its own files and API only, so that a
// change that reached for an outside asset fails in the browser test instead of offline.
constexpr const char* kWebPagePolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

}  // namespace nmt::server
