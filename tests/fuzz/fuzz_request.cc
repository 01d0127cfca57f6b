// Arbitrary bytes as a nmt.v1.TranslateRequest, through the server's admission check
// (RequestValidator::validate with the demo model's tokenizer and the English sentence
// splitter), as the request pipeline (server/pipeline/request_pipeline.h) runs it
// before queueing; no network. A request is refused with nmt::Error(kInvalidArgument) or
// accepted, and what is accepted must be safe for the scheduler, the engine and gRPC (a
// request_id echoed as metadata must be a legal header value: gRPC aborts on others).
#include <grpc/grpc.h>
#include <grpc/slice.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "model/config/model_config.h"
#include "model/error.h"
#include "model/tokenizer/tokenizer.h"
#include "nmt/v1/translation.pb.h"
#include "server/pipeline/request_validator.h"
#include "model/text/sentence_splitter.h"

namespace {

const nmt::ModelConfig& config() {
  static const nmt::ModelConfig c = nmt::ModelConfig::load(NMT_DEMO_MODEL_DIR);
  return c;
}

const nmt::Tokenizer& tokenizer() {
  static const std::unique_ptr<nmt::Tokenizer> tok = nmt::Tokenizer::load(NMT_DEMO_MODEL_DIR, config());
  return *tok;
}

// The serving defaults, with a smaller characters cap so that large requests are reached.
const nmt::server::RequestValidator& validator() {
  static const nmt::server::RequestValidator v([] {
    nmt::server::Limits limits;
    limits.max_characters_per_request = 2000;
    return limits;
  }());
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nmt::v1::TranslateRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;  // gRPC refuses these
  const nmt::server::Limits& limits = validator().limits();
  // What the server echoes as metadata must be legal for gRPC (which aborts otherwise).
  const std::string& id = request.request_id();
  if (nmt::server::valid_request_id(id) &&
      !grpc_header_nonbin_value_is_legal(grpc_slice_from_static_buffer(id.data(), id.size()))) {
    __builtin_trap();
  }
  nmt::server::ValidRequest valid;
  try {
    valid = validator().validate(
        request, [](const std::string& text) { return tokenizer().encode(text); },
        [](const std::string& text) { return nmt::SentenceSplitter::for_language("en").split(text); },
        [](const std::string& text) { return tokenizer().encode_target(text); });
  } catch (const nmt::Error& e) {
    if (e.code() != nmt::ErrorCode::kInvalidArgument) __builtin_trap();
    return 0;
  }
  // Accepted: within every limit, and acceptable to the engine's own option check.
  if (!id.empty() && !nmt::server::valid_request_id(id)) __builtin_trap();
  size_t characters = 0;
  for (const std::string& text : request.texts()) characters += nmt::server::count_characters(text);
  if (valid.source_ids.empty() || characters > static_cast<size_t>(limits.max_characters_per_request)) {
    __builtin_trap();
  }
  // Split texts: each rebuilds from its sentences and gaps, and every sentence is scheduled.
  size_t split_sentences = 0;
  for (size_t i = 0; i < valid.split.size(); ++i) {
    if (valid.split[i].join(valid.split[i].sentences) != request.texts(int(i))) __builtin_trap();
    split_sentences += valid.split[i].sentences.size();
  }
  if (!valid.split.empty() && split_sentences != valid.source_ids.size()) __builtin_trap();
  for (const auto& ids : valid.source_ids) {
    if (ids.empty() || ids.size() > static_cast<size_t>(limits.max_input_tokens)) __builtin_trap();
    for (int id : ids) {
      if (id < 0 || id >= config().vocab_size) __builtin_trap();
    }
  }
  if (valid.options.max_decoding_length > limits.max_decoding_length) __builtin_trap();
  try {
    valid.options.validate(limits.max_beam_size, config().max_positions);
  } catch (const nmt::Error&) {
    __builtin_trap();  // the server accepted what the engine refuses
  }
  return 0;
}
