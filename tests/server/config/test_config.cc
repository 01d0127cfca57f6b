// Config parsing: defaults from configs/default.yaml, flag overrides, and the errors for
// unknown flags/keys, wrong types, out-of-range values and inconsistent limits.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "server/config/config.h"

using namespace nmt::server;

namespace {

const char* kMinimal = R"(
models:
  - name: m
    path: ../models/m
)";

std::string error_of(const std::string& yaml,
                     const std::vector<std::pair<std::string, std::string>>& overrides = {}) {
  try {
    parse_config(yaml, "/etc/nmt", overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

std::string command_line_error(std::vector<const char*> args) {
  args.insert(args.begin(), "nmt-server");
  try {
    parse_command_line(static_cast<int>(args.size()), args.data());
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(Config, DefaultYamlOfTheRepository) {
  const std::string path = std::string(NMT_REPO_ROOT) + "/configs/default.yaml";
  const char* argv[] = {"nmt-server", "--config", path.c_str()};
  const ServerConfig c = load_config(parse_command_line(3, argv));
  EXPECT_EQ(c.host, "0.0.0.0");
  EXPECT_EQ(c.port, 50051);
  EXPECT_EQ(c.metrics_host, "127.0.0.1");
  EXPECT_EQ(c.metrics_port, 9464);
  EXPECT_EQ(c.limits.max_characters_per_request, 50000);
  EXPECT_TRUE(c.limits.split_sentences);
  EXPECT_EQ(c.limits.max_markup_depth, 100);
  EXPECT_EQ(c.limits.max_glossary_entries, 256);
  EXPECT_EQ(c.limits.max_glossary_term_characters, 100);
  EXPECT_EQ(c.limits.max_input_tokens, 256);
  EXPECT_EQ(c.max_concurrent_calls, 4096);
  EXPECT_EQ(c.batching.max_active_sentences, 512);
  EXPECT_EQ(c.batching.max_active_rows, 2048);
  EXPECT_EQ(c.batching.max_admit_tokens, 2048);
  EXPECT_EQ(c.batching.max_admit_delay_steps, 8);
  EXPECT_EQ(c.batching.max_queue_sentences, 4096);
  EXPECT_EQ(c.batching.tenant_queue_share, 0.25);
  EXPECT_FALSE(c.trust_tenant_header);
  EXPECT_EQ(c.translation_cache_mb, 64);
  ASSERT_EQ(c.models.size(), 1u);
  EXPECT_EQ(c.models[0].name, "m30k-en-de-small");
  // Relative to the config file's folder, not the working directory.
  EXPECT_EQ(c.models[0].path, std::string(NMT_REPO_ROOT) + "/models/m30k-en-de-small");
  EXPECT_EQ(c.models[0].device, "auto");
  EXPECT_EQ(c.models[0].workers, 2);
  EXPECT_EQ(c.translate_threads, ServerConfig().translate_threads);
  // The file spells out the connection limits at their defaults.
  const ConnectionLimits d;
  EXPECT_EQ(c.connections.max_streams_per_connection, d.max_streams_per_connection);
  EXPECT_EQ(c.connections.max_stream_messages_in_flight, d.max_stream_messages_in_flight);
  EXPECT_EQ(c.connections.max_connection_idle_seconds, d.max_connection_idle_seconds);
  EXPECT_EQ(c.connections.handshake_timeout_seconds, d.handshake_timeout_seconds);
  EXPECT_EQ(c.connections.keepalive_time_seconds, d.keepalive_time_seconds);
  EXPECT_EQ(c.connections.keepalive_timeout_seconds, d.keepalive_timeout_seconds);
  EXPECT_EQ(c.connections.min_client_ping_interval_seconds, d.min_client_ping_interval_seconds);
  EXPECT_EQ(c.connections.max_ping_strikes, d.max_ping_strikes);
  // And the HTTP API's.
  const HttpLimits h;
  EXPECT_EQ(c.http_limits.max_connections, h.max_connections);
  EXPECT_EQ(c.http_limits.max_connections_per_address, h.max_connections_per_address);
  EXPECT_EQ(c.http_limits.header_timeout_seconds, h.header_timeout_seconds);
  EXPECT_EQ(c.http_limits.body_timeout_seconds, h.body_timeout_seconds);
  EXPECT_EQ(c.http_limits.idle_timeout_seconds, h.idle_timeout_seconds);
  EXPECT_EQ(c.http_limits.threads, h.threads);
  // And the documents' bounds.
  const DocumentLimits dl;
  EXPECT_EQ(c.documents.max_file_bytes, dl.max_file_bytes);
  EXPECT_EQ(c.documents.max_archive_entries, dl.max_archive_entries);
  EXPECT_EQ(c.documents.max_decompressed_bytes, dl.max_decompressed_bytes);
  EXPECT_EQ(c.documents.max_compression_ratio, dl.max_compression_ratio);
  EXPECT_EQ(c.documents.max_xml_depth, dl.max_xml_depth);
  EXPECT_EQ(c.documents.store_seconds, dl.store_seconds);
  EXPECT_EQ(c.documents.store_bytes, dl.store_bytes);
}

TEST(Config, DocumentKeysFromYamlAndFlags) {
  const ServerConfig c = parse_config(std::string(kMinimal) + R"(
documents:
  max_file_bytes: 1000
  max_archive_entries: 7
  max_decompressed_bytes: 5000
  max_compression_ratio: 20
  max_xml_depth: 9
  store_seconds: 2.5
)", "/etc/nmt", {{"documents-store-mb", "3"}});
  EXPECT_EQ(c.documents.max_file_bytes, 1000u);
  EXPECT_EQ(c.documents.max_archive_entries, 7);
  EXPECT_EQ(c.documents.max_decompressed_bytes, 5000u);
  EXPECT_EQ(c.documents.max_compression_ratio, 20);
  EXPECT_EQ(c.documents.max_xml_depth, 9);
  EXPECT_EQ(c.documents.store_seconds, 2.5);
  EXPECT_EQ(c.documents.store_bytes, 3u << 20);
  // Above libxml2's own nesting cap without huge trees.
  EXPECT_THROW(parse_config(std::string(kMinimal) + "documents:\n  max_xml_depth: 257\n", "/etc/nmt"), ConfigError);
  EXPECT_THROW(parse_config(std::string(kMinimal) + "documents:\n  max_zip_entries: 3\n", "/etc/nmt"), ConfigError);
}

TEST(Config, DefaultsWhenSectionsAreAbsent) {
  const ServerConfig c = parse_config(kMinimal, "/etc/nmt");
  EXPECT_EQ(c.port, 50051);
  EXPECT_EQ(c.log_format, "text");
  EXPECT_EQ(c.models[0].path, "/etc/models/m");
  EXPECT_EQ(c.models[0].precision, "float16");
  EXPECT_EQ(c.models[0].workers, 1);
  EXPECT_EQ(c.models[0].threads, 0);
  // The struct defaults, as server/scheduling/scheduling_options.h documents them.
  const SchedulingOptions defaults;
  EXPECT_EQ(c.max_concurrent_calls, 4096);
  EXPECT_EQ(c.batching.max_active_sentences, defaults.max_active_sentences);
  EXPECT_EQ(c.batching.max_active_rows, defaults.max_active_rows);
  EXPECT_EQ(c.batching.max_admit_tokens, defaults.max_admit_tokens);
  EXPECT_EQ(c.batching.max_admit_delay_steps, defaults.max_admit_delay_steps);
  EXPECT_EQ(c.batching.max_queue_sentences, defaults.max_queue_sentences);
}

TEST(Config, BatchingKeysFromYaml) {
  const ServerConfig c = parse_config(std::string(kMinimal) + R"(
server:
  max_concurrent_calls: 100
batching:
  max_active_sentences: 8
  max_active_rows: 32
  max_admit_tokens: 512
  max_admit_delay_steps: 1
  max_queue_sentences: 64
  follow_rows: 0
)", "/etc/nmt");
  EXPECT_EQ(c.max_concurrent_calls, 100);
  EXPECT_EQ(c.batching.max_active_sentences, 8);
  EXPECT_EQ(c.batching.max_active_rows, 32);
  EXPECT_EQ(c.batching.max_admit_tokens, 512);
  EXPECT_EQ(c.batching.max_admit_delay_steps, 1);
  EXPECT_EQ(c.batching.max_queue_sentences, 64);
  EXPECT_EQ(c.batching.follow_rows, 0);
}

TEST(Config, BatchingFlagsOverrideTheYaml) {
  const char* argv[] = {"nmt-server", "--config", "x.yaml",
                        "--max-active-sentences", "3", "--max-active-rows=12",
                        "--max-admit-tokens", "99", "--max-admit-delay-steps", "2",
                        "--max-queue-sentences", "640", "--follow-rows", "8192",
                        "--max-concurrent-calls", "7", "--workers", "4"};
  const CommandLine cl = parse_command_line(sizeof argv / sizeof *argv, argv);
  const std::string yaml = std::string(kMinimal) +
                           "batching:\n  max_active_sentences: 256\n  max_active_rows: 1024\n";
  const ServerConfig c = parse_config(yaml, "/etc/nmt", cl.overrides);
  EXPECT_EQ(c.batching.max_active_sentences, 3);
  EXPECT_EQ(c.batching.max_active_rows, 12);
  EXPECT_EQ(c.batching.max_admit_tokens, 99);
  EXPECT_EQ(c.batching.max_admit_delay_steps, 2);
  EXPECT_EQ(c.batching.max_queue_sentences, 640);
  EXPECT_EQ(c.batching.follow_rows, 8192);
  EXPECT_EQ(c.max_concurrent_calls, 7);
  EXPECT_EQ(c.models[0].workers, 4);
}

TEST(Config, BatchingKeysMustBePositive) {
  const std::string m = kMinimal;
  for (const char* key : {"max_active_sentences", "max_active_rows", "max_admit_tokens",
                          "max_admit_delay_steps", "max_queue_sentences"}) {
    EXPECT_EQ(error_of(m + "batching:\n  " + key + ": 0\n"),
              std::string("batching.") + key + ": must be between 1 and 1073741824, got 0");
  }
  EXPECT_EQ(error_of(m + "server:\n  max_concurrent_calls: 0\n"),
            "server.max_concurrent_calls: must be between 1 and 1073741824, got 0");
  EXPECT_EQ(error_of(kMinimal, {{"max-active-rows", "many"}}),
            "batching.max_active_rows: expected an integer, got 'many'");
  EXPECT_EQ(error_of(kMinimal, {{"max-concurrent-calls", "-5"}}),
            "server.max_concurrent_calls: must be between 1 and 1073741824, got -5");
  EXPECT_EQ(error_of(kMinimal, {{"workers", "0"}}),
            "models[0].workers: must be between 1 and 16, got 0");
  EXPECT_EQ(error_of(kMinimal, {{"threads", "-1"}}),
            "models[0].threads: must be between 0 and 1024, got -1");
}

TEST(Config, WholeBatchKeysAndFlagsAreGone) {
  // The keys of whole-batch batching are unknown keys now, refused like any other.
  const std::string m = kMinimal;
  EXPECT_EQ(error_of(m + "batching:\n  max_batch_tokens: 8192\n"),
            "unknown key 'batching.max_batch_tokens'");
  EXPECT_EQ(error_of(m + "batching:\n  max_batch_sentences: 128\n"),
            "unknown key 'batching.max_batch_sentences'");
  EXPECT_EQ(error_of(m + "batching:\n  max_wait_ms: 1\n"), "unknown key 'batching.max_wait_ms'");
  for (const char* flag : {"--max-batch-tokens", "--max-batch-sentences", "--max-wait-ms"}) {
    EXPECT_EQ(command_line_error({"--config", "c.yaml", flag, "1"}),
              std::string("unknown flag ") + flag + " (see --help)");
  }
  EXPECT_EQ(usage("nmt-server").find("max-wait-ms"), std::string::npos);
}

TEST(Config, FlagsOverrideTheYaml) {
  const char* argv[] = {"nmt-server", "--config", "x.yaml", "--port", "6000",
                        "--host=127.0.0.1", "--max-admit-tokens", "1", "--device", "cpu",
                        "--precision", "float32", "--log-format", "json",
                        "--metrics-port", "9999", "--max-input-tokens", "32"};
  const CommandLine cl = parse_command_line(sizeof argv / sizeof *argv, argv);
  EXPECT_EQ(cl.config_path, "x.yaml");
  const std::string yaml = std::string(kMinimal) + "server:\n  port: 50051\n  log_format: text\n";
  const ServerConfig c = parse_config(yaml, "/etc/nmt", cl.overrides);
  EXPECT_EQ(c.port, 6000);
  EXPECT_EQ(c.host, "127.0.0.1");
  EXPECT_EQ(c.batching.max_admit_tokens, 1);
  EXPECT_EQ(c.models[0].device, "cpu");
  EXPECT_EQ(c.models[0].precision, "float32");
  EXPECT_EQ(c.log_format, "json");
  EXPECT_EQ(c.metrics_port, 9999);
  EXPECT_EQ(c.limits.max_input_tokens, 32);
}

TEST(Config, HelpListsEveryFlag) {
  const std::string help = usage("nmt-server");
  for (const char* flag : {"--config", "--help", "--host", "--port", "--metrics-host",
                           "--metrics-port", "--unix-socket", "--device", "--precision", "--log-format",
                           "--log-level", "--max-active-sentences", "--max-active-rows",
                           "--max-admit-tokens", "--max-admit-delay-steps",
                           "--max-queue-sentences",
                           "--max-concurrent-calls", "--workers", "--threads",
                           "--max-characters-per-request", "--split-sentences", "--max-input-tokens",
                           "--max-beam-size", "--max-decoding-length",
                           "--shutdown-grace-seconds", "--max-message-bytes",
                           "--translate-threads"}) {
    EXPECT_NE(help.find(std::string("\n  ") + flag + " "), std::string::npos) << flag;
  }
  EXPECT_NE(help.find("auto | cpu | cuda"), std::string::npos);
  const char* argv[] = {"nmt-server", "--help"};
  EXPECT_TRUE(parse_command_line(2, argv).help);
}

TEST(Config, CommandLineErrors) {
  EXPECT_EQ(command_line_error({"--config", "c.yaml", "--bogus", "1"}),
            "unknown flag --bogus (see --help)");
  EXPECT_EQ(command_line_error({"--config", "c.yaml", "--bogus=1"}),
            "unknown flag --bogus (see --help)");
  EXPECT_EQ(command_line_error({"--config", "c.yaml", "--port"}), "flag --port needs a value");
  EXPECT_EQ(command_line_error({"--port", "1"}), "--config FILE is required (see --help)");
  EXPECT_EQ(command_line_error({"--config", "c.yaml", "stray"}),
            "unexpected argument 'stray' (see --help)");
}

// Fair queueing and the translation cache (docs/server.md, "Fairness, quotas and the cache").
TEST(Config, FairnessAndCacheKeys) {
  const ServerConfig c = parse_config(
      "server:\n  trust_tenant_header: true\n  translation_cache_mb: 0\nbatching:\n  tenant_queue_share: 1\n"
      "models:\n  - name: m\n    path: /m\n",
      "/", {{"tenant-queue-share", "0.5"}});
  EXPECT_TRUE(c.trust_tenant_header);
  EXPECT_EQ(c.translation_cache_mb, 0);
  EXPECT_EQ(c.batching.tenant_queue_share, 0.5);
  for (const char* share : {"0", "1.5", "-1"}) {
    try {
      parse_config("models:\n  - name: m\n    path: /m\n", "/", {{"tenant-queue-share", share}});
      ADD_FAILURE() << "accepted share " << share;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("batching.tenant_queue_share"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(parse_config("server:\n  translation_cache_mb: -1\nmodels:\n  - name: m\n    path: /m\n", "/"),
               ConfigError);
}

TEST(Config, YamlErrorsNameTheKey) {
  const std::string m = kMinimal;
  EXPECT_EQ(error_of(m + "server:\n  prot: 1\n"), "unknown key 'server.prot'");
  EXPECT_EQ(error_of(m + "servers:\n  port: 1\n"),
            "unknown key 'servers' (known: server, http, limits, batching, documents, models, model_repository)");
  EXPECT_EQ(error_of(m + "server:\n  port: abc\n"), "server.port: expected an integer, got 'abc'");
  EXPECT_EQ(error_of(m + "server:\n  port: 70000\n"),
            "server.port: must be between 1 and 65535, got 70000");
  EXPECT_EQ(error_of(m + "server:\n  log_format: xml\n"),
            "server.log_format: must be one of text | json, got 'xml'");
  EXPECT_EQ(error_of(m + "batching:\n  max_active_rows: -1\n"),
            "batching.max_active_rows: must be between 1 and 1073741824, got -1");
  EXPECT_EQ(error_of("models:\n  - name: m\n    path: p\n    device: tpu\n"),
            "models[0].device: must be one of auto | cpu | cuda, got 'tpu'");
  EXPECT_EQ(error_of("models:\n  - name: m\n    path: p\n    precision: bf16\n"),
            "models[0].precision: must be one of float16 | float32 | int8 | fp8, got 'bf16'");
  EXPECT_EQ(error_of("models:\n  - name: m\n    path: p\n    colour: red\n"),
            "unknown key 'models[0].colour' (known: name, path, device, precision, device_memory_limit_mb, workers, devices, threads)");
  EXPECT_EQ(error_of("models:\n  - path: p\n"), "models[0].name is missing");
  EXPECT_EQ(error_of("models: []\n"), "models: at least one model is required (or a model_repository)");
  EXPECT_EQ(error_of("models:\n  - {name: a, path: p}\n  - {name: a, path: q}\n"),
            "models: the name 'a' appears twice");
  EXPECT_EQ(error_of(m + "limits:\n  max_characters_per_request: 0\n"),
            "limits.max_characters_per_request: must be between 1 and 1073741824, got 0");
  EXPECT_EQ(error_of(m + "limits:\n  max_markup_depth: 0\n"),
            "limits.max_markup_depth: must be between 1 and 10000, got 0");
  EXPECT_EQ(error_of(m + "limits:\n  max_glossary_term_characters: 0\n"),
            "limits.max_glossary_term_characters: must be between 1 and 10000, got 0");
  EXPECT_EQ(error_of("server: [1, 2\n").rfind("invalid YAML", 0), 0u);
}

TEST(Config, UnixSocketPath) {
  EXPECT_TRUE(parse_config(kMinimal, "/etc/nmt").unix_socket.empty());
  EXPECT_EQ(parse_config(std::string(kMinimal) + "server:\n  unix_socket: /run/nmt/grpc.sock\n", "/etc/nmt").unix_socket,
            "/run/nmt/grpc.sock");
  EXPECT_EQ(parse_config(kMinimal, "/etc/nmt", {{"unix-socket", "/tmp/a.sock"}}).unix_socket, "/tmp/a.sock");
  const std::string longest = "/" + std::string(106, 's');
  EXPECT_EQ(parse_config(kMinimal, "/etc/nmt", {{"unix-socket", longest}}).unix_socket, longest);
  EXPECT_EQ(error_of(kMinimal, {{"unix-socket", longest + "s"}}),
            "server.unix_socket: a Unix socket path is at most 107 bytes, got 108 (" + longest + "s)");
  // Relative: against the config file's folder, like the other paths.
  EXPECT_EQ(parse_config(kMinimal, "/etc/nmt", {{"unix-socket", "run/grpc.sock"}}).unix_socket, "/etc/nmt/run/grpc.sock");
  EXPECT_EQ(error_of(std::string(kMinimal) + "server:\n  unix_socket: ''\n"),
            "server.unix_socket: expected a non-empty string");
}

TEST(Config, FlagValuesAreCheckedLikeYaml) {
  EXPECT_EQ(error_of(kMinimal, {{"port", "http"}}), "server.port: expected an integer, got 'http'");
  EXPECT_EQ(error_of(kMinimal, {{"device", "gpu"}}),
            "models[0].device: must be one of auto | cpu | cuda, got 'gpu'");
  EXPECT_EQ(error_of(kMinimal, {{"log-level", "loud"}}),
            "server.log_level: must be one of trace | debug | info | warn | error | critical | off, got 'loud'");
}

TEST(Config, TranslateThreads) {
  EXPECT_EQ(parse_config(kMinimal, "/etc/nmt").translate_threads, 4);
  EXPECT_EQ(parse_config(std::string(kMinimal) + "server:\n  translate_threads: 2\n", "/etc/nmt")
                .translate_threads,
            2);
  EXPECT_EQ(parse_config(kMinimal, "/etc/nmt", {{"translate-threads", "8"}}).translate_threads, 8);
  EXPECT_EQ(error_of(kMinimal, {{"translate-threads", "0"}}),
            "server.translate_threads: must be between 1 and 64, got 0");
  EXPECT_EQ(error_of(kMinimal, {{"translate-threads", "65"}}),
            "server.translate_threads: must be between 1 and 64, got 65");
}

// The HTTP API's connection bounds and deadlines (server/config/http_limits.h).
TEST(Config, HttpLimits) {
  const HttpLimits d = parse_config(kMinimal, "/etc/nmt").http_limits;
  EXPECT_EQ(d.max_connections, 1024);
  EXPECT_EQ(d.max_connections_per_address, 64);
  EXPECT_EQ(d.header_timeout_seconds, 10);
  EXPECT_EQ(d.body_timeout_seconds, 30);
  EXPECT_EQ(d.idle_timeout_seconds, 5);
  EXPECT_EQ(d.threads, 2);
  const HttpLimits c = parse_config(std::string(kMinimal) + R"(
http:
  max_connections: 500
  max_connections_per_address: 20
  header_timeout_seconds: 2.5
  body_timeout_seconds: 7
  idle_timeout_seconds: 3
  threads: 4
)", "/etc/nmt", {{"http-idle-timeout-seconds", "9"}}).http_limits;
  EXPECT_EQ(c.max_connections, 500);
  EXPECT_EQ(c.max_connections_per_address, 20);
  EXPECT_EQ(c.header_timeout_seconds, 2.5);
  EXPECT_EQ(c.body_timeout_seconds, 7);
  EXPECT_EQ(c.idle_timeout_seconds, 9);  // the flag over the YAML
  EXPECT_EQ(c.threads, 4);
  EXPECT_EQ(error_of(kMinimal, {{"http-header-timeout-seconds", "0"}}),
            "http.header_timeout_seconds: must be > 0, got 0");
  EXPECT_EQ(error_of(kMinimal, {{"http-body-timeout-seconds", "soon"}}),
            "http.body_timeout_seconds: expected a number of seconds, got 'soon'");
  EXPECT_EQ(error_of(kMinimal, {{"http-idle-timeout-seconds", "0"}}),
            "http.idle_timeout_seconds: must be between 1 and 86400, got 0");
  EXPECT_EQ(error_of(kMinimal, {{"http-max-connections", "10"}}),
            "http.max_connections_per_address (64) must be <= http.max_connections (10)");
  EXPECT_EQ(error_of(kMinimal, {{"http-max-connections", "100"}, {"http-max-connections-per-address", "0"}}),
            "http.max_connections_per_address: must be between 1 and 1048576, got 0");
  EXPECT_EQ(error_of(kMinimal, {{"http-threads", "65"}}), "http.threads: must be between 1 and 64, got 65");
}

TEST(Config, MissingFileIsAnError) {
  CommandLine cl;
  cl.config_path = "/nonexistent/nmt.yaml";
  try {
    load_config(cl);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "cannot read the config file /nonexistent/nmt.yaml");
  }
}

TEST(Config, TlsAuthAndMemoryCap) {
  const ServerConfig off = parse_config(kMinimal, "/etc/nmt");
  EXPECT_EQ(off.tls_cert_file, "");
  EXPECT_EQ(off.auth_token_file, "");
  EXPECT_EQ(off.models[0].device_memory_limit_mb, 0);

  const ServerConfig c = parse_config(std::string(R"(
server:
  tls_cert_file: tls/cert.pem
  tls_key_file: /secrets/key.pem
  auth_token_file: tokens.txt
models:
  - name: m
    path: ../models/m
    device_memory_limit_mb: 512
)"), "/etc/nmt");
  // Relative paths resolve against the config file's folder, like model paths.
  EXPECT_EQ(c.tls_cert_file, "/etc/nmt/tls/cert.pem");
  EXPECT_EQ(c.tls_key_file, "/secrets/key.pem");
  EXPECT_EQ(c.auth_token_file, "/etc/nmt/tokens.txt");
  EXPECT_EQ(c.models[0].device_memory_limit_mb, 512);

  const ServerConfig flags = parse_config(kMinimal, "/etc/nmt",
                                          {{"device-memory-limit-mb", "64"},
                                           {"auth-token-file", "/run/tokens"}});
  EXPECT_EQ(flags.models[0].device_memory_limit_mb, 64);
  EXPECT_EQ(flags.auth_token_file, "/run/tokens");

  EXPECT_EQ(error_of(std::string(kMinimal) + "server:\n  tls_cert_file: c.pem\n"),
            "server.tls_cert_file and server.tls_key_file go together: give both or neither");
  EXPECT_EQ(error_of(std::string(kMinimal) + "server:\n  tls_client_ca_file: ca.pem\n"),
            "server.tls_client_ca_file needs server.tls_cert_file and tls_key_file (mutual TLS is TLS)");
  const ServerConfig mtls = parse_config(
      std::string(kMinimal) +
          "server:\n  tls_cert_file: c.pem\n  tls_key_file: c.key\n  tls_client_ca_file: ca.pem\n",
      "/etc/nmt", {{"tls-client-ca-file", "clients/ca.pem"}});
  EXPECT_EQ(mtls.tls_client_ca_file, "/etc/nmt/clients/ca.pem");  // the flag, resolved
  EXPECT_EQ(error_of(kMinimal, {{"device-memory-limit-mb", "-1"}}),
            "models[0].device_memory_limit_mb: must be between 0 and 1073741824, got -1");
}

TEST(Config, ModelRepositorySection) {
  const ServerConfig c = parse_config(R"(
model_repository:
  path: repo
  memory_budget_mb: 2048
  preload: [opus-mt-en-de, opus-mt-de-en]
  precision: float32
  devices: all
models:
  - name: opus-mt-en-fr
    workers: 2
    devices: [0, 1]
)", "/etc/nmt", {{"device", "cpu"}});
  EXPECT_EQ(c.repository.path, "/etc/nmt/repo");
  EXPECT_EQ(c.repository.memory_budget_mb, 2048);
  EXPECT_EQ(c.repository.preload, (std::vector<std::string>{"opus-mt-en-de", "opus-mt-de-en"}));
  EXPECT_EQ(c.repository.defaults.precision, "float32");
  EXPECT_TRUE(c.repository.defaults.all_devices);
  EXPECT_EQ(c.repository.defaults.device, "cpu");  // model flags reach the repository too
  ASSERT_EQ(c.models.size(), 1u);
  EXPECT_EQ(c.models[0].path, "");  // settings of the repository model of that name
  EXPECT_EQ(c.models[0].devices, (std::vector<int>{0, 1}));
  EXPECT_EQ(c.models[0].device, "cpu");

  // A repository alone is a complete config; --devices takes YAML.
  const ServerConfig alone = parse_config("model_repository: {path: /srv/models}\n", "/etc/nmt",
                                          {{"devices", "[1, 0]"}});
  EXPECT_TRUE(alone.models.empty());
  EXPECT_EQ(alone.repository.defaults.devices, (std::vector<int>{1, 0}));
}

TEST(Config, ModelRepositoryErrors) {
  EXPECT_EQ(error_of("model_repository: {memory_budget_mb: 10}\n"), "model_repository.path is missing");
  EXPECT_EQ(error_of("model_repository: {path: r, budget: 10}\n"),
            "unknown key 'model_repository.budget' (known: path, memory_budget_mb, preload, device, "
            "precision, device_memory_limit_mb, workers, devices)");
  EXPECT_EQ(error_of("model_repository: {path: r, memory_budget_mb: -1}\n"),
            "model_repository.memory_budget_mb: must be between 0 and 1073741824, got -1");
  EXPECT_EQ(error_of("model_repository: {path: r, preload: en-de}\n"),
            "model_repository.preload: expected a list of model names");
  EXPECT_EQ(error_of("models:\n  - name: m\n"),
            "models: 'm' has no path (only a model_repository model may omit it)");
  EXPECT_EQ(error_of("models:\n  - {name: m, path: p, devices: [0, 0]}\n"),
            "models[0].devices: GPU 0 appears twice");
  EXPECT_EQ(error_of("models:\n  - {name: m, path: p, devices: some}\n"),
            "models[0].devices: expected a list of GPU indices or 'all'");
  EXPECT_EQ(error_of("server: {port: 1}\n", {{"device", "cpu"}}),
            "--device: the config has no models[] or model_repository to apply it to");
}

TEST(Config, ConnectionLimitsDefaultsKeysAndFlags) {
  const ConnectionLimits defaults;
  const ServerConfig d = parse_config(kMinimal, "/etc/nmt");
  EXPECT_EQ(d.connections.max_streams_per_connection, defaults.max_streams_per_connection);
  EXPECT_EQ(d.connections.max_stream_messages_in_flight, 64);
  EXPECT_EQ(d.connections.max_connection_idle_seconds, 600);
  EXPECT_EQ(d.connections.handshake_timeout_seconds, 10);
  EXPECT_EQ(d.connections.min_client_ping_interval_seconds, 10);
  EXPECT_EQ(d.connections.max_ping_strikes, 2);

  const char* argv[] = {"nmt-server", "--config", "x.yaml", "--max-streams-per-connection", "9",
                        "--max-ping-strikes=0", "--keepalive-time-seconds", "0"};
  const CommandLine cl = parse_command_line(sizeof argv / sizeof *argv, argv);
  const ServerConfig c = parse_config(std::string(kMinimal) + R"(
server:
  max_streams_per_connection: 100
  max_stream_messages_in_flight: 8
  max_connection_idle_seconds: 1.5
  handshake_timeout_seconds: 2
  keepalive_time_seconds: 30
  keepalive_timeout_seconds: 3
  min_client_ping_interval_seconds: 0.5
  max_ping_strikes: 4
)", "/etc/nmt", cl.overrides);
  EXPECT_EQ(c.connections.max_streams_per_connection, 9);  // the flag wins
  EXPECT_EQ(c.connections.max_stream_messages_in_flight, 8);
  EXPECT_EQ(c.connections.max_connection_idle_seconds, 1.5);
  EXPECT_EQ(c.connections.handshake_timeout_seconds, 2);
  EXPECT_EQ(c.connections.keepalive_time_seconds, 0);
  EXPECT_EQ(c.connections.keepalive_timeout_seconds, 3);
  EXPECT_EQ(c.connections.min_client_ping_interval_seconds, 0.5);
  EXPECT_EQ(c.connections.max_ping_strikes, 0);
}

TEST(Config, ConnectionLimitsOutOfRange) {
  const std::string m = std::string(kMinimal) + "server:\n  ";
  EXPECT_EQ(error_of(m + "max_streams_per_connection: 0\n"),
            "server.max_streams_per_connection: must be between 1 and 1073741824, got 0");
  EXPECT_EQ(error_of(m + "max_stream_messages_in_flight: 100000\n"),
            "server.max_stream_messages_in_flight: must be between 1 and 65536, got 100000");
  EXPECT_EQ(error_of(m + "handshake_timeout_seconds: 0\n"),
            "server.handshake_timeout_seconds: must be > 0, got 0");
  EXPECT_EQ(error_of(m + "keepalive_timeout_seconds: 0\n"),
            "server.keepalive_timeout_seconds: must be > 0, got 0");
  EXPECT_EQ(error_of(m + "max_connection_idle_seconds: -1\n"),
            "server.max_connection_idle_seconds: must be >= 0, got -1");
  EXPECT_EQ(error_of(m + "max_ping_strikes: -1\n"),
            "server.max_ping_strikes: must be between 0 and 1000, got -1");
  EXPECT_EQ(error_of(kMinimal, {{"min-client-ping-interval-seconds", "often"}}),
            "server.min_client_ping_interval_seconds: expected a number of seconds, got 'often'");
}
