// The M2M-100 / NLLB-200 and mBART-50 families on the CPU engine, on a tiny random model
// written here: the weights each family needs, and the pre-norm forward pass against a plain
// re-computation of transformers' modeling_m2m_100.py / modeling_mbart.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "model/config/model_config.h"
#include "model/config/weights.h"
#include "model/cpu_engine.h"
#include "model/error.h"
#include "tests/model/family_config.h"
#include "tests/support/conformance/conformance.h"

namespace fs = std::filesystem;
using namespace nmt;
using nlohmann::json;
using nmt::test::family_config;

namespace {

// A tiny random model of a family written as transformers' save_pretrained writes it (one
// shared table; mBART with its learned positions, layernorm_embedding and final_logits_bias).
class TinyFamilyModel {
 public:
  TinyFamilyModel(const std::string& model_type, unsigned seed) : config_json_(family_config(model_type)) {
    dir_ = fs::temp_directory_path() /
           ("nmt-family-" + std::to_string(::getpid()) + "-" + model_type + "-" + std::to_string(seed));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::mt19937 rng(seed);
    const ModelConfig c = ModelConfig::parse(config_json_.dump(), "config.json");
    const int64_t d = c.d_model, v = c.vocab_size;
    auto add = [&](const std::string& name, std::vector<int64_t> shape, float scale, float mean = 0.f) {
      int64_t n = 1;
      for (int64_t s : shape) n *= s;
      std::normal_distribution<float> dist(mean, scale);
      HostTensor t;
      t.shape = std::move(shape);
      t.data.resize(size_t(n));
      for (float& x : t.data) x = dist(rng);
      tensors_[name] = std::move(t);
    };
    add("model.shared.weight", {v, d}, 0.5f);
    auto attention = [&](const std::string& p) {
      for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
        add(p + proj + ".weight", {d, d}, 0.4f);
        add(p + proj + ".bias", {d}, 0.1f);
      }
    };
    auto norm = [&](const std::string& p) {
      add(p + ".weight", {d}, 0.2f, 1.f);
      add(p + ".bias", {d}, 0.1f);
    };
    auto ffn = [&](const std::string& p, int64_t f) {
      add(p + "fc1.weight", {f, d}, 0.4f);
      add(p + "fc1.bias", {f}, 0.1f);
      add(p + "fc2.weight", {d, f}, 0.4f);
      add(p + "fc2.bias", {d}, 0.1f);
      norm(p + "final_layer_norm");
    };
    attention("model.encoder.layers.0.self_attn.");
    norm("model.encoder.layers.0.self_attn_layer_norm");
    ffn("model.encoder.layers.0.", c.encoder_ffn_dim);
    attention("model.decoder.layers.0.self_attn.");
    norm("model.decoder.layers.0.self_attn_layer_norm");
    attention("model.decoder.layers.0.encoder_attn.");
    norm("model.decoder.layers.0.encoder_attn_layer_norm");
    ffn("model.decoder.layers.0.", c.decoder_ffn_dim);
    norm("model.encoder.layer_norm");
    norm("model.decoder.layer_norm");
    if (c.arch.family == Family::kMBart) {
      norm("model.encoder.layernorm_embedding");
      norm("model.decoder.layernorm_embedding");
      add("model.encoder.embed_positions.weight", {c.max_positions + 2, d}, 0.5f);
      add("model.decoder.embed_positions.weight", {c.max_positions + 2, d}, 0.5f);
      add("final_logits_bias", {1, v}, 0.3f);
    }
    save();
  }
  ~TinyFamilyModel() { fs::remove_all(dir_); }

  // float16: the tensors are rounded to it first (the plain forward pass then reads what the
  // file holds).
  void save(bool float16 = false) {
    std::ofstream(dir_ / "config.json") << config_json_.dump();
    json header = json::object();
    std::string data;
    for (auto& [name, t] : tensors_) {
      const size_t begin = data.size();
      if (float16) {
        for (float& x : t.data) {
          const _Float16 h = static_cast<_Float16>(x);
          x = static_cast<float>(h);
          data.append(reinterpret_cast<const char*>(&h), sizeof(h));
        }
      } else {
        data.append(reinterpret_cast<const char*>(t.data.data()), t.data.size() * sizeof(float));
      }
      header[name] = {{"dtype", float16 ? "F16" : "F32"}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
    }
    std::string h = header.dump();
    h.append((8 - h.size() % 8) % 8, ' ');
    std::string len(8, '\0');
    for (int i = 0; i < 8; ++i) len[size_t(i)] = char((h.size() >> (8 * i)) & 0xff);
    std::ofstream(dir_ / "model.safetensors", std::ios::binary | std::ios::trunc) << len << h << data;
  }
  void write_generation_config(const json& gen) const { std::ofstream(dir_ / "generation_config.json") << gen.dump(); }
  std::string dir() const { return dir_.string(); }
  ModelConfig config() const { return ModelConfig::load(dir()); }
  const HostTensor& tensor(const std::string& name) const { return tensors_.at(name); }
  std::map<std::string, HostTensor>& tensors() { return tensors_; }

 private:
  json config_json_;
  fs::path dir_;
  std::map<std::string, HostTensor> tensors_;
};

std::string weights_error(const TinyFamilyModel& m) {
  try {
    Weights::load(m.dir(), m.config());
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// transformers' forward pass of the family, written out plainly in double: the reference the
// engine's encoder output and first-step log-probs are held to.
class PlainForward {
 public:
  PlainForward(const TinyFamilyModel& m, const ModelConfig& c) : m_(m), c_(c), d_(c.d_model) {}

  using Rows = std::vector<std::vector<double>>;

  Rows encode(const std::vector<int>& ids) const {
    Rows x = embed("model.encoder", ids, 0);
    const std::string p = "model.encoder.layers.0.";
    x = add(x, self_attention(norm(x, p + "self_attn_layer_norm"), p + "self_attn.", false));
    x = add(x, ffn(norm(x, p + "final_layer_norm"), p));
    return norm(x, "model.encoder.layer_norm");
  }

  // Log-probs of the first target token after decoder_start_id, given the encoder output.
  std::vector<double> first_step(const Rows& enc) const {
    Rows y = embed("model.decoder", {c_.decoder_start_id}, 0);
    const std::string p = "model.decoder.layers.0.";
    y = add(y, self_attention(norm(y, p + "self_attn_layer_norm"), p + "self_attn.", true));
    y = add(y, cross_attention(norm(y, p + "encoder_attn_layer_norm"), enc, p + "encoder_attn."));
    y = add(y, ffn(norm(y, p + "final_layer_norm"), p));
    y = norm(y, "model.decoder.layer_norm");
    const HostTensor& e = m_.tensor("model.shared.weight");
    std::vector<double> logits(size_t(c_.vocab_size));
    for (int t = 0; t < c_.vocab_size; ++t) {
      double s = c_.arch.family == Family::kMBart ? m_.tensor("final_logits_bias").data[size_t(t)] : 0.0;
      for (int j = 0; j < d_; ++j) s += y[0][size_t(j)] * e.data[size_t(t * d_ + j)];
      logits[size_t(t)] = s;
    }
    const double mx = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (double l : logits) sum += std::exp(l - mx);
    for (double& l : logits) l = l - mx - std::log(sum);
    return logits;
  }

 private:
  Rows embed(const std::string& stack, const std::vector<int>& ids, int past) const {
    const HostTensor& e = m_.tensor("model.shared.weight");
    const double scale = c_.scale_embedding ? std::sqrt(double(d_)) : 1.0;
    Rows x(ids.size(), std::vector<double>(size_t(d_)));
    int counted = 0;
    for (size_t t = 0; t < ids.size(); ++t) {
      std::vector<double> pos(size_t(d_), 0.0);
      if (c_.arch.family == Family::kM2M100) {
        // create_position_ids_from_input_ids: non-pad tokens count from padding_idx + 1.
        if (ids[t] != c_.pad_id) {
          const int row = ++counted + past + c_.pad_id;
          for (int j = 0; j < d_ / 2; ++j) {
            const double angle = row * std::exp(-j * std::log(10000.0) / (d_ / 2 - 1));
            pos[size_t(j)] = std::sin(angle);
            pos[size_t(d_ / 2 + j)] = std::cos(angle);
          }
        }
      } else {  // MBartLearnedPositionalEmbedding: row position + 2
        const HostTensor& table = m_.tensor(stack + ".embed_positions.weight");
        for (int j = 0; j < d_; ++j) pos[size_t(j)] = table.data[(t + past + 2) * size_t(d_) + size_t(j)];
      }
      for (int j = 0; j < d_; ++j) x[t][size_t(j)] = e.data[size_t(ids[t] * d_ + j)] * scale + pos[size_t(j)];
    }
    return c_.arch.family == Family::kMBart ? norm(x, stack + ".layernorm_embedding") : x;
  }
  Rows norm(const Rows& x, const std::string& name) const {
    const HostTensor& g = m_.tensor(name + ".weight");
    const HostTensor& b = m_.tensor(name + ".bias");
    Rows y = x;
    for (auto& row : y) {
      double mean = 0, var = 0;
      for (double v : row) mean += v / d_;
      for (double v : row) var += (v - mean) * (v - mean) / d_;
      for (int j = 0; j < d_; ++j) row[size_t(j)] = (row[size_t(j)] - mean) / std::sqrt(var + 1e-5) * g.data[size_t(j)] + b.data[size_t(j)];
    }
    return y;
  }
  Rows linear(const Rows& x, const std::string& name) const {
    const HostTensor& w = m_.tensor(name + ".weight");
    const HostTensor& b = m_.tensor(name + ".bias");
    const int64_t out = w.shape[0], in = w.shape[1];
    Rows y(x.size(), std::vector<double>(size_t(out)));
    for (size_t r = 0; r < x.size(); ++r) {
      for (int64_t o = 0; o < out; ++o) {
        double s = b.data[size_t(o)];
        for (int64_t i = 0; i < in; ++i) s += x[r][size_t(i)] * w.data[size_t(o * in + i)];
        y[r][size_t(o)] = s;
      }
    }
    return y;
  }
  static Rows add(const Rows& a, const Rows& b) {
    Rows y = a;
    for (size_t r = 0; r < y.size(); ++r)
      for (size_t j = 0; j < y[r].size(); ++j) y[r][j] += b[r][j];
    return y;
  }
  Rows attend(const Rows& q, const Rows& k, const Rows& v, bool causal, int heads) const {
    const int hd = d_ / heads;
    Rows out(q.size(), std::vector<double>(size_t(d_), 0.0));
    for (size_t i = 0; i < q.size(); ++i) {
      for (int h = 0; h < heads; ++h) {
        const size_t keys = causal ? i + 1 : k.size();
        std::vector<double> s(keys);
        for (size_t j = 0; j < keys; ++j) {
          double dot = 0;
          for (int c = 0; c < hd; ++c) dot += q[i][size_t(h * hd + c)] * k[j][size_t(h * hd + c)];
          s[j] = dot / std::sqrt(double(hd));
        }
        const double mx = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (double& x : s) sum += (x = std::exp(x - mx));
        for (size_t j = 0; j < keys; ++j)
          for (int c = 0; c < hd; ++c) out[i][size_t(h * hd + c)] += s[j] / sum * v[j][size_t(h * hd + c)];
      }
    }
    return out;
  }
  Rows self_attention(const Rows& x, const std::string& p, bool causal) const {
    const int heads = causal ? c_.decoder_heads : c_.encoder_heads;
    return linear(attend(linear(x, p + "q_proj"), linear(x, p + "k_proj"), linear(x, p + "v_proj"), causal, heads),
                  p + "out_proj");
  }
  Rows cross_attention(const Rows& y, const Rows& enc, const std::string& p) const {
    return linear(attend(linear(y, p + "q_proj"), linear(enc, p + "k_proj"), linear(enc, p + "v_proj"), false,
                         c_.decoder_heads),
                  p + "out_proj");
  }
  Rows ffn(const Rows& x, const std::string& p) const {
    Rows h = linear(x, p + "fc1");
    for (auto& row : h) {
      for (double& v : row) {
        v = c_.activation == kernels::Activation::kRelu ? std::max(v, 0.0) : 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
      }
    }
    return linear(h, p + "fc2");
  }

  const TinyFamilyModel& m_;
  const ModelConfig c_;
  const int d_;
};

}  // namespace

TEST(FamilyWeights, EachFamilysTensorsAreChecked) {
  for (const std::string type : {"m2m_100", "mbart"}) {
    SCOPED_TRACE(type);
    TinyFamilyModel m(type, 1);
    EXPECT_EQ(weights_error(m), "no error");
    const HostTensor kept = m.tensor("model.decoder.layer_norm.bias");
    m.tensors().erase("model.decoder.layer_norm.bias");
    m.save();
    EXPECT_HAS(weights_error(m), "model.safetensors: missing tensor 'model.decoder.layer_norm.bias'");
    m.tensors()["model.decoder.layer_norm.bias"] = kept;
    if (type == "mbart") {
      m.tensors().erase("model.encoder.layernorm_embedding.weight");
      m.save();
      EXPECT_HAS(weights_error(m), "missing tensor 'model.encoder.layernorm_embedding.weight'");
      m.tensors()["model.encoder.layernorm_embedding.weight"] = m.tensor("model.encoder.layer_norm.weight");
      // the learned table holds max_position_embeddings + 2 rows
      HostTensor& pos = m.tensors()["model.decoder.embed_positions.weight"];
      pos.shape[0] -= 2;
      pos.data.resize(size_t(pos.shape[0] * pos.shape[1]));
      m.save();
      EXPECT_HAS(weights_error(m), "tensor 'model.decoder.embed_positions.weight' has shape [16, 8], expected [18, 8]");
    }
  }
  // The learned table is indexed by the engine's position: row p + 2 of the stored one.
  TinyFamilyModel m("mbart", 2);
  const Weights w = Weights::load(m.dir(), m.config());
  const HostTensor& stored = m.tensor("model.encoder.embed_positions.weight");
  ASSERT_EQ(w.encoder_positions().shape, (std::vector<int64_t>{16, 8}));
  EXPECT_EQ(w.encoder_positions().data[0], stored.data[2 * 8]);
  EXPECT_EQ(w.decoder_positions().data[15 * 8 + 7], m.tensor("model.decoder.embed_positions.weight").data[17 * 8 + 7]);
  EXPECT_FALSE(w.output_bias_is_zero());
  // Each module's stored copy of the shared table (and a tied lm_head's): held once.
  TinyFamilyModel copies("m2m_100", 4);
  for (const char* name : {"model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight"}) {
    copies.tensors()[name] = copies.tensor("model.shared.weight");
  }
  copies.save();
  const Weights held = Weights::load(copies.dir(), copies.config());
  EXPECT_EQ(held.decoder_embeddings().data.data(), held.encoder_embeddings().data.data());
  EXPECT_EQ(held.output_projection().data.data(), held.encoder_embeddings().data.data());
  EXPECT_EQ(held.encoder_embeddings().data, copies.tensor("model.shared.weight").data);
  // M2M-100 adds no final_logits_bias (transformers drops a stored one).
  TinyFamilyModel m2m("m2m_100", 3);
  m2m.tensors()["final_logits_bias"] = m.tensor("final_logits_bias");
  m2m.save();
  EXPECT_TRUE(Weights::load(m2m.dir(), m2m.config()).output_bias_is_zero());
}

// The engine's pre-norm encoder and first decoder step against the plain forward pass, on a
// source holding a <pad> inside (M2M-100 numbers only the other tokens), float32 and int8,
// from float32 and float16 files.
TEST(FamilyEngine, PreNormForwardMatchesThePlainComputation) {
  for (const auto& [type, float16] : {std::pair<std::string, bool>{"m2m_100", false}, {"mbart", false},
                                      {"m2m_100", true}, {"mbart", true}}) {
    SCOPED_TRACE(type + (float16 ? " stored as float16" : ""));
    TinyFamilyModel m(type, 11);
    if (float16) m.save(true);  // read as float32, computed in float32
    const ModelConfig c = m.config();
    const Weights w = Weights::load(m.dir(), c);
    const PlainForward plain(m, c);
    const std::vector<int> source = {5, 9, 1, 13, 7, 2};
    const auto enc = plain.encode(source);
    const std::vector<double> logp = plain.first_step(enc);
    for (const bool int8 : {false, true}) {
      SCOPED_TRACE(int8 ? "int8" : "float32");
      auto engine = make_cpu_engine(c, w, 0, 1, int8);
      engine->reserve({1, 4, 8});
      engine->encode({EncodeItem{&source, 0}});
      const std::vector<float> out = engine->encoder_output(0);
      ASSERT_EQ(out.size(), source.size() * 8);
      const double tolerance = int8 ? 0.1 : 1e-4;
      for (size_t t = 0; t < source.size(); ++t)
        for (size_t j = 0; j < 8; ++j) EXPECT_NEAR(out[t * 8 + j], enc[t][j], tolerance) << t << " " << j;
      // First step: the k best of the whole vocabulary (<pad> included: not banned here).
      StepInput in;
      StepGroup g;
      g.k = 5;
      in.groups = {g};
      in.tokens = {c.decoder_start_id};
      in.cache_rows = {0};
      in.parent_rows = {0};
      in.running_scores = {0.f};
      StepOutput result;
      engine->step(in, &result);
      std::vector<int> order(logp.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = int(i);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logp[size_t(a)] > logp[size_t(b)]; });
      ASSERT_EQ(result.scores.size(), 5u);
      for (size_t i = 0; i < 5; ++i) {
        if (!int8) EXPECT_EQ(result.candidates[i], order[i]) << i;
        EXPECT_NEAR(result.scores[i], logp[size_t(result.candidates[i])], int8 ? 0.1 : 1e-4) << i;
      }
      // The forced first token: log-prob 0, nothing else.
      in.groups[0].forced_token = 11;
      engine->step(in, &result);
      EXPECT_EQ(result.candidates[0], 11);
      EXPECT_EQ(result.scores[0], 0.f);
      EXPECT_TRUE(std::isinf(result.scores[1]));
      in.groups[0].forced_token = c.vocab_size;
      try {
        engine->step(in, &result);
        ADD_FAILURE() << "a forced token outside the vocabulary was taken";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
        EXPECT_HAS(e.what(), "forced token id 20 is outside the vocabulary");
      }
    }
  }
}

// At the maximum length every hypothesis ends; EOS is forced there only where the model's
// generation config forces it (mBART-50's does, NLLB's and M2M-100's hub configs do not).
TEST(FamilyEngine, EosForcedAtTheLimitOnlyWhereTheModelForcesIt) {
  TinyFamilyModel m("m2m_100", 21);
  const std::vector<int> source = {5, 9, 13, 7, 2};
  DecodeOptions o;
  o.beam_size = 4;
  o.num_hypotheses = 4;
  o.max_decoding_length = 3;
  o.forced_bos_id = 11;
  auto decode = [&](const json& gen) {
    m.write_generation_config(gen);
    const ModelConfig c = m.config();
    const Weights w = Weights::load(m.dir(), c);
    auto engine = make_cpu_engine(c, w, 0, 1, false);
    return test::decode_ids(*engine, c, {source}, {o}).at(0);
  };
  const Translation forced = decode({{"decoder_start_token_id", 2}, {"forced_eos_token_id", 2}});
  const Translation free = decode({{"decoder_start_token_id", 2}});
  ASSERT_EQ(forced.hypotheses.size(), 4u);
  ASSERT_EQ(free.hypotheses.size(), 4u);
  int free_without_eos = 0;
  for (size_t h = 0; h < 4; ++h) {
    EXPECT_EQ(forced.hypotheses[h].ids.front(), 11);
    EXPECT_EQ(free.hypotheses[h].ids.front(), 11);
    EXPECT_EQ(forced.hypotheses[h].ids.back(), 2) << "hypothesis " << h;
    EXPECT_LE(free.hypotheses[h].ids.size(), 3u);
    free_without_eos += free.hypotheses[h].ids.size() == 3 && free.hypotheses[h].ids.back() != 2;
  }
  EXPECT_GT(free_without_eos, 0) << "no hypothesis reached the limit without </s>: the case is not exercised";
}
