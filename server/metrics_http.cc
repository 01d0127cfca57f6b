#include "server/metrics_http.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace nmt::server {
namespace {

constexpr size_t kMaxRequestBytes = 16384;
constexpr int kClientTimeoutMs = 2000;

void write_all(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

std::string response(const char* status, const char* content_type, const std::string& body) {
  return std::string("HTTP/1.1 ") + status + "\r\nContent-Type: " + content_type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
         body;
}

}  // namespace

MetricsHttpServer::MetricsHttpServer(const std::string& host, int port,
                                     std::function<std::string()> body)
    : body_(std::move(body)) {
  const std::string address = host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found) {
    throw std::runtime_error("cannot resolve the metrics address " + address);
  }
  listen_fd_ = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const bool bound = listen_fd_ >= 0 && bind(listen_fd_, found->ai_addr, found->ai_addrlen) == 0 &&
                     listen(listen_fd_, 16) == 0;
  const int error = errno;
  freeaddrinfo(found);
  if (!bound) {
    if (listen_fd_ >= 0) close(listen_fd_);
    throw std::runtime_error("cannot listen on " + address + ": " + std::strerror(error));
  }
  if (pipe2(wake_pipe_, O_CLOEXEC) != 0) {
    close(listen_fd_);
    throw std::runtime_error("pipe2 failed");
  }
  thread_ = std::thread([this] { run(); });
}

MetricsHttpServer::~MetricsHttpServer() {
  const char byte = 0;
  if (write(wake_pipe_[1], &byte, 1) != 1) {
    // The thread also stops when the pipe closes below; nothing else to do.
  }
  if (thread_.joinable()) thread_.join();
  close(listen_fd_);
  close(wake_pipe_[0]);
  close(wake_pipe_[1]);
}

void MetricsHttpServer::run() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents) return;
    if (fds[0].revents & POLLIN) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        serve_connection(fd);
        close(fd);
      }
    }
  }
}

void MetricsHttpServer::serve_connection(int fd) {
  timeval timeout{kClientTimeoutMs / 1000, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  std::string request;
  char buf[4096];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < kMaxRequestBytes) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return;
    request.append(buf, static_cast<size_t>(n));
  }
  const std::string line = request.substr(0, request.find("\r\n"));
  const bool metrics = line.rfind("GET /metrics ", 0) == 0 || line.rfind("GET /metrics?", 0) == 0;
  if (!metrics) {
    write_all(fd, response("404 Not Found", "text/plain", "only GET /metrics is served here\n"));
    return;
  }
  write_all(fd, response("200 OK", "text/plain; version=0.0.4; charset=utf-8", body_()));
}

}  // namespace nmt::server
