#pragma once
// The beam-search step after the output projection, in one call:
//   logp[row, t]  = log_softmax(logits[row, :] + bias)[t]        (float32 math)
//   masks on logp: pad -> -inf always; mask_eos -> eos -inf;
//                  force_eos -> every token but eos -inf, eos = 0 (transformers'
//                  ForcedEOSTokenLogitsProcessor; the CPU engine does the same);
//                  mask_eos / force_eos per sentence when sentence_flags is set, and
//                  kTopkForceToken: the sentence's forced_tokens entry as force_eos does EOS
//                  (ForcedBOSTokenLogitsProcessor; force_eos wins)
//   cand[row, t]  = logp[row, t] + running_scores[row]
//   per sentence (beam consecutive rows), the k best of its beam x vocab candidates, sorted
//   descending, ties broken by the lower index (as torch.topk on CPU);
//   index = beam_row_in_sentence * vocab + token.
#include <cstddef>
#include <cstdint>

#include "kernels/stream.h"

namespace nmt::kernels {

// Bits of TopkMasks::sentence_flags.
constexpr unsigned char kTopkMaskEos = 1;
constexpr unsigned char kTopkForceEos = 2;
constexpr unsigned char kTopkForceToken = 4;  // reads TopkMasks::forced_tokens
// Repetition controls (beam_token_edits_cuda): the sentence's rows hold their final, edited
// log-probs (the bias added, the log-sum-exp taken): the top-k adds no bias and takes their
// log-sum-exp as 0; its masks still apply.
constexpr unsigned char kTopkLogProbs = 8;
constexpr unsigned char kTopkEditLogits = 16;  // with kTopkLogProbs: the edits were on the logits (greedy)
// With kTopkForceToken: the forced token keeps its real log-prob instead of 0 (teacher
// forcing, StepGroup::teacher_forced); kTopkForceEos still wins with 0.
constexpr unsigned char kTopkTeacherForced = 32;
// With kTopkLogProbs: the sentence's rows have host edits in the TokenEditTable
// (beam_token_edits_cuda reads the pinned table only for these).
constexpr unsigned char kTopkHostEdits = 64;
// Each flag its own bit (two changes once gave two flags the same one).
static_assert(kTopkMaskEos + kTopkForceEos + kTopkForceToken + kTopkLogProbs + kTopkEditLogits + kTopkTeacherForced +
                      kTopkHostEdits ==
                  (kTopkMaskEos | kTopkForceEos | kTopkForceToken | kTopkLogProbs | kTopkEditLogits |
                   kTopkTeacherForced | kTopkHostEdits),
              "the top-k's sentence flags share a bit");

struct TopkMasks {
  int pad_id = -1;  // < 0: no pad masking
  int eos_id = -1;
  bool mask_eos = false;   // e.g. before min_length
  bool force_eos = false;  // at max_length
  // One byte per sentence (kTopkMaskEos | kTopkForceEos), replacing mask_eos / force_eos
  // when set: sentences of one call at different lengths (step-level batching). A device
  // pointer for beam_topk_cuda (one captured CUDA graph serves every step), host for the CPU.
  const unsigned char* sentence_flags = nullptr;
  // One token id per sentence, read where its flags have kTopkForceToken (device or host
  // memory as sentence_flags): that token gets log-prob 0, every other -inf. A forced token
  // other than EOS ends no hypothesis (NextRows).
  const int* forced_tokens = nullptr;
};

constexpr int kMaxBeamTopk = 32;  // largest k beam_topk supports

// The beams each sentence goes on with after the step, for the next step to read on the device
// before the host has seen this one's candidates (StepGroup::follows in model/decoding/engine.h). It is
// the host search's choice, continuing_beams() in model/decoding/beam_search.cc, and must stay so to the
// bit: each of the sentence's k best gets running = score + (-1e9 if it ends a hypothesis: EOS,
// or any token under force EOS); the beam best of those (ties to the better-ranked candidate)
// continue, best first, beam b of sentence s as row s * beam + b: its token, the cache row of
// the row it extends, and its running score. Rows of the step's own layout; all device pointers.
struct NextRows {
  const int* cache_rows = nullptr;  // [rows]: the step's rows' cache rows
  int* tokens = nullptr;            // [rows]
  int* parents = nullptr;           // [rows]: cache rows
  float* running = nullptr;         // [rows]
};

// float32 reference (same semantics; logits given as float).
void beam_topk_cpu(const float* logits, const float* bias, const float* running_scores,
                   int64_t sentences, int beam, int vocab, int k, const TopkMasks& masks,
                   float* out_scores, int* out_index);

// How beam_topk_cuda splits each row's vocabulary over blocks, and k rounded up to the
// power of two its kernels are compiled for (the workspace size depends on both).
int beam_topk_splits(int64_t rows, int vocab);
int beam_topk_padded_k(int k);

// The kernel sequence beam_topk_cuda runs for `rows` rows of `vocab` tokens (kernels/cuda/topk.cu
// describes them; every one is exact). The workspace layout depends on it too.
enum class BeamTopkPath {
  kRow,      // a row per block in registers + a merge per sentence (2 launches)
  kTwoPass,  // chunks: log-sum-exp, then final scores re-reading the logits + merge (3 launches)
  kOnePass,  // chunks: log-sum-exp and best logits in one read + merge with a tie rescan (2)
};
BeamTopkPath beam_topk_path(int64_t rows, int vocab, int k);
constexpr int kBeamTopkRowTokens = 16384;  // kRow: the widest row a block holds in registers
constexpr int kBeamTopkRowMaxK = 8;        // kRow: the largest padded k
constexpr int kBeamTopkChunkTokens = 8192;  // kOnePass: the widest chunk a block holds in registers
constexpr int kBeamTopkHeldChunkTokens = 4096;  // kTwoPass: the widest chunk a block holds in registers
// Candidates each chunk of the kOnePass path keeps: twice the padded k (at most 32). The margin
// over k makes it rare that float rounding ties between a chunk's dropped and kept tokens force
// a rescan.
int beam_topk_chunk_candidates(int k);

// Repetition controls: each row's token edits (model/decoding/engine.h, StepInput::edit_begin),
// where the kernel reads them at run time (pinned host memory: one captured graph serves
// every step): row r's are [begin[r], begin[r + 1]) of tokens / factors (factor 0: -inf;
// else s < 0 ? s * f : s / f). Read only for sentences flagged kTopkHostEdits: each read
// crosses PCIe.
struct TokenEditTable {
  const int* begin = nullptr;
  const int* tokens = nullptr;
  const float* factors = nullptr;
};

// Repetition controls on the device (model/decoding/engine.h, StepGroup::
// no_repeat_ngram_size): per sentence of the call, its n-gram size (0: none) and penalty (1:
// none); a row of a sentence with either records its token into the history and takes the
// edits computed from it. The rows' target histories: tokens[c] is the token fed where the
// step wrote cache token c (each cache position is written once: its token is the history of
// every beam that continues it), so row r's history is tokens[key_rows[cache_rows[r] *
// capacity + q]] for q < positions[r], then its own token: follow[r] >= 0 ?
// follow_tokens[follow[r]] : step_tokens[r] (the step's token, as the reorder takes it).
// All device pointers; the rows in the step's layout (the table's rows).
struct DeviceHistory {
  const int* ngram = nullptr;      // [sentences of the call]
  const float* penalty = nullptr;  // [sentences of the call]
  int* tokens = nullptr;
  const int* key_rows = nullptr;  // the step's key-row table, after the reorder
  int capacity = 0;
  const int* cache_rows = nullptr;
  const int* positions = nullptr;
  const int* step_tokens = nullptr;
  const int* follow = nullptr;
  const int* follow_tokens = nullptr;
};

// Scratch bytes beam_topk_cuda needs for this shape.
size_t beam_topk_workspace_bytes(int64_t sentences, int beam, int vocab, int k);

#if NMT_WITH_CUDA
// T = float, __half or __nv_bfloat16. All pointers are device pointers; bias may be null.
// workspace must hold beam_topk_workspace_bytes(...) bytes. Row r of the logits starts at
// logits + r * logits_row_stride (0 = vocab; a padded stride keeps the output projection's
// rows 16-byte aligned, which cuBLAS needs for its fast kernels). With `next`, also the rows
// each sentence goes on with (NextRows; masks.eos_id must be set, beam at most 32).
template <typename T>
void beam_topk_cuda(const T* logits, const float* bias, const float* running_scores,
                    int64_t sentences, int beam, int vocab, int k, const TopkMasks& masks,
                    float* out_scores, int* out_index, void* workspace, size_t workspace_bytes,
                    cudaStream_t stream, int64_t logits_row_stride = 0, const NextRows* next = nullptr);

// Repetition controls, before beam_topk_cuda on the same rows: each row of a sentence whose
// flag has kTopkLogProbs becomes its final log-probs in place: z = logits + bias; with
// kTopkEditLogits the edits on z (greedy search), then z - log_sum_exp(z); else
// z - log_sum_exp(z), then the edits (beam search, on the log-probs). Rows table_first_row + r
// of the table's (read for sentences flagged kTopkHostEdits); other sentences are not
// touched. With `history`, a row with device controls first records its token into the
// history (at every step, flagged or not) and, when flagged, takes its no_repeat_ngram bans
// and penalties from its history besides the table's edits (each token once; a ban wins), as
// model/decoding/controls/token_edits.cc computes them on the host. max_positions bounds
// the rows' positions (shared memory for a history).
void beam_token_edits_cuda(float* logits, int64_t logits_row_stride, const float* bias, int64_t sentences, int beam,
                           int vocab, const unsigned char* sentence_flags, const TokenEditTable* table,
                           int table_first_row, cudaStream_t stream, const DeviceHistory* history = nullptr,
                           int max_positions = 0);
#endif

}  // namespace nmt::kernels
