// Arbitrary bytes as the body of a form POST to the HTTP front (server/http/http_front.h):
// libmicrohttpd's multipart/form-data (or, by the first byte, url-encoded) parser and the
// front's field and file-name collection, over a real loopback connection to one HttpFront
// started once. Every request must be answered (the handler echoes the fields it got); no
// crash, leak or sanitizer report.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "server/http/http_front.h"

namespace {

// A loopback port free now (the kernel's choice), for the front to listen on.
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    abort();
  }
  close(fd);
  return ntohs(address.sin_port);
}

int port() {
  static const int p = free_port();
  return p;
}

void start_front() {
  static std::unique_ptr<nmt::server::HttpFront> front = [] {
    nmt::server::HttpLimits limits;
    return std::make_unique<nmt::server::HttpFront>(
        "127.0.0.1", port(), limits, 1 << 20,
        [](const nmt::server::HttpRequest& request, nmt::server::HttpFront::Respond respond) {
          nmt::server::HttpAnswer answer;
          for (const auto& [name, value] : request.form) answer.body += name + "=" + std::to_string(value.size()) + ";";
          for (const auto& [name, file] : request.form_filenames) answer.body += name + ":" + file + ";";
          respond(std::move(answer));
        });
  }();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  start_front();
  if (size < 1) return 0;
  const std::string type = data[0] & 1 ? "application/x-www-form-urlencoded"
                                       : "multipart/form-data; boundary=XyZ";
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::string request = "POST /f HTTP/1.1\r\nHost: f\r\nConnection: close\r\nContent-Type: " + type +
                              "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port()));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) abort();
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  std::string answer;
  char buffer[4096];
  for (ssize_t n; (n = recv(fd, buffer, sizeof buffer, 0)) > 0;) answer.append(buffer, static_cast<size_t>(n));
  close(fd);
  if (answer.compare(0, 12, "HTTP/1.1 200") != 0) abort();  // every form is answered
  return 0;
}
