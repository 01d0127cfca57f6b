// Config parsing: defaults from configs/default.yaml, flag overrides, and the errors for
// unknown flags/keys, wrong types, out-of-range values and inconsistent limits.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "server/config.h"

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
  EXPECT_EQ(c.limits.max_sentences_per_request, 64);
  EXPECT_EQ(c.limits.max_input_tokens, 256);
  EXPECT_EQ(c.max_concurrent_calls, 4096);
  EXPECT_EQ(c.batching.max_active_sentences, 256);
  EXPECT_EQ(c.batching.max_active_rows, 1024);
  EXPECT_EQ(c.batching.max_admit_tokens, 2048);
  EXPECT_EQ(c.batching.max_admit_delay_steps, 8);
  EXPECT_EQ(c.batching.max_queue_sentences, 4096);
  ASSERT_EQ(c.models.size(), 1u);
  EXPECT_EQ(c.models[0].name, "m30k-en-de-small");
  // Relative to the config file's folder, not the working directory.
  EXPECT_EQ(c.models[0].path, std::string(NMT_REPO_ROOT) + "/models/m30k-en-de-small");
  EXPECT_EQ(c.models[0].device, "auto");
  EXPECT_EQ(c.models[0].workers, 2);
}

TEST(Config, DefaultsWhenSectionsAreAbsent) {
  const ServerConfig c = parse_config(kMinimal, "/etc/nmt");
  EXPECT_EQ(c.port, 50051);
  EXPECT_EQ(c.log_format, "text");
  EXPECT_EQ(c.models[0].path, "/etc/models/m");
  EXPECT_EQ(c.models[0].precision, "float16");
  EXPECT_EQ(c.models[0].workers, 1);
  EXPECT_EQ(c.models[0].threads, 0);
  // The struct defaults, as server/scheduling_options.h documents them.
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
)", "/etc/nmt");
  EXPECT_EQ(c.max_concurrent_calls, 100);
  EXPECT_EQ(c.batching.max_active_sentences, 8);
  EXPECT_EQ(c.batching.max_active_rows, 32);
  EXPECT_EQ(c.batching.max_admit_tokens, 512);
  EXPECT_EQ(c.batching.max_admit_delay_steps, 1);
  EXPECT_EQ(c.batching.max_queue_sentences, 64);
}

TEST(Config, BatchingFlagsOverrideTheYaml) {
  const char* argv[] = {"nmt-server", "--config", "x.yaml",
                        "--max-active-sentences", "3", "--max-active-rows=12",
                        "--max-admit-tokens", "99", "--max-admit-delay-steps", "2",
                        "--max-queue-sentences", "640",
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
                           "--metrics-port", "--device", "--precision", "--log-format",
                           "--log-level", "--max-active-sentences", "--max-active-rows",
                           "--max-admit-tokens", "--max-admit-delay-steps",
                           "--max-queue-sentences",
                           "--max-concurrent-calls", "--workers", "--threads",
                           "--max-sentences-per-request", "--max-input-tokens",
                           "--max-beam-size", "--max-decoding-length",
                           "--shutdown-grace-seconds", "--max-message-bytes"}) {
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

TEST(Config, YamlErrorsNameTheKey) {
  const std::string m = kMinimal;
  EXPECT_EQ(error_of(m + "server:\n  prot: 1\n"), "unknown key 'server.prot'");
  EXPECT_EQ(error_of(m + "servers:\n  port: 1\n"),
            "unknown key 'servers' (known: server, limits, batching, models)");
  EXPECT_EQ(error_of(m + "server:\n  port: abc\n"), "server.port: expected an integer, got 'abc'");
  EXPECT_EQ(error_of(m + "server:\n  port: 70000\n"),
            "server.port: must be between 1 and 65535, got 70000");
  EXPECT_EQ(error_of(m + "server:\n  log_format: xml\n"),
            "server.log_format: must be one of text | json, got 'xml'");
  EXPECT_EQ(error_of(m + "batching:\n  max_active_rows: -1\n"),
            "batching.max_active_rows: must be between 1 and 1073741824, got -1");
  EXPECT_EQ(error_of("models:\n  - name: m\n    path: p\n    device: tpu\n"),
            "models[0].device: must be one of auto | cpu | cuda, got 'tpu'");
  EXPECT_EQ(error_of("models:\n  - name: m\n    path: p\n    colour: red\n"),
            "unknown key 'models[0].colour' (known: name, path, device, precision, device_memory_limit_mb, workers, threads)");
  EXPECT_EQ(error_of("models:\n  - path: p\n"), "models[0].name is missing");
  EXPECT_EQ(error_of("models: []\n"), "models: at least one model is required");
  EXPECT_EQ(error_of("models:\n  - {name: a, path: p}\n  - {name: a, path: q}\n"),
            "models: the name 'a' appears twice");
  EXPECT_EQ(error_of(m + "batching:\n  max_queue_sentences: 10\n"),
            "batching.max_queue_sentences (10) must be >= limits.max_sentences_per_request (64)");
  EXPECT_EQ(error_of("server: [1, 2\n").rfind("invalid YAML", 0), 0u);
}

TEST(Config, FlagValuesAreCheckedLikeYaml) {
  EXPECT_EQ(error_of(kMinimal, {{"port", "http"}}), "server.port: expected an integer, got 'http'");
  EXPECT_EQ(error_of(kMinimal, {{"device", "gpu"}}),
            "models[0].device: must be one of auto | cpu | cuda, got 'gpu'");
  EXPECT_EQ(error_of(kMinimal, {{"log-level", "loud"}}),
            "server.log_level: must be one of trace | debug | info | warn | error | critical | off, got 'loud'");
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
  EXPECT_EQ(error_of(kMinimal, {{"device-memory-limit-mb", "-1"}}),
            "models[0].device_memory_limit_mb: must be between 0 and 1073741824, got -1");
}
