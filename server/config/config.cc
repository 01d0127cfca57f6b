#include "server/config/config.h"

#include <sys/un.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "model/translator.h"

namespace nmt::server {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& message) { throw ConfigError(message); }

int to_int(const YAML::Node& node, const std::string& key, int lo, int hi) {
  int value = 0;
  try {
    value = node.as<int>();
  } catch (const YAML::Exception&) {
    fail(key + ": expected an integer, got '" + node.Scalar() + "'");
  }
  if (value < lo || value > hi) {
    fail(key + ": must be between " + std::to_string(lo) + " and " + std::to_string(hi) +
         ", got " + std::to_string(value));
  }
  return value;
}

double to_seconds(const YAML::Node& node, const std::string& key) {
  double value = 0;
  try {
    value = node.as<double>();
  } catch (const YAML::Exception&) {
    fail(key + ": expected a number of seconds, got '" + node.Scalar() + "'");
  }
  if (!std::isfinite(value) || value < 0) fail(key + ": must be >= 0, got " + node.Scalar());
  return value;
}

bool to_bool(const YAML::Node& node, const std::string& key) {
  const std::string v = node.Scalar();
  if (v == "true") return true;
  if (v == "false") return false;
  fail(key + ": expected true or false, got '" + v + "'");
}

double to_positive_seconds(const YAML::Node& node, const std::string& key) {
  const double value = to_seconds(node, key);
  if (value <= 0) fail(key + ": must be > 0, got " + node.Scalar());
  return value;
}

std::string to_string(const YAML::Node& node, const std::string& key) {
  if (!node.IsScalar() || node.Scalar().empty()) fail(key + ": expected a non-empty string");
  return node.Scalar();
}

std::string to_choice(const YAML::Node& node, const std::string& key,
                      const std::vector<std::string>& choices) {
  const std::string value = to_string(node, key);
  std::string list;
  for (const std::string& c : choices) {
    if (c == value) return value;
    list += (list.empty() ? "" : " | ") + c;
  }
  fail(key + ": must be one of " + list + ", got '" + value + "'");
}

const std::vector<std::string> kLogFormats = {"text", "json"};
const std::vector<std::string> kLogLevels = {"trace", "debug", "info", "warn",
                                             "error", "critical", "off"};
// The model's devices and precisions by name (model/translator.h: one list of each).
template <typename E, size_t N>
std::vector<std::string> names(const E (&values)[N], const char* (*name)(E)) {
  std::vector<std::string> out;
  for (E v : values) out.push_back(name(v));
  return out;
}
const std::vector<std::string> kDeviceNames = names(nmt::kDevices, nmt::device_name);
const std::vector<std::string> kPrecisionNames = names(nmt::kPrecisions, nmt::precision_name);
constexpr int kMaxInt = 1 << 30;

// One scalar setting of the server, limits or batching sections, and its flag.
struct Setting {
  std::string key;   // "section.name"
  std::string flag;  // without the leading --
  std::string help;
  std::function<void(ServerConfig&, const YAML::Node&, const std::string& key)> set;
};

const std::vector<Setting>& settings() {
  using N = const YAML::Node&;
  using K = const std::string&;
  static const std::vector<Setting> table = {
      {"server.host", "host", "gRPC bind address",
       [](ServerConfig& c, N n, K k) { c.host = to_string(n, k); }},
      {"server.port", "port", "gRPC port",
       [](ServerConfig& c, N n, K k) { c.port = to_int(n, k, 1, 65535); }},
      {"server.unix_socket", "unix-socket", "also serve gRPC on this Unix domain socket path",
       [](ServerConfig& c, N n, K k) { c.unix_socket = to_string(n, k); }},
      {"server.metrics_host", "metrics-host", "Prometheus /metrics bind address",
       [](ServerConfig& c, N n, K k) { c.metrics_host = to_string(n, k); }},
      {"server.metrics_port", "metrics-port", "Prometheus /metrics port",
       [](ServerConfig& c, N n, K k) { c.metrics_port = to_int(n, k, 1, 65535); }},
      {"server.max_message_bytes", "max-message-bytes", "largest gRPC message accepted",
       [](ServerConfig& c, N n, K k) { c.max_message_bytes = to_int(n, k, 1024, kMaxInt); }},
      {"server.max_concurrent_calls", "max-concurrent-calls",
       "calls and streams in flight on the server before RESOURCE_EXHAUSTED",
       [](ServerConfig& c, N n, K k) { c.max_concurrent_calls = to_int(n, k, 1, kMaxInt); }},
      {"server.translate_threads", "translate-threads",
       "threads that take Translate calls from gRPC (none waits on a call)",
       [](ServerConfig& c, N n, K k) { c.translate_threads = to_int(n, k, 1, 64); }},
      // What one connection and one stream may hold (connection_limits.h).
      {"server.max_streams_per_connection", "max-streams-per-connection",
       "calls open at once on one connection (more wait in the client)",
       [](ServerConfig& c, N n, K k) {
         c.connections.max_streams_per_connection = to_int(n, k, 1, kMaxInt);
       }},
      {"server.max_stream_messages_in_flight", "max-stream-messages-in-flight",
       "TranslateStream messages read and not yet answered; then reading pauses",
       [](ServerConfig& c, N n, K k) {
         c.connections.max_stream_messages_in_flight = to_int(n, k, 1, 1 << 16);
       }},
      {"server.max_connection_idle_seconds", "max-connection-idle-seconds",
       "a connection without calls this long is closed (0 = never)",
       [](ServerConfig& c, N n, K k) { c.connections.max_connection_idle_seconds = to_seconds(n, k); }},
      {"server.handshake_timeout_seconds", "handshake-timeout-seconds",
       "a connection must finish its HTTP/2 and TLS handshake within this",
       [](ServerConfig& c, N n, K k) {
         c.connections.handshake_timeout_seconds = to_positive_seconds(n, k);
       }},
      {"server.keepalive_time_seconds", "keepalive-time-seconds",
       "ping a connection silent this long (0 = never)",
       [](ServerConfig& c, N n, K k) { c.connections.keepalive_time_seconds = to_seconds(n, k); }},
      {"server.keepalive_timeout_seconds", "keepalive-timeout-seconds",
       "close a connection whose ping is unanswered this long",
       [](ServerConfig& c, N n, K k) {
         c.connections.keepalive_timeout_seconds = to_positive_seconds(n, k);
       }},
      {"server.min_client_ping_interval_seconds", "min-client-ping-interval-seconds",
       "a client ping sooner than this after the last is a strike",
       [](ServerConfig& c, N n, K k) {
         c.connections.min_client_ping_interval_seconds = to_seconds(n, k);
       }},
      {"server.max_ping_strikes", "max-ping-strikes",
       "strikes before GOAWAY too_many_pings (0 = never)",
       [](ServerConfig& c, N n, K k) { c.connections.max_ping_strikes = to_int(n, k, 0, 1000); }},
      {"server.log_format", "log-format", "text | json",
       [](ServerConfig& c, N n, K k) { c.log_format = to_choice(n, k, kLogFormats); }},
      {"server.log_level", "log-level", "trace | debug | info | warn | error | critical | off",
       [](ServerConfig& c, N n, K k) { c.log_level = to_choice(n, k, kLogLevels); }},
      {"server.shutdown_grace_seconds", "shutdown-grace-seconds",
       "on SIGTERM/SIGINT, how long in-flight requests may finish",
       [](ServerConfig& c, N n, K k) { c.shutdown_grace_seconds = to_seconds(n, k); }},
      {"server.tls_cert_file", "tls-cert-file", "PEM certificate chain: serve gRPC over TLS",
       [](ServerConfig& c, N n, K k) { c.tls_cert_file = to_string(n, k); }},
      {"server.tls_key_file", "tls-key-file", "PEM private key of tls_cert_file",
       [](ServerConfig& c, N n, K k) { c.tls_key_file = to_string(n, k); }},
      {"server.tls_client_ca_file", "tls-client-ca-file",
       "PEM CA certificates: clients must present a certificate they verify (mutual TLS)",
       [](ServerConfig& c, N n, K k) { c.tls_client_ca_file = to_string(n, k); }},
      {"server.auth_token_file", "auth-token-file",
       "file of accepted bearer tokens, one per line (SIGHUP re-reads it)",
       [](ServerConfig& c, N n, K k) { c.auth_token_file = to_string(n, k); }},
      {"http.host", "http-host", "HTTP/JSON API bind address",
       [](ServerConfig& c, N n, K k) { c.http_host = to_string(n, k); }},
      {"http.port", "http-port",
       "HTTP/JSON API port (POST /v1/translate, LibreTranslate's /translate); 0 = off",
       [](ServerConfig& c, N n, K k) { c.http_port = to_int(n, k, 0, 65535); }},
      // What the HTTP API's clients may hold (http_limits.h).
      {"http.max_connections", "http-max-connections",
       "HTTP connections open at once; one more is closed",
       [](ServerConfig& c, N n, K k) { c.http_limits.max_connections = to_int(n, k, 1, 1 << 20); }},
      {"http.max_connections_per_address", "http-max-connections-per-address",
       "HTTP connections open at once from one peer address; one more is closed",
       [](ServerConfig& c, N n, K k) {
         c.http_limits.max_connections_per_address = to_int(n, k, 1, 1 << 20);
       }},
      {"http.header_timeout_seconds", "http-header-timeout-seconds",
       "a request's line and headers must arrive within this, else 408",
       [](ServerConfig& c, N n, K k) {
         c.http_limits.header_timeout_seconds = to_positive_seconds(n, k);
       }},
      {"http.body_timeout_seconds", "http-body-timeout-seconds",
       "a request's body must arrive within this of its headers, else 408",
       [](ServerConfig& c, N n, K k) {
         c.http_limits.body_timeout_seconds = to_positive_seconds(n, k);
       }},
      {"http.idle_timeout_seconds", "http-idle-timeout-seconds",
       "an HTTP connection silent this long (kept alive or not) is closed; whole seconds",
       [](ServerConfig& c, N n, K k) { c.http_limits.idle_timeout_seconds = to_int(n, k, 1, 86400); }},
      {"http.threads", "http-threads", "threads serving HTTP connections (none waits on one)",
       [](ServerConfig& c, N n, K k) { c.http_limits.threads = to_int(n, k, 1, 64); }},
      {"limits.max_characters_per_request", "max-characters-per-request",
       "characters of a request's texts together (LibreTranslate's char_limit)",
       [](ServerConfig& c, N n, K k) {
         c.limits.max_characters_per_request = to_int(n, k, 1, kMaxInt);
       }},
      {"limits.max_input_tokens", "max-input-tokens", "tokens per sentence, </s> included",
       [](ServerConfig& c, N n, K k) { c.limits.max_input_tokens = to_int(n, k, 1, kMaxInt); }},
      {"limits.max_beam_size", "max-beam-size", "largest beam_size a request may ask for",
       [](ServerConfig& c, N n, K k) { c.limits.max_beam_size = to_int(n, k, 1, 1024); }},
      {"limits.max_decoding_length", "max-decoding-length", "largest max_decoding_length",
       [](ServerConfig& c, N n, K k) {
         c.limits.max_decoding_length = to_int(n, k, 1, kMaxInt);
       }},
      {"limits.max_markup_depth", "max-markup-depth",
       "how deep the elements of an HTML or Markdown text may nest (format html, markdown)",
       [](ServerConfig& c, N n, K k) { c.limits.max_markup_depth = to_int(n, k, 1, 10000); }},
      {"limits.max_glossary_entries", "max-glossary-entries", "glossary entries a request may send",
       [](ServerConfig& c, N n, K k) { c.limits.max_glossary_entries = to_int(n, k, 0, 100000); }},
      {"limits.max_glossary_term_characters", "max-glossary-term-characters",
       "characters of a glossary term (source or target)",
       [](ServerConfig& c, N n, K k) { c.limits.max_glossary_term_characters = to_int(n, k, 1, 10000); }},
      {"limits.split_sentences", "split-sentences",
       "default of options.split_sentences: translate each text sentence by sentence (false: each text as one sentence)",
       [](ServerConfig& c, N n, K k) { c.limits.split_sentences = to_bool(n, k); }},
      // What one uploaded document may hold, and the translated files kept (document_limits.h).
      {"documents.max_file_bytes", "documents-max-file-bytes", "largest file POST /translate_file takes",
       [](ServerConfig& c, N n, K k) { c.documents.max_file_bytes = static_cast<size_t>(to_int(n, k, 1, kMaxInt)); }},
      {"documents.max_archive_entries", "documents-max-archive-entries",
       "entries of a .docx/.odt/.pptx archive",
       [](ServerConfig& c, N n, K k) { c.documents.max_archive_entries = to_int(n, k, 1, kMaxInt); }},
      {"documents.max_decompressed_bytes", "documents-max-decompressed-bytes",
       "bytes of a document's archive once decompressed, all entries together",
       [](ServerConfig& c, N n, K k) {
         c.documents.max_decompressed_bytes = static_cast<size_t>(to_int(n, k, 1, kMaxInt));
       }},
      {"documents.max_compression_ratio", "documents-max-compression-ratio",
       "decompressed over compressed bytes of an archive entry, and of the archive (zip bombs)",
       [](ServerConfig& c, N n, K k) { c.documents.max_compression_ratio = to_int(n, k, 1, kMaxInt); }},
      {"documents.max_xml_depth", "documents-max-xml-depth",
       "element nesting of a document's XML part (libxml2's own cap without huge trees: 256)",
       [](ServerConfig& c, N n, K k) { c.documents.max_xml_depth = to_int(n, k, 1, 256); }},
      {"documents.store_seconds", "documents-store-seconds", "how long a translated file waits for its download",
       [](ServerConfig& c, N n, K k) { c.documents.store_seconds = to_positive_seconds(n, k); }},
      {"documents.store_mb", "documents-store-mb", "MiB of translated files kept for download, all together",
       [](ServerConfig& c, N n, K k) {
         c.documents.store_bytes = static_cast<size_t>(to_int(n, k, 1, 1 << 20)) << 20;
       }},
      {"documents.max_concurrent_mb", "documents-max-concurrent-mb",
       "MiB the uploads being read and translated may hold, all together",
       [](ServerConfig& c, N n, K k) {
         c.documents.max_concurrent_bytes = static_cast<size_t>(to_int(n, k, 1, 1 << 20)) << 20;
       }},
      {"batching.max_active_sentences", "max-active-sentences",
       "sentences one decode loop decodes at once (its sentence slots)",
       [](ServerConfig& c, N n, K k) {
         c.batching.max_active_sentences = to_int(n, k, 1, kMaxInt);
       }},
      {"batching.max_active_rows", "max-active-rows",
       "KV-cache rows of one decode loop (a sentence holds beam rows)",
       [](ServerConfig& c, N n, K k) { c.batching.max_active_rows = to_int(n, k, 1, kMaxInt); }},
      {"batching.max_admit_tokens", "max-admit-tokens",
       "source tokens encoded in one admission into a decode loop",
       [](ServerConfig& c, N n, K k) { c.batching.max_admit_tokens = to_int(n, k, 1, kMaxInt); }},
      {"batching.max_admit_delay_steps", "max-admit-delay-steps",
       "steps a decoding loop may defer newcomers to admit more at once (1 = every step)",
       [](ServerConfig& c, N n, K k) {
         c.batching.max_admit_delay_steps = to_int(n, k, 1, kMaxInt);
       }},
      {"batching.loop_fill_sentences", "loop-fill-sentences",
       "GPU: sentences one decode loop takes before a model's other loops take any (0 = even shares)",
       [](ServerConfig& c, N n, K k) { c.batching.loop_fill_sentences = to_int(n, k, 0, kMaxInt); }},
      {"batching.follow_rows", "follow-rows",
       "GPU: cache rows from which a decode loop keeps two steps in flight, each following the one before (0 = never)",
       [](ServerConfig& c, N n, K k) { c.batching.follow_rows = to_int(n, k, 0, kMaxInt); }},
      {"batching.max_queue_sentences", "max-queue-sentences",
       "queued sentences per model before RESOURCE_EXHAUSTED",
       [](ServerConfig& c, N n, K k) {
         c.batching.max_queue_sentences = to_int(n, k, 1, kMaxInt);
       }},
      // Fair queueing across tenants and the translation cache (issue 56, docs/server.md
      // "Fairness, quotas and the cache").
      {"batching.tenant_queue_share", "tenant-queue-share",
       "share of max_queue_sentences one tenant (times its weight) may keep waiting (0-1]",
       [](ServerConfig& c, N n, K k) {
         const double share = to_seconds(n, k);
         if (share <= 0 || share > 1) fail(k + ": must be > 0 and <= 1, got " + n.Scalar());
         c.batching.tenant_queue_share = share;
       }},
      {"server.trust_tenant_header", "trust-tenant-header",
       "take the tenant of fair queueing from the x-tenant metadata/header (a trusted proxy sets it)",
       [](ServerConfig& c, N n, K k) { c.trust_tenant_header = to_bool(n, k); }},
      {"server.trust_forwarded_headers", "trust-forwarded-headers",
       "take translatedFileUrl's scheme and host from X-Forwarded-Proto/-Host (a trusted proxy sets them)",
       [](ServerConfig& c, N n, K k) { c.trust_forwarded_headers = to_bool(n, k); }},
      {"server.translation_cache_mb", "translation-cache-mb",
       "MiB of translated sentences kept for repeats (0 = no cache)",
       [](ServerConfig& c, N n, K k) { c.translation_cache_mb = to_int(n, k, 0, 1 << 20); }},
  };
  return table;
}

// Flags that set a key of every entry of models[].
const std::vector<std::pair<std::string, std::string>> kModelFlags = {
    {"device", "auto | cpu | cuda, for every model"},
    {"precision", "float16 | float32 | int8 | fp8, for every model (the CPU computes float16 in float32; int8: weights quantized at load, on the CPU and on CUDA GPUs of compute capability 8.0+; fp8: e4m3 weights, CUDA GPUs of compute capability 8.9+ only)"},
    {"device-memory-limit-mb", "MiB of working memory per model, for every model (0 = no cap)"},
    {"workers", "decode loops (engine copies, one thread each), for every model"},
    {"devices", "GPUs of every model's replicas: all, or a YAML list like [0,1]"},
    {"threads", "CPU: cores per decode loop (0 = all cores shared out between the workers), for every model"},
};

// The YAML key of a models[] flag.
std::string model_key(const std::string& flag) {
  std::string key = flag;
  std::replace(key.begin(), key.end(), '-', '_');
  return key;
}

std::string resolve(const std::string& path, const fs::path& base_dir) {
  if (path.empty() || !fs::path(path).is_relative()) return path;
  return (base_dir / path).lexically_normal().string();
}

// A Unix domain socket's path must fit sockaddr_un's sun_path with its terminating NUL (107
// bytes on Linux): a longer one would fail to bind with a less clear error.
void check_socket_path(const std::string& path) {
  constexpr size_t kMaxPath = sizeof(sockaddr_un::sun_path) - 1;
  if (path.size() > kMaxPath) {
    fail("server.unix_socket: a Unix socket path is at most " + std::to_string(kMaxPath) + " bytes, got " +
         std::to_string(path.size()) + " (" + path + ")");
  }
}

// `devices: [0, 1]` or `devices: all`.
void parse_devices(const YAML::Node& node, const std::string& key, ModelEntry& m) {
  if (node.IsScalar() && node.Scalar() == "all") {
    m.all_devices = true;
    return;
  }
  if (!node.IsSequence() || node.size() == 0) fail(key + ": expected a list of GPU indices or 'all'");
  std::set<int> seen;
  for (size_t i = 0; i < node.size(); ++i) {
    const int index = to_int(node[i], key + "[" + std::to_string(i) + "]", 0, 1023);
    if (!seen.insert(index).second) fail(key + ": GPU " + std::to_string(index) + " appears twice");
    m.devices.push_back(index);
  }
}

// A model setting shared by models[] entries and the model_repository defaults; false when
// `key` is none of them.
bool parse_model_setting(const std::string& key, const YAML::Node& value, const std::string& full,
                         ModelEntry& m) {
  if (key == "device") m.device = to_choice(value, full, kDeviceNames);
  else if (key == "precision") m.precision = to_choice(value, full, kPrecisionNames);
  else if (key == "device_memory_limit_mb") m.device_memory_limit_mb = to_int(value, full, 0, kMaxInt);
  else if (key == "workers") m.workers = to_int(value, full, 1, 16);
  else if (key == "devices") parse_devices(value, full, m);
  else if (key == "threads") m.threads = to_int(value, full, 0, 1024);
  else return false;
  return true;
}

ModelEntry parse_model(const YAML::Node& node, size_t index, const fs::path& base_dir) {
  const std::string where = "models[" + std::to_string(index) + "]";
  if (!node.IsMap()) fail(where + ": expected a mapping with name and path");
  ModelEntry m;
  for (const auto& kv : node) {
    const std::string key = kv.first.Scalar();
    const std::string full = where + "." + key;
    if (key == "name") m.name = to_string(kv.second, full);
    else if (key == "path") m.path = to_string(kv.second, full);
    else if (!parse_model_setting(key, kv.second, full, m)) {
      fail("unknown key '" + full + "' (known: name, path, device, precision, device_memory_limit_mb, workers, devices, threads)");
    }
  }
  if (m.name.empty()) fail(where + ".name is missing");
  // Without a path the entry gives the settings of the repository model of that name
  // (checked in check_consistency).
  m.path = resolve(m.path, base_dir);
  return m;
}

RepositoryConfig parse_repository(const YAML::Node& node, const fs::path& base_dir) {
  if (!node.IsMap()) fail("model_repository: expected a mapping with path");
  RepositoryConfig r;
  for (const auto& kv : node) {
    const std::string key = kv.first.Scalar();
    const std::string full = "model_repository." + key;
    if (key == "path") r.path = to_string(kv.second, full);
    else if (key == "memory_budget_mb") r.memory_budget_mb = to_int(kv.second, full, 0, kMaxInt);
    else if (key == "preload") {
      if (!kv.second.IsSequence()) fail(full + ": expected a list of model names");
      for (size_t i = 0; i < kv.second.size(); ++i) {
        r.preload.push_back(to_string(kv.second[i], full + "[" + std::to_string(i) + "]"));
      }
    } else if (!parse_model_setting(key, kv.second, full, r.defaults)) {
      fail("unknown key '" + full + "' (known: path, memory_budget_mb, preload, device, precision, "
           "device_memory_limit_mb, workers, devices)");
    }
  }
  if (r.path.empty()) fail("model_repository.path is missing");
  r.path = resolve(r.path, base_dir);
  return r;
}

void check_consistency(const ServerConfig& c) {
  const bool repository = !c.repository.path.empty();
  if (c.models.empty() && !repository) {
    fail("models: at least one model is required (or a model_repository)");
  }
  std::set<std::string> names;
  for (const ModelEntry& m : c.models) {
    if (!names.insert(m.name).second) fail("models: the name '" + m.name + "' appears twice");
    if (m.path.empty() && !repository) {
      fail("models: '" + m.name + "' has no path (only a model_repository model may omit it)");
    }
  }
  if (c.tls_cert_file.empty() != c.tls_key_file.empty()) {
    fail("server.tls_cert_file and server.tls_key_file go together: give both or neither");
  }
  if (!c.tls_client_ca_file.empty() && c.tls_cert_file.empty()) {
    fail("server.tls_client_ca_file needs server.tls_cert_file and tls_key_file (mutual TLS is TLS)");
  }
  // The HTTP API's connection bounds (http_limits.h).
  if (c.http_limits.max_connections_per_address > c.http_limits.max_connections) {
    fail("http.max_connections_per_address (" + std::to_string(c.http_limits.max_connections_per_address) +
         ") must be <= http.max_connections (" + std::to_string(c.http_limits.max_connections) + ")");
  }
  if (c.http_limits.threads > c.http_limits.max_connections) {
    fail("http.threads (" + std::to_string(c.http_limits.threads) +
         ") must be <= http.max_connections (each thread serves a share of them)");
  }
}

void apply_override(YAML::Node& root, const std::string& flag, const std::string& value) {
  for (const auto& [model_flag, help] : kModelFlags) {
    if (flag != model_flag) continue;
    const bool models = root["models"] && root["models"].IsSequence();
    const bool repository = root["model_repository"] && root["model_repository"].IsMap();
    if (!models && !repository) {
      fail("--" + flag + ": the config has no models[] or model_repository to apply it to");
    }
    // --devices takes YAML ("all" or "[0,1]"); the others are scalars.
    YAML::Node node(value);
    if (flag == "devices") {
      try {
        node = YAML::Load(value);
      } catch (const YAML::Exception&) {
        fail("--devices: expected all or a list like [0,1], got '" + value + "'");
      }
    }
    if (models) {
      for (YAML::Node model : root["models"]) model[model_key(flag)] = node;
    }
    if (repository) root["model_repository"][model_key(flag)] = node;
    return;
  }
  for (const Setting& s : settings()) {
    if (s.flag != flag) continue;
    const size_t dot = s.key.find('.');
    root[s.key.substr(0, dot)][s.key.substr(dot + 1)] = value;
    return;
  }
  fail("unknown flag --" + flag);
}

}  // namespace

CommandLine parse_command_line(int argc, const char* const* argv) {
  std::set<std::string> known = {"config"};
  for (const Setting& s : settings()) known.insert(s.flag);
  for (const auto& [flag, help] : kModelFlags) known.insert(flag);

  CommandLine cl;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      cl.help = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) fail("unexpected argument '" + arg + "' (see --help)");
    std::string name = arg.substr(2), value;
    const size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else {
      if (!known.count(name)) fail("unknown flag --" + name + " (see --help)");
      if (i + 1 >= argc) fail("flag --" + name + " needs a value");
      value = argv[++i];
    }
    if (!known.count(name)) fail("unknown flag --" + name + " (see --help)");
    if (name == "config") cl.config_path = value;
    else cl.overrides.emplace_back(name, value);
  }
  if (!cl.help && cl.config_path.empty()) fail("--config FILE is required (see --help)");
  return cl;
}

std::string usage(const std::string& program) {
  std::ostringstream out;
  out << "Usage: " << program << " --config FILE [flags]\n\n"
      << "gRPC translation server (nmt.v1.TranslationService, grpc.health.v1.Health,\n"
      << "server reflection) with Prometheus metrics on /metrics.\n"
      << "Flags override the keys of the YAML config (shown in brackets).\n\n"
      << "  --config FILE                 YAML config (e.g. configs/default.yaml)\n"
      << "  --help                        this text\n";
  auto line = [&](const std::string& flag, const std::string& help, const std::string& key) {
    std::string left = "  --" + flag + " V";
    left.resize(std::max<size_t>(left.size() + 1, 32), ' ');
    out << left << help << " [" << key << "]\n";
  };
  for (const Setting& s : settings()) line(s.flag, s.help, s.key);
  for (const auto& [flag, help] : kModelFlags) line(flag, help, "models[*]." + model_key(flag));
  return out.str();
}

ServerConfig parse_config(const std::string& yaml_text, const std::string& base_dir,
                          const std::vector<std::pair<std::string, std::string>>& overrides) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    fail(std::string("invalid YAML: ") + e.what());
  }
  if (!root.IsMap()) fail("the config must be a YAML mapping with server, limits, batching, models");
  for (const auto& [flag, value] : overrides) apply_override(root, flag, value);

  ServerConfig c;
  for (const auto& section : root) {
    const std::string name = section.first.Scalar();
    if (name == "models") {
      if (!section.second.IsSequence()) fail("models: expected a list of models");
      for (size_t i = 0; i < section.second.size(); ++i) {
        c.models.push_back(parse_model(section.second[i], i, base_dir));
      }
      continue;
    }
    if (name == "model_repository") {
      c.repository = parse_repository(section.second, base_dir);
      continue;
    }
    if (name != "server" && name != "http" && name != "limits" && name != "batching" && name != "documents") {
      fail("unknown key '" + name + "' (known: server, http, limits, batching, documents, models, model_repository)");
    }
    if (!section.second.IsMap()) fail(name + ": expected a mapping");
    for (const auto& kv : section.second) {
      const std::string key = name + "." + kv.first.Scalar();
      const Setting* setting = nullptr;
      for (const Setting& s : settings()) {
        if (s.key == key) setting = &s;
      }
      if (!setting) fail("unknown key '" + key + "'");
      if (!kv.second.IsScalar()) fail(key + ": expected a single value");
      setting->set(c, kv.second, key);
    }
  }
  c.tls_cert_file = resolve(c.tls_cert_file, base_dir);
  c.tls_key_file = resolve(c.tls_key_file, base_dir);
  c.tls_client_ca_file = resolve(c.tls_client_ca_file, base_dir);
  c.auth_token_file = resolve(c.auth_token_file, base_dir);
  c.unix_socket = resolve(c.unix_socket, base_dir);
  check_socket_path(c.unix_socket);
  check_consistency(c);
  return c;
}

ServerConfig load_config(const CommandLine& command_line) {
  const fs::path path(command_line.config_path);
  std::ifstream in(path);
  if (!in) fail("cannot read the config file " + path.string());
  std::stringstream text;
  text << in.rdbuf();
  try {
    return parse_config(text.str(), fs::absolute(path).parent_path().string(),
                        command_line.overrides);
  } catch (const ConfigError& e) {
    throw ConfigError(path.string() + ": " + e.what());
  }
}

}  // namespace nmt::server
