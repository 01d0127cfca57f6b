#pragma once
// The facade the CLI and the server use: load a model on a device, translate batches.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/config/model_config.h"
#include "model/decoding/decode_options.h"
#include "model/tokenizer/tokenizer.h"

namespace nmt {

enum class Device { kAuto, kCpu, kCuda };
// int8: weights per row (kernels/quantize.h); fp8: e4m3 weights per row, CUDA on compute
// capability 8.9+ only.
enum class Precision { kFloat32, kFloat16, kInt8, kFp8 };
// Every value, in the order their names are listed to users (the config's choices).
inline constexpr Device kDevices[] = {Device::kAuto, Device::kCpu, Device::kCuda};
inline constexpr Precision kPrecisions[] = {Precision::kFloat16, Precision::kFloat32, Precision::kInt8,
                                            Precision::kFp8};

bool parse_device(const std::string& s, Device* out);        // "auto" | "cpu" | "cuda"
bool parse_precision(const std::string& s, Precision* out);  // "float32" | "float16" | "int8" | "fp8"
const char* device_name(Device d);
const char* precision_name(Precision p);  // as parse_precision reads it
bool cuda_available();  // a CUDA build that sees at least one device

struct TranslatorOptions {
  Device device = Device::kAuto;  // auto = cuda when available, else cpu
  // The CPU computes float16 as float32; int8 quantizes the weights at load (the CPU: activations
  // per row too; CUDA: weight-only, float16 activations; compute capability 6.1 or newer).
  Precision precision = Precision::kFloat16;
  int device_index = 0;
  // Bytes the CUDA engine may hold; on the CPU, the bytes of its persistent decode state
  // (cross-attention keys/values, caches). Over it: nmt::Error(kResourceExhausted). 0 = no cap.
  size_t device_memory_limit = 0;
  int threads = 0;  // CPU: cores each decode step uses (GEMMs, row loops); 0 = all
  // Decode loops of at least this many cache rows keep two steps in flight, each following
  // the one before (DecodeLoop::set_follow_rows; 0: never); -1: the loop's default.
  int follow_rows = -1;
};

// return_alignments (docs/decoding.md, "Alignments"): the source token a target token
// attends to most in the cross-attention of the penultimate decoder layer, averaged over its
// heads, at the step that produced it. Byte ranges are [begin, end) in the request's source
// text and in the translation's text (with split_sentences: the whole request's text and the
// whole translation); a token without text of its own (EOS, a language token, </s>) has an
// empty range at the position where it stands.
struct TokenAlignment {
  int target_token = 0;  // index into Hypothesis::ids
  int source_token = 0;  // index into the source's ids (its </s> and language token included)
  size_t source_begin = 0, source_end = 0;
  size_t target_begin = 0, target_end = 0;
};

struct Hypothesis {
  std::vector<int> ids;  // generated target ids, EOS included
  std::string text;
  float score = 0.f;     // sum of log-probs / length ** length_penalty
  // return_alignments: one per target token of ids, in order; only the best hypothesis has them.
  std::vector<TokenAlignment> alignments;
  // Per id of `ids`, its log-prob (0 for a forced token: the target language, a
  // target_prefix token); for Score, the target's tokens' teacher-forced log-probs.
  std::vector<float> token_scores;
};

struct Translation {
  std::vector<Hypothesis> hypotheses;  // best first; num_hypotheses of them
};

// The languages a request asks for, as the caller names them (a model code such as deu_Latn,
// a FLORES-200 code, an ISO 639-1 alias such as "de": model/tokenizer/languages.h resolves them); ""
// = the model's default (a multilingual model's src_lang; for the target, the model's
// forced_bos_token_id).
struct LanguagePair {
  std::string source, target;
};

using DetokenizeFn = std::function<std::string(const std::vector<int>& ids)>;

struct BatchStats {
  double encode_seconds = 0;
  double decode_seconds = 0;
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  int decode_steps = 0;  // decoder positions: the longest sentence's steps
};

// return_alignments: sets the byte ranges of h's alignments (their token indices set, its
// text made) in `source`, the text it translates (tokenized in `encode_language`, as
// Tokenizer::encode takes it), and in h->text. Throws nmt::Error(kInternal) when an index is
// outside the tokens.
void set_alignment_spans(const Tokenizer& tokenizer, const std::string& source, const std::string& encode_language,
                         Hypothesis* h);

class DecodeLoop;
class Engine;
class Weights;
struct EngineCapacity;

class Translator {
 public:
  // Loads config, weights and tokenizer from model_dir and builds the engine; throws
  // nmt::Error with a message naming the file/field/tensor at fault.
  static std::unique_ptr<Translator> load(const std::string& model_dir,
                                          const TranslatorOptions& options);
  ~Translator();

  const ModelConfig& config() const;
  const Tokenizer& tokenizer() const;
  Device device() const { return device_; }  // resolved: kCpu or kCuda
  Precision precision() const { return precision_; }  // computed in: float16 is float32 on the CPU

  // Translates the sentences through a decode loop that holds all of them at once (the
  // caller chooses how many: the offline batch size); each sentence leaves the loop when it
  // finishes. Not thread-safe: one thread drives a Translator. Throws nmt::Error.
  // `languages` picks the source-language token and, for M2M-100 / NLLB / mBART-50, the
  // target language (options.forced_bos_id); a bilingual Marian model refuses a language
  // other than its own pair (where its tokenizer_config.json names it).
  // `glossary`: empty, or per source its DecodeOptions::glossary_phrases (the target terms,
  // as target ids, of the glossary entries whose source term it holds: model/text/glossary.h).
  std::vector<Translation> translate(const std::vector<std::string>& sources,
                                     const DecodeOptions& options, BatchStats* stats = nullptr,
                                     const LanguagePair& languages = {},
                                     const std::vector<std::vector<std::vector<int>>>& glossary = {});
  std::vector<Translation> translate_ids(const std::vector<std::vector<int>>& source_ids,
                                         const DecodeOptions& options, BatchStats* stats = nullptr);
  // Each sentence with options of its own (a glossary's phrases are per sentence: the
  // entries whose source term it holds), in one decode loop.
  std::vector<Translation> translate_ids(const std::vector<std::vector<int>>& source_ids,
                                         const std::vector<DecodeOptions>& each, BatchStats* stats = nullptr);

  // Score (docs/decoding.md): each target's log-probs given its source, by teacher forcing in
  // the same decode loop: one hypothesis per pair, its ids the forced language token (if
  // any), the target's and </s>, its token_scores per id, its score normalised as a
  // translation's (options' length_penalty, max_decoding_length; beam_size must be 1, the
  // default here is overridden). Targets are text in the target language, or ids without </s>.
  std::vector<Hypothesis> score(const std::vector<std::string>& sources, const std::vector<std::string>& targets,
                                const DecodeOptions& options, BatchStats* stats = nullptr,
                                const LanguagePair& languages = {});
  std::vector<Hypothesis> score_ids(const std::vector<std::vector<int>>& source_ids,
                                    const std::vector<std::vector<int>>& target_ids, const DecodeOptions& options,
                                    BatchStats* stats = nullptr);
  // Target text -> its target ids, without language code or </s> (Tokenizer::encode_target):
  // a target_prefix's or a Score target's.
  std::vector<int> encode_target(const std::string& text) const { return tokenizer_->encode_target(text); }
  // Throws nmt::Error(kInvalidArgument) naming `field` when ids hold </s> or an id outside
  // the target vocabulary.
  void check_target_ids(const std::vector<int>& ids, const std::string& field) const;

  // The source ids of `text` in the requested source language ("" = the model's default).
  // Throws nmt::Error(kInvalidArgument) naming the language and listing the model's.
  std::vector<int> encode_source(const std::string& text, const std::string& source = "") const;
  // The first target token a request's target language forces (DecodeOptions::forced_bos_id):
  // M2M-100 / NLLB / mBART-50's language token, the model's forced_bos_token_id for "", -1
  // for a Marian model. Throws nmt::Error(kInvalidArgument) for a language the model lacks,
  // and for "" on a multilingual model without a default (naming target_language).
  int target_token(const std::string& target) const;
  // return_alignments: sets the byte ranges of h's alignments (their token indices set, its
  // text made) in `source`, the text it translates (in the requested source language), and
  // in h->text. Throws nmt::Error(kInternal) when an index is outside the tokens.
  void set_alignment_spans(const std::string& source, const std::string& source_language, Hypothesis* h) const;
  // The model's code for a requested language of the given side ("" stays ""); throws as
  // above. For a bilingual model: its own language, checked where tokenizer_config.json names
  // the pair.
  std::string resolve_source(const std::string& source) const;
  std::string resolve_target(const std::string& target) const;

  // A decode loop over this translator's engine (the server's scheduler drives it). One
  // loop at a time per translator: the engine's decode state is the loop's. Its hypotheses
  // come back with ids only (the caller detokenizes: tokenizer().decode()).
  std::unique_ptr<DecodeLoop> make_loop(const EngineCapacity& capacity);
  size_t device_memory_used() const;
  // What this translator holds on its device, as a memory budget counts it: the CUDA
  // engine's device allocations (weights and decode state), or on the CPU the host weights
  // plus the engine's buffers. Measured, not estimated; not thread-safe with a running loop.
  size_t memory_held() const;

 private:
  Translator() = default;
  // The decode loop over sentences with options of their own (translations, scores).
  std::vector<Translation> run(const std::vector<std::vector<int>>& source_ids,
                               const std::vector<DecodeOptions>& options, BatchStats* stats);
  ModelConfig config_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Weights> weights_;  // kept while the engine computes from host memory
  std::unique_ptr<Engine> engine_;
  Device device_ = Device::kCpu;
  Precision precision_ = Precision::kFloat32;
  int follow_rows_ = -1;
};

}  // namespace nmt
