// nmt-server: loads the configured models and serves nmt.v1.TranslationService,
// nmt.v1.ModelControl, the standard health service and reflection over gRPC, and Prometheus
// metrics on /metrics. SIGHUP: the model repository is listed again (new, removed and
// changed models). SIGTERM or SIGINT: health turns NOT_SERVING, new calls are refused,
// in-flight calls get up to shutdown_grace_seconds to finish, then the process exits 0.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "server/app/abseil_locks.h"
#include "server/config/config.h"
#include "server/grpc/health_service.h"
#include "server/grpc/model_control_service.h"
#include "server/grpc/queue_threads.h"
#include "server/grpc/translation_service.h"
#include "server/http/http_api.h"
#include "server/http/metrics_endpoint.h"
#include "server/observability/logging.h"
#include "server/observability/metrics.h"
#include "server/repository/model_registry.h"

namespace {

using namespace nmt::server;

// Threads of gRPC's synchronous server (reflection calls in flight).
constexpr int kSyncServerThreads = 16;

// Blocked in every thread (threads inherit the mask), so that only sigwait() in main sees
// them: no work happens inside a signal handler. SIGTERM/SIGINT stop the server, SIGHUP
// reloads what can change without a restart (the bearer tokens, the model repository).
sigset_t handled_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  return set;
}

// SIGHUP: the bearer tokens are read again from server.auth_token_file. A file that cannot
// be read or holds no token changes nothing (the tokens accepted so far stay) and is logged.
void reload_auth(BearerAuth& auth, const ServerConfig& config) {
  if (config.auth_token_file.empty()) return;
  try {
    const size_t tokens = auth.reload();
    log_event(spdlog::level::info, "bearer tokens reloaded",
              {{"file", config.auth_token_file}, {"tokens", tokens}});
  } catch (const std::exception& e) {
    log_event(spdlog::level::err, "bearer tokens not reloaded: the accepted tokens stay as they were",
              {{"error", e.what()}});
  }
}

std::string read_file(const std::string& path, const char* key) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  if (in) text << in.rdbuf();
  if (!in || text.str().empty()) throw std::runtime_error(std::string("cannot read ") + key + " " + path);
  return text.str();
}

// TLS from the PEM files when configured, else plaintext. With a client CA file, mutual
// TLS: a client must present a certificate that the CA file verifies, else its handshake
// fails.
std::shared_ptr<grpc::ServerCredentials> server_credentials(const ServerConfig& config) {
  if (config.tls_cert_file.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options;
  options.pem_key_cert_pairs.push_back({read_file(config.tls_key_file, "server.tls_key_file"),
                                        read_file(config.tls_cert_file, "server.tls_cert_file")});
  if (!config.tls_client_ca_file.empty()) {
    options.pem_root_certs = read_file(config.tls_client_ca_file, "server.tls_client_ca_file");
    options.client_certificate_request =
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

int serve(const ServerConfig& config) {
  std::shared_ptr<grpc::ServerCredentials> credentials;
  BearerAuth auth;
  try {
    credentials = server_credentials(config);
    if (!config.auth_token_file.empty()) auth = BearerAuth::from_file(config.auth_token_file);
  } catch (const std::exception& e) {
    log_event(spdlog::level::critical, "startup failed", {{"error", e.what()}});
    return 1;
  }
  if (auth.enabled() && config.tls_cert_file.empty()) {
    log_event(spdlog::level::warn, "bearer tokens travel in plaintext: configure server.tls_cert_file");
  }

  Metrics metrics;
  std::unique_ptr<MetricsEndpoint> metrics_endpoint;
  const std::string metrics_address =
      config.metrics_host + ":" + std::to_string(config.metrics_port);
  try {
    metrics_endpoint = std::make_unique<MetricsEndpoint>(
        config.metrics_host, config.metrics_port, [&metrics] { return metrics.scrape(); },
        metrics_endpoint_limits(), &metrics.http_connections("metrics"));
  } catch (const std::exception& e) {
    log_event(spdlog::level::critical, "cannot serve /metrics",
              {{"address", metrics_address}, {"error", e.what()}});
    return 1;
  }

  std::unique_ptr<ModelRegistry> models;
  try {
    models = std::make_unique<ModelRegistry>(config, metrics);
  } catch (const std::exception& e) {
    log_event(spdlog::level::critical, "startup failed", {{"error", e.what()}});
    return 1;
  }

  // A call waiting for its translation holds no thread; SIGTERM's Shutdown
  // waits (up to the grace period, then cancels) until every call has finished.
  ModelControlService control(*models, auth);
  RequestPipeline pipeline(*models, config.limits, metrics, config.max_concurrent_calls,
                           size_t(config.translation_cache_mb) << 20);
  TranslationService service(pipeline, *models, auth,
                             config.connections.max_stream_messages_in_flight,
                             config.trust_tenant_header);
  // The HTTP/JSON API, when http.port is set: before gRPC listens, so that a port already
  // taken stops the server at start.
  std::unique_ptr<HttpApi> http;
  if (config.http_port != 0) {
    try {
      http = std::make_unique<HttpApi>(config.http_host, config.http_port, config.http_limits,
                                       static_cast<size_t>(config.max_message_bytes), pipeline,
                                       *models, auth, metrics, config.trust_tenant_header, config.documents,
                                       config.trust_forwarded_headers);
    } catch (const std::exception& e) {
      log_event(spdlog::level::critical, "cannot serve the HTTP API", {{"error", e.what()}});
      return 1;
    }
    if (auth.enabled()) {
      log_event(spdlog::level::warn, "the HTTP API has no TLS: API keys travel in plaintext unless a TLS proxy fronts it");
    }
  }
  HealthService health;
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // TranslationService's calls and the health service's hold no thread: they are served on
  // the asynchronous API by the queue's threads (queue_threads.h). Reflection, ModelControl
  // and ListModels are synchronous: each of their calls in flight holds a thread, so a client
  // opening streams by the thousand would add threads by the thousand; the quota caps them
  // (a call beyond it is refused RESOURCE_EXHAUSTED). No other service draws on it.
  grpc::ResourceQuota thread_quota("nmt-server");
  thread_quota.SetMaxThreads(kSyncServerThreads);
  builder.SetResourceQuota(thread_quota);
  const std::string address = config.host + ":" + std::to_string(config.port);
  builder.AddListeningPort(address, credentials);
  // gRPC removes a socket file left at the path by an earlier run before binding it.
  if (!config.unix_socket.empty()) builder.AddListeningPort("unix:" + config.unix_socket, credentials);
  builder.SetMaxReceiveMessageSize(config.max_message_bytes);
  builder.SetMaxSendMessageSize(config.max_message_bytes);
  apply_connection_limits(config.connections, builder);
  builder.RegisterService(&service);
  builder.RegisterService(&control);
  builder.RegisterService(health.service());
  std::unique_ptr<grpc::ServerCompletionQueue> queue = builder.AddCompletionQueue();
  QueueThreads queue_threads(*queue, config.translate_threads);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server) {
    nlohmann::ordered_json fields = {{"address", address}};
    if (!config.unix_socket.empty()) fields["unix_socket"] = config.unix_socket;
    if (!config.tls_cert_file.empty()) {
      fields["hint"] = "check that server.tls_cert_file and tls_key_file are a PEM certificate and its key"
                       " (and tls_client_ca_file PEM CA certificates)";
    }
    log_event(spdlog::level::critical, "cannot listen", fields);
    return 1;
  }
  service.start(*queue, config.translate_threads);
  health.start(*queue);
  queue_threads.start();
  // "" (the whole server, what Kubernetes' grpc probes ask) and the service by name.
  health.set(nmt::v1::TranslationService::service_full_name(), true);
  health.set("", true);
  log_event(spdlog::level::info, "serving",
            {{"address", address},
             {"unix_socket", config.unix_socket.empty() ? "off" : config.unix_socket},
             {"metrics", metrics_address},
             {"tls", !config.tls_cert_file.empty()},
             {"client_certificates", !config.tls_client_ca_file.empty()},
             {"auth", !config.auth_token_file.empty()},
             {"http", http ? config.http_host + ":" + std::to_string(config.http_port) : "off"}});

  // The one place signals are handled. SIGHUP: reload what can be reloaded in place.
  const sigset_t signals = handled_signals();
  int signal_number = 0;
  while (sigwait(&signals, &signal_number) == 0 && signal_number == SIGHUP) {
    log_event(spdlog::level::info, "SIGHUP: reloading");
    reload_auth(auth, config);  // the bearer tokens
    models->rescan();           // the model repository: new, removed and changed models
  }
  log_event(spdlog::level::info, "shutting down",
            {{"signal", signal_number == SIGTERM ? "SIGTERM" : "SIGINT"},
             {"grace_seconds", config.shutdown_grace_seconds}});
  health.shutdown();
  if (http) http->stop();  // its requests in translation finish first
  const auto grace = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(config.shutdown_grace_seconds));
  server->Shutdown(std::chrono::system_clock::now() + grace);
  server->Wait();
  queue_threads.stop();
  service.wait_for_calls();
  models->stop();
  log_event(spdlog::level::info, "stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  nmt::server::skip_abseil_deadlock_detection();
  const sigset_t signals = handled_signals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  ServerConfig config;
  try {
    const CommandLine command_line = parse_command_line(argc, argv);
    if (command_line.help) {
      std::cout << usage("nmt-server");
      return 0;
    }
    config = load_config(command_line);
  } catch (const ConfigError& e) {
    std::cerr << "nmt-server: " << e.what() << "\n";
    return 2;
  }
  setup_logging(config.log_format, config.log_level);
  return serve(config);
}
