#include "model/decoding/decode_options.h"

#include <cmath>
#include <sstream>

#include "model/error.h"

namespace nmt {
namespace {
[[noreturn]] void invalid(const std::string& msg) { throw Error(ErrorCode::kInvalidArgument, msg); }
std::string number(float x) {  // as a user wrote it: 1.5, not 1.500000
  std::ostringstream s;
  s << x;
  return s.str();
}
}  // namespace

void DecodeOptions::validate(int max_beam, int max_length) const {
  if (beam_size < 1 || beam_size > max_beam) {
    invalid("beam_size must be between 1 and " + std::to_string(max_beam) + ", got " + std::to_string(beam_size));
  }
  if (samples()) {
    validate_sampling(max_beam);
  } else if (num_hypotheses < 1 || num_hypotheses > beam_size) {
    invalid("num_hypotheses must be between 1 and beam_size (" + std::to_string(beam_size) + "), got " +
            std::to_string(num_hypotheses));
  }
  if (sampling_topk < 0) invalid("sampling_topk must be >= 0 (0: the whole vocabulary), got " + std::to_string(sampling_topk));
  if (!(sampling_topp > 0.f && sampling_topp <= 1.f))
    invalid("sampling_topp must be in (0, 1], got " + number(sampling_topp));
  if (!(std::isfinite(sampling_temperature) && sampling_temperature >= 0.f))
    invalid("sampling_temperature must be a finite number >= 0 (0: greedy), got " + number(sampling_temperature));
  if (forced_bos_id < -1) invalid("forced_bos_id must be a token id or -1, got " + std::to_string(forced_bos_id));
  if (!std::isfinite(length_penalty)) invalid("length_penalty must be a finite number");
  if (max_decoding_length < 1 || max_decoding_length > max_length) {
    invalid("max_decoding_length must be between 1 and " + std::to_string(max_length) + ", got " +
            std::to_string(max_decoding_length));
  }
  if (min_decoding_length < 0 || min_decoding_length >= max_decoding_length) {
    invalid("min_decoding_length must be between 0 and max_decoding_length - 1 (" +
            std::to_string(max_decoding_length - 1) + "), got " + std::to_string(min_decoding_length));
  }
}

// A sampling sentence: beam 1 (beam search over samples is not defined here), its
// num_hypotheses are independent samples, each a cache row like a beam.
void DecodeOptions::validate_sampling(int max_beam) const {
  if (beam_size != 1)
    invalid("beam_size must be 1 when sampling (sampling_topk != 1 and sampling_temperature > 0), got " +
            std::to_string(beam_size) + ": num_hypotheses gives that many independent samples");
  if (num_hypotheses < 1 || num_hypotheses > max_beam)
    invalid("num_hypotheses (the samples) must be between 1 and " + std::to_string(max_beam) +
            " (each sample takes a cache row, as a beam), got " + std::to_string(num_hypotheses));
}

}  // namespace nmt
