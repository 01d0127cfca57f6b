#include "model/config/weights.h"

#include <algorithm>
#include <cmath>

#include "model/config/safetensors.h"
#include "model/error.h"

namespace nmt {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Every tensor name the config implies, with its expected shape.
std::vector<std::pair<std::string, std::vector<int64_t>>> expected_layer_tensors(
    const ModelConfig& c) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  const int64_t d = c.d_model;
  auto add_attention = [&](const std::string& p) {
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
      out.push_back({p + proj + ".weight", {d, d}});
      out.push_back({p + proj + ".bias", {d}});
    }
  };
  auto add_norm = [&](const std::string& p) {
    out.push_back({p + ".weight", {d}});
    out.push_back({p + ".bias", {d}});
  };
  auto add_ffn = [&](const std::string& p, int64_t ffn) {
    out.push_back({p + "fc1.weight", {ffn, d}});
    out.push_back({p + "fc1.bias", {ffn}});
    out.push_back({p + "fc2.weight", {d, ffn}});
    out.push_back({p + "fc2.bias", {d}});
    add_norm(p + "final_layer_norm");
  };
  for (int l = 0; l < c.encoder_layers; ++l) {
    const std::string p = layer_prefix(false, l);
    add_attention(p + "self_attn.");
    add_norm(p + "self_attn_layer_norm");
    add_ffn(p, c.encoder_ffn_dim);
  }
  for (int l = 0; l < c.decoder_layers; ++l) {
    const std::string p = layer_prefix(true, l);
    add_attention(p + "self_attn.");
    add_norm(p + "self_attn_layer_norm");
    add_attention(p + "encoder_attn.");
    add_norm(p + "encoder_attn_layer_norm");
    add_ffn(p, c.decoder_ffn_dim);
  }
  return out;
}

}  // namespace

bool Weights::output_bias_is_zero() const {
  const std::vector<float>& bias = output_bias().data;
  return std::all_of(bias.begin(), bias.end(), [](float v) { return v == 0.f; });
}

size_t Weights::bytes() const {
  size_t total = 0;
  for (const auto& entry : tensors_) total += entry.second.data.capacity() * sizeof(float);
  return total;
}

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

std::string layer_prefix(bool decoder, int layer) {
  return std::string(decoder ? "model.decoder" : "model.encoder") + ".layers." +
         std::to_string(layer) + ".";
}

HostTensor Weights::sinusoidal_positions(int positions, int dim) {
  HostTensor t;
  t.shape = {positions, dim};
  t.data.resize(size_t(positions) * dim);
  const int half = dim / 2;
  for (int p = 0; p < positions; ++p) {
    for (int j = 0; j < half; ++j) {
      // Frequencies of the pairs (2j, 2j+1) share the exponent 2j / dim.
      const double angle = p / std::pow(10000.0, 2.0 * j / dim);
      t.data[size_t(p) * dim + j] = float(std::sin(angle));
      t.data[size_t(p) * dim + half + j] = float(std::cos(angle));
    }
  }
  return t;
}

HostTensor Weights::fairseq_sinusoidal_positions(int positions, int dim, int offset) {
  HostTensor t;
  t.shape = {positions, dim};
  t.data.resize(size_t(positions) * dim);
  const int half = dim / 2;
  // torch: exp(arange(half).float() * -(ln(10000) / (half - 1))) and position * that, both in
  // float32 (the Python scalar rounded to float32); sin and cos of the float32 angle.
  const float step = float(std::log(10000.0) / (half - 1));
  for (int p = 0; p < positions; ++p) {
    for (int j = 0; j < half; ++j) {
      const float frequency = std::exp(float(j) * -step);
      const float angle = float(p + offset) * frequency;
      t.data[size_t(p) * dim + j] = std::sin(angle);
      t.data[size_t(p) * dim + half + j] = std::cos(angle);
    }
  }
  return t;
}

const std::string& Weights::resolve(const std::string& name) const {
  auto a = aliases_.find(name);
  return a == aliases_.end() ? name : a->second;
}

const HostTensor& Weights::get(const std::string& name) const {
  auto it = tensors_.find(resolve(name));
  if (it == tensors_.end()) {
    throw Error(ErrorCode::kNotFound, file_ + ": missing tensor '" + name + "'");
  }
  return it->second;
}

Weights Weights::load(const std::string& model_dir, const ModelConfig& c) {
  Weights w;
  w.file_ = model_dir + "/model.safetensors";
  SafetensorsFile file(w.file_);
  auto read = [&](const std::string& name, const std::vector<int64_t>& shape) {
    auto it = file.entries().find(name);
    if (it == file.entries().end()) {
      throw Error(ErrorCode::kNotFound, w.file_ + ": missing tensor '" + name + "'");
    }
    if (it->second.shape != shape) {
      throw Error(ErrorCode::kInvalidArgument,
                  w.file_ + ": tensor '" + name + "' has shape " + shape_str(it->second.shape) +
                      ", expected " + shape_str(shape) + " from config.json");
    }
    return HostTensor{shape, file.read_float(name)};
  };
  auto first_present = [&](std::initializer_list<const char*> names) -> std::string {
    for (const char* n : names) {
      if (file.entries().count(n)) return n;
    }
    return "";
  };
  for (const auto& [name, shape] : expected_layer_tensors(c)) w.tensors_[name] = read(name, shape);

  const int64_t v = c.vocab_size, tv = c.target_vocab_size, d = c.d_model;
  // Shared embeddings live in model.shared.weight (transformers may also write per-module
  // copies); separate ones only in the modules, the decoder's of target_vocab_size rows.
  const std::string enc = first_present({"model.encoder.embed_tokens.weight", "model.shared.weight"});
  const std::string dec = c.share_embeddings
                              ? first_present({"model.decoder.embed_tokens.weight", "model.shared.weight"})
                              : first_present({"model.decoder.embed_tokens.weight"});
  if (enc.empty()) {
    throw Error(ErrorCode::kNotFound, w.file_ + ": missing tensor 'model.shared.weight' (no embeddings)");
  }
  if (dec.empty()) {
    throw Error(ErrorCode::kNotFound, w.file_ + ": missing tensor 'model.decoder.embed_tokens.weight' "
                                                "(share_encoder_decoder_embeddings is false)");
  }
  w.tensors_[kEncoderEmbeddings] = read(enc, {v, d});
  if (enc == dec) {
    w.aliases_[kDecoderEmbeddings] = kEncoderEmbeddings;
  } else {
    HostTensor table = read(dec, {tv, d});
    // Checkpoints of shared embeddings often store each module's copy (NLLB's hub weights
    // do): equal copies are held once.
    if (c.share_embeddings && table.data == w.tensors_[kEncoderEmbeddings].data) {
      w.aliases_[kDecoderEmbeddings] = kEncoderEmbeddings;
    } else {
      w.tensors_[kDecoderEmbeddings] = std::move(table);
    }
  }
  // As transformers: a tied lm_head is the decoder embeddings (a stored copy must agree);
  // an untied one must be stored.
  const bool has_head = file.entries().count("lm_head.weight") > 0;
  if (c.tie_output) {
    if (has_head && read("lm_head.weight", {tv, d}).data != w.decoder_embeddings().data) {
      throw Error(ErrorCode::kInvalidArgument,
                  w.file_ + ": tensor 'lm_head.weight' differs from the decoder embeddings, but config.json "
                            "field 'tie_word_embeddings' is true (set it to false for an untied output layer)");
    }
    w.aliases_[kOutputProjection] = w.resolve(kDecoderEmbeddings);
  } else {
    if (!has_head) {
      throw Error(ErrorCode::kNotFound, w.file_ + ": missing tensor 'lm_head.weight' (config.json field "
                                                  "'tie_word_embeddings' is false)");
    }
    w.tensors_[kOutputProjection] = read("lm_head.weight", {tv, d});
  }
  // M2M100ForConditionalGeneration has no final_logits_bias: transformers drops a stored one.
  if (c.arch.family != Family::kM2M100 && file.entries().count("final_logits_bias")) {
    HostTensor b = read("final_logits_bias", {1, tv});
    b.shape = {tv};
    w.tensors_[kOutputBias] = std::move(b);
  } else {
    w.tensors_[kOutputBias] = HostTensor{{tv}, std::vector<float>(size_t(tv), 0.f)};
  }
  const int64_t p = c.max_positions;
  switch (c.arch.positions) {
    case PositionKind::kMarianSinusoidal:
      // transformers computes Marian's table; a stored one (older exports) is used as stored.
      w.tensors_[kEncoderPositions] = file.entries().count("model.encoder.embed_positions.weight")
                                          ? read("model.encoder.embed_positions.weight", {p, d})
                                          : sinusoidal_positions(int(p), int(d));
      if (file.entries().count("model.decoder.embed_positions.weight")) {
        w.tensors_[kDecoderPositions] = read("model.decoder.embed_positions.weight", {p, d});
      } else {
        w.aliases_[kDecoderPositions] = kEncoderPositions;
      }
      break;
    case PositionKind::kFairseqSinusoidal:
      // A non-persistent buffer in transformers: never stored, always computed.
      w.tensors_[kEncoderPositions] = fairseq_sinusoidal_positions(int(p), int(d), c.arch.position_offset);
      w.aliases_[kDecoderPositions] = kEncoderPositions;
      break;
    case PositionKind::kLearned: {
      // [max_position_embeddings + offset, d]: the engine's position p is row p + offset.
      const int64_t off = c.arch.position_offset;
      for (auto [name, key] : {std::pair<const char*, const char*>{"model.encoder.embed_positions.weight", kEncoderPositions},
                               {"model.decoder.embed_positions.weight", kDecoderPositions}}) {
        HostTensor t = read(name, {p + off, d});
        t.data.erase(t.data.begin(), t.data.begin() + off * d);
        t.shape = {p, d};
        w.tensors_[key] = std::move(t);
      }
      break;
    }
  }
  // The pre-norm families' extra norms.
  std::vector<const char*> norms;
  if (c.arch.final_encoder_norm) norms.push_back(kEncoderFinalNorm);
  if (c.arch.final_decoder_norm) norms.push_back(kDecoderFinalNorm);
  if (c.arch.embedding_norm) {
    norms.push_back(kEncoderEmbeddingNorm);
    norms.push_back(kDecoderEmbeddingNorm);
  }
  for (const char* norm : norms) {
    for (const char* part : {".weight", ".bias"}) {
      const std::string name = std::string(norm) + part;
      w.tensors_[name] = read(name, {d});
    }
  }
  return w;
}

}  // namespace nmt
