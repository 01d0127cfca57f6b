#include "model/config/architecture.h"

namespace nmt {

// As transformers' modeling_marian.py, modeling_m2m_100.py and modeling_mbart.py build them.
Architecture Architecture::of(Family family) {
  Architecture a;
  a.family = family;
  switch (family) {
    case Family::kMarian:
      break;  // the defaults: post-norm, no extra norms, Marian's sinusoids from position 0
    case Family::kM2M100:
      a.norm_order = NormOrder::kPre;
      a.final_encoder_norm = a.final_decoder_norm = true;
      a.pad_position_zero = true;
      a.positions = PositionKind::kFairseqSinusoidal;
      a.position_offset = 2;
      break;
    case Family::kMBart:
      a.norm_order = NormOrder::kPre;
      a.embedding_norm = true;
      a.final_encoder_norm = a.final_decoder_norm = true;
      a.positions = PositionKind::kLearned;
      a.position_offset = 2;
      break;
  }
  return a;
}

const char* family_name(Family family) {
  switch (family) {
    case Family::kMarian:
      return "marian";
    case Family::kM2M100:
      return "m2m_100";
    case Family::kMBart:
      return "mbart";
  }
  return "?";
}

}  // namespace nmt
