#pragma once
// Server configuration: the YAML file (configs/default.yaml documents every key) with
// command-line flags on top. Unknown keys and flags, wrong types and out-of-range values
// are errors (ConfigError) whose message names the key or flag.
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "server/config/connection_limits.h"
#include "server/config/http_limits.h"
#include "server/documents/document_limits.h"
#include "server/pipeline/limits.h"
#include "server/scheduling/scheduling_options.h"

namespace nmt::server {

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ModelEntry {
  std::string name;
  std::string path;  // absolute, or relative to the working directory when given so
  std::string device = "auto";        // auto | cpu | cuda
  std::string precision = "float16";  // float16 | float32 | int8 (CUDA: 8.0+) | fp8 (CUDA 8.9+ only)
  // Memory each engine may hold (the CUDA engine's allocations; on the CPU its persistent
  // decode state). A decode loop whose state does not fit stops the server at start; a
  // KV-cache growth over it fails the sentences that needed it RESOURCE_EXHAUSTED (the
  // loop's others go on). 0 = no cap.
  int device_memory_limit_mb = 0;
  // Decode loops (engine copies) of this model, each on its own thread, all fed from the
  // model's one queue: one loop's host-side beam bookkeeping overlaps another's device
  // steps (GPU), or the loops run on separate cores (CPU, one BLAS thread each). Each loop
  // has the batching.max_active_* capacity of its own.
  int workers = 1;
  // GPUs of the model's replicas (nvidia-smi order): one replica (its own engines and decode
  // loops) per listed GPU, requests going to the least loaded. Empty = GPU 0 only;
  // all_devices = every visible GPU. A CPU model has one replica whatever is listed.
  std::vector<int> devices;
  bool all_devices = false;
  // CPU: cores each loop's decode steps use (oneDNN GEMMs, attention rows). 0 = the
  // machine's cores shared out evenly between the workers.
  int threads = 0;
};

// The `model_repository:` section: every subfolder of `path` holding an OPUS-MT-layout model
// (config.json, model.safetensors, source.spm, target.spm, vocab.json) is a model named by
// its folder, loaded on its first request. A `models:` entry of the same name (without a
// path) gives its settings; the others take the defaults below.
struct RepositoryConfig {
  std::string path;  // empty = no repository
  // Memory of loaded repository models on each device (each GPU; host memory on the CPU),
  // MiB; 0 = no budget. Over it the least recently used idle model is unloaded first.
  int memory_budget_mb = 0;
  std::vector<std::string> preload;  // loaded at start, in this order
  ModelEntry defaults;               // settings of repository models without a models: entry
};

struct ServerConfig {
  std::string host = "0.0.0.0";
  int port = 50051;
  // Also serve gRPC on this Unix domain socket (empty: not): for clients on the same host,
  // such as a proxy in the same pod, whose calls then skip the TCP stack.
  std::string unix_socket;
  std::string metrics_host = "127.0.0.1";
  int metrics_port = 9464;
  int max_message_bytes = 4 << 20;
  std::string log_format = "text";  // text | json
  std::string log_level = "info";   // trace | debug | info | warn | error | critical | off
  double shutdown_grace_seconds = 30;
  // TLS: both PEM files, or neither (plaintext). Relative paths resolve like model paths.
  std::string tls_cert_file;
  std::string tls_key_file;
  // Mutual TLS: PEM CA certificates that verify client certificates; a client without one
  // they verify cannot connect. Needs tls_cert_file. Empty = clients need no certificate.
  std::string tls_client_ca_file;
  // Bearer-token authentication of TranslationService: a file with one accepted token per
  // line (rotation: list old and new, then SIGHUP re-reads the file). Empty = no
  // authentication. Health stays open.
  std::string auth_token_file;
  // Unary calls and streams in flight on the whole server; one more is refused with
  // RESOURCE_EXHAUSTED at once (bounds the server's per-call memory, whatever the queue).
  int max_concurrent_calls = 4096;
  // Threads on the completion queue of Translate, TranslateStream and the health service
  // (gRPC's asynchronous API; queue_threads.h), the most at once: one while calls are few.
  // They parse, validate and submit each call and start its answer, never waiting on one.
  // 4: 256 single-sentence clients on H200 machines of 16 cores were served at 77-97% of
  // offline batch 256 with 4, 81-85% with 2 or 8, 56% with 1 (server run 37).
  int translate_threads = 4;
  // The HTTP/JSON API (server/http/http_api.h): off while http_port is 0.
  std::string http_host = "0.0.0.0";
  int http_port = 0;
  HttpLimits http_limits;  // http.max_connections ... http.threads
  // Fairness and the translation cache (docs/server.md, "Fairness, quotas and the cache").
  // The tenant of fair queueing is the API key when server.auth_token_file is set, else the
  // peer's address; with trust_tenant_header, the x-tenant metadata (gRPC) or header (HTTP)
  // when a request carries one: only behind a proxy that sets it (a client could otherwise
  // claim any tenant).
  bool trust_tenant_header = false;
  // With trust_forwarded_headers, POST /translate_file's translatedFileUrl takes its scheme
  // and host from X-Forwarded-Proto and X-Forwarded-Host (a TLS-terminating proxy's), else
  // http:// and the Host header: only behind a proxy that sets them (server/http/file_api.h).
  bool trust_forwarded_headers = false;
  // Translated sentences kept for repeats (server/cache/translation_cache.h), MiB; 0 = off.
  int translation_cache_mb = 64;
  ConnectionLimits connections;  // server.max_streams_per_connection ... max_ping_strikes
  Limits limits;
  SchedulingOptions batching;  // the `batching:` section: decode loop and queue capacity
  DocumentLimits documents;    // the `documents:` section: POST /translate_file's bounds and store
  std::vector<ModelEntry> models;  // the first one is the default model
  RepositoryConfig repository;     // the `model_repository:` section
};

// What the command line asked for: the config file and the flag overrides, in order.
struct CommandLine {
  bool help = false;
  std::string config_path;
  std::vector<std::pair<std::string, std::string>> overrides;  // (flag without --, value)
};

// Throws ConfigError for unknown flags or a flag without its value.
CommandLine parse_command_line(int argc, const char* const* argv);
std::string usage(const std::string& program);

// Reads the YAML file, applies the overrides and checks every value. Relative model paths
// resolve against the config file's folder.
ServerConfig load_config(const CommandLine& command_line);
// The same from YAML text (tests); relative paths resolve against base_dir.
ServerConfig parse_config(const std::string& yaml_text, const std::string& base_dir,
                          const std::vector<std::pair<std::string, std::string>>& overrides = {});

}  // namespace nmt::server
