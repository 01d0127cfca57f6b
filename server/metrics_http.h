#pragma once
// A minimal HTTP listener for Prometheus scrapes: GET /metrics answers the text exposition
// format, anything else 404. It replaces prometheus::Exposer, whose civetweb worker threads
// (Debian: fixed ~100 KB stacks) overflow in this process: OpenBLAS alone puts ~60 KB of
// static TLS at the top of every thread's stack, and the scrape handler's printf crashed.
// Scrapes are rare and small, so one thread serves connections one at a time.
#include <atomic>
#include <functional>
#include <string>
#include <thread>

namespace nmt::server {

class MetricsHttpServer {
 public:
  // Binds host:port (throws std::runtime_error naming the address on failure) and starts
  // serving; `body` renders the page.
  MetricsHttpServer(const std::string& host, int port, std::function<std::string()> body);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

 private:
  void run();
  void serve_connection(int fd);

  std::function<std::string()> body_;
  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  std::thread thread_;
};

}  // namespace nmt::server
