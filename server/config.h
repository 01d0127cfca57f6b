#pragma once
// Server configuration: the YAML file (configs/default.yaml documents every key) with
// command-line flags on top. Unknown keys and flags, wrong types and out-of-range values
// are errors (ConfigError) whose message names the key or flag.
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "server/batcher.h"
#include "server/limits.h"

namespace nmt::server {

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ModelEntry {
  std::string name;
  std::string path;  // absolute, or relative to the working directory when given so
  std::string device = "auto";        // auto | cpu | cuda
  std::string precision = "float16";  // float16 | float32
  // Working memory one batch may use (the CUDA engine's allocations; on the CPU the
  // estimated per-batch buffers). A batch over it fails RESOURCE_EXHAUSTED. 0 = no cap.
  int device_memory_limit_mb = 0;
  // Translators (engine copies) serving the model's queue, each on its own worker thread:
  // one batch's host-side work overlaps another's device work (GPU), or batches run on
  // separate cores (CPU, one BLAS thread each).
  int workers = 1;
};

struct ServerConfig {
  std::string host = "0.0.0.0";
  int port = 50051;
  std::string metrics_host = "127.0.0.1";
  int metrics_port = 9464;
  int max_message_bytes = 4 << 20;
  std::string log_format = "text";  // text | json
  std::string log_level = "info";   // trace | debug | info | warn | error | critical | off
  double shutdown_grace_seconds = 30;
  // TLS: both PEM files, or neither (plaintext). Relative paths resolve like model paths.
  std::string tls_cert_file;
  std::string tls_key_file;
  // Bearer-token authentication of TranslationService: a file with one accepted token per
  // line (rotation: list old and new). Empty = no authentication. Health stays open.
  std::string auth_token_file;
  Limits limits;
  BatchingOptions batching;
  std::vector<ModelEntry> models;  // the first one is the default model
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
