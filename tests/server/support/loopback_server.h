#pragma once
// The real nmt-server of a gRPC test on free loopback ports: a config written in a temp
// folder of its own, the process (server_process.h), a channel to it, and a bounded wait
// for health SERVING. The suites that drive the binary over gRPC (server.grpc.integration,
// server.markup.markup_server) start theirs with it.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/server/support/server_process.h"

namespace nmt::test {

class LoopbackServer {
 public:
  // Writes `config_yaml` to PREFIX-PID/config.yaml under the temp folder and starts the
  // binary on it with `extra_args` (the log: server.log there). Throws std::runtime_error
  // when no port is free.
  LoopbackServer(const std::string& prefix, const std::string& config_yaml,
                 const std::vector<std::string>& extra_args = {})
      : dir_(dir_for(prefix)) {
    std::filesystem::create_directories(dir_);
    const std::filesystem::path config = dir_ / "config.yaml";
    std::ofstream(config) << config_yaml;
    port_ = free_port();
    metrics_port_ = free_port();
    std::vector<std::string> args = {"--config", config.string(), "--device", "cpu", "--host", "127.0.0.1",
                                     "--port", std::to_string(port_), "--metrics-host", "127.0.0.1",
                                     "--metrics-port", std::to_string(metrics_port_)};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    process_ = std::make_unique<ServerProcess>(NMT_SERVER_BIN, args, (dir_ / "server.log").string());
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(port_), grpc::InsecureChannelCredentials());
  }
  // The process is stopped (ServerProcess kills one still running) and the folder removed.
  ~LoopbackServer() {
    process_.reset();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  LoopbackServer(const LoopbackServer&) = delete;
  LoopbackServer& operator=(const LoopbackServer&) = delete;

  // The folder a server of `prefix` gets (for arguments that name a file in it).
  static std::filesystem::path dir_for(const std::string& prefix) {
    return std::filesystem::temp_directory_path() / (prefix + std::to_string(getpid()));
  }

  // "" once health answers SERVING (the model loaded), within `seconds`; else why not, with
  // the server's log.
  std::string wait_serving(int seconds = 90) {
    auto health = grpc::health::v1::Health::NewStub(channel_);
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (std::chrono::steady_clock::now() < end && process_->running()) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
      grpc::health::v1::HealthCheckResponse response;
      if (health->Check(&ctx, {}, &response).ok() &&
          response.status() == grpc::health::v1::HealthCheckResponse::SERVING)
        return "";
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return "nmt-server never became SERVING\n" + process_->log();
  }

  const std::filesystem::path& dir() const { return dir_; }
  int port() const { return port_; }
  int metrics_port() const { return metrics_port_; }
  ServerProcess& process() { return *process_; }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

 private:
  std::filesystem::path dir_;
  int port_ = 0, metrics_port_ = 0;
  std::unique_ptr<ServerProcess> process_;
  std::shared_ptr<grpc::Channel> channel_;
};

}  // namespace nmt::test
