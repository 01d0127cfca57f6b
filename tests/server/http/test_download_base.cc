// translatedFileUrl's scheme and host (server/http/file_api.h, download_base): the Host
// header and http:// by default, whatever X-Forwarded-* say; with
// server.trust_forwarded_headers a TLS-terminating proxy's X-Forwarded-Proto and
// X-Forwarded-Host, their first values; a trusted header that is no scheme or host refused
// naming it.
#include <gtest/gtest.h>

#include "server/http/file_api.h"

namespace nmt::server {
namespace {

HttpRequest request(std::map<std::string, std::string> headers) {
  HttpRequest r;
  r.headers = std::move(headers);
  return r;
}

TEST(DownloadBase, UntrustedForwardedHeadersAreIgnored) {
  const HttpRequest r = request({{"host", "10.0.0.5:5000"}, {"x-forwarded-proto", "https"},
                                 {"x-forwarded-host", "evil.test"}});
  EXPECT_EQ(download_base(r, false), "http://10.0.0.5:5000");
  EXPECT_EQ(download_base(request({}), false), "http://localhost");
}

TEST(DownloadBase, ATrustedProxysSchemeAndHostAreTaken) {
  EXPECT_EQ(download_base(request({{"host", "10.0.0.5:5000"}, {"x-forwarded-proto", "https"},
                                   {"x-forwarded-host", "translate.example.org"}}), true),
            "https://translate.example.org");
  // Only the scheme: the Host header (the proxy passed it on).
  EXPECT_EQ(download_base(request({{"host", "translate.example.org"}, {"x-forwarded-proto", "HTTPS"}}), true),
            "https://translate.example.org");
  // A chain of proxies: the first (the client's side) counts.
  EXPECT_EQ(download_base(request({{"host", "a"}, {"x-forwarded-proto", " https , http"},
                                   {"x-forwarded-host", "x.example.org:8443, inner"}}), true),
            "https://x.example.org:8443");
  EXPECT_EQ(download_base(request({{"host", "a:1"}}), true), "http://a:1");
  EXPECT_EQ(download_base(request({{"x-forwarded-host", "[::1]:8443"}}), true), "http://[::1]:8443");
}

TEST(DownloadBase, ATrustedHeaderThatIsNoSchemeOrHostIsRefusedNamingIt) {
  try {
    download_base(request({{"host", "a"}, {"x-forwarded-proto", "ftp"}}), true);
    ADD_FAILURE() << "accepted";
  } catch (const LibreTranslateError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.message, "Invalid request: X-Forwarded-Proto must be http or https, got \"ftp\" "
                         "(server.trust_forwarded_headers is on)");
  }
  for (const char* host : {"evil.test/x?", "user@evil.test", "a b", "x#y"}) {
    try {
      download_base(request({{"host", "a"}, {"x-forwarded-host", host}}), true);
      ADD_FAILURE() << host << " accepted";
    } catch (const LibreTranslateError& e) {
      EXPECT_EQ(e.status, 400);
      EXPECT_NE(e.message.find("X-Forwarded-Host"), std::string::npos) << e.message;
    }
  }
}

}  // namespace
}  // namespace nmt::server
