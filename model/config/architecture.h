#pragma once
// The one description of a model family's Transformer that both engines read: where the
// layer norms sit, which extra norms there are, how positions are made and how a <pad>
// token's position is treated. A family is added here once; the engines' layer code takes
// these as parameters instead of being spelled out per family.
namespace nmt {

enum class Family { kMarian, kM2M100, kMBart };  // config.json model_type marian | m2m_100 | mbart

// post: x = LN(x + f(x)) (Marian); pre: x = x + f(LN(x)) (M2M-100, NLLB-200, mBART).
enum class NormOrder { kPost, kPre };

// How Weights makes the position tables (the engines only index them by position).
enum class PositionKind {
  kMarianSinusoidal,   // Marian: sin in the first half, cos in the second, exponent 2j / d
  kFairseqSinusoidal,  // M2M-100 / NLLB: sin | cos with exponent j / (d/2 - 1), offset 2
  kLearned,            // mBART: model.{encoder,decoder}.embed_positions.weight, offset 2
};

struct Architecture {
  Family family = Family::kMarian;
  NormOrder norm_order = NormOrder::kPost;
  bool embedding_norm = false;      // mBART: layernorm_embedding after embed*scale + position
  bool final_encoder_norm = false;  // model.encoder.layer_norm after the last encoder layer
  bool final_decoder_norm = false;  // model.decoder.layer_norm after the last decoder layer
  bool pad_position_zero = false;   // M2M-100/NLLB: a <pad> token's position vector is zeros
  PositionKind positions = PositionKind::kMarianSinusoidal;
  // Rows of the stored or computed table before the engine's position 0 (fairseq's
  // padding_idx + 1 = 2 for M2M-100 and mBART; 0 for Marian). Weights applies it.
  int position_offset = 0;
  static Architecture of(Family family);
};

const char* family_name(Family family);  // "marian", "m2m_100", "mbart"

}  // namespace nmt
