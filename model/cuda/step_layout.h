#pragma once
// The layout of the CUDA engine's work on the device: how a decode step's sentences form
// top-k runs padded to graph buckets (StepShape), and the packed host-to-device uploads of a
// step and of an encode. Host code only: the shapes key the captured graphs.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/decoding/engine.h"

namespace nmt::cuda {

// Sentence-count buckets of the decode graphs: 1, 2, 3, 4, 6, 8, 12, 16, 24, ... (<= 33%
// padding rows, few distinct graphs).
int bucket(int n);

// The most rows a step over `rows` real rows has once every run is padded to bucket()
// sentences: bucket(n) - n < n / 2, so padding adds less than half of each run's rows.
inline int padded_rows_bound(int rows) { return rows + rows / 2; }

// One top-k launch of a step: consecutive sentences of equal (beam, k), padded to
// bucket(sentences). Offsets count padded rows, sentences and outputs of the whole step.
struct Run {
  int beam = 1, k = 1;
  int sentences = 0;  // real ones (StepInput groups)
  int padded = 0;     // bucket(sentences): the rest are padding
  int first_row = 0, first_sentence = 0, first_output = 0;
};

// What the device does in a step: fixes every launch and copy, so it keys the graphs.
struct StepShape {
  std::vector<Run> runs;
  int rows = 0, sentences = 0, outputs = 0;  // padded totals
  // return_alignments: a sentence asks (StepGroup::alignments); the step then also runs the
  // alignment layer's argmax kernel (a graph of its own: GraphKey).
  bool alignments = false;
  // Repetition controls: some row has token edits (StepInput::edit_begin) or some group
  // device controls (StepGroup::no_repeat_ngram_size), so the step runs
  // kernels::beam_token_edits_cuda before each top-k (a graph of its own).
  bool edits = false;
};

StepShape shape_of(const std::vector<StepGroup>& groups);
bool has_edits(const StepInput& in);  // StepShape::edits

// The packed per-step upload over `rows` padded rows and `sentences` padded sentences: eight
// [rows] arrays of 4-byte values (`writes`: the cache token each row's position goes to),
// one forced token per sentence (StepGroup::forced_token, read under
// kernels::kTopkForceToken), then one top-k flag byte per sentence
// (kernels::kTopkMaskEos | kTopkForceEos | kTopkForceToken); in a step with repetition
// controls (`controls`: StepShape::edits) then, 4-byte aligned, each sentence's
// no_repeat_ngram_size and repetition_penalty (StepGroup's; 0 and 1 where it has none), so
// that beam_token_edits_cuda reads them from the device copy: its blocks' reads of pinned
// host memory each crossed PCIe (docs/decoding.md, "Repetition controls").
struct StepUpload {
  int *tokens, *cache_rows, *parents, *positions, *slots, *follow, *writes;
  float* running;
  int* forced;
  unsigned char* flags;
  int* ngram = nullptr;      // [sentences] with `controls`
  float* penalty = nullptr;  // [sentences] with `controls`
  StepUpload(void* base, int rows, int sentences, bool controls = false) {
    tokens = static_cast<int*>(base);
    cache_rows = tokens + rows;
    parents = cache_rows + rows;
    positions = parents + rows;
    slots = positions + rows;
    follow = slots + rows;
    writes = follow + rows;
    running = reinterpret_cast<float*>(writes + rows);
    forced = reinterpret_cast<int*>(running + rows);
    flags = reinterpret_cast<unsigned char*>(forced + sentences);
    if (controls) {
      ngram = reinterpret_cast<int*>(static_cast<unsigned char*>(base) + controls_offset(rows, sentences));
      penalty = reinterpret_cast<float*>(ngram + sentences);
    }
  }
  static size_t controls_offset(int rows, int sentences) {
    return (8 * sizeof(int) * size_t(rows) + (sizeof(int) + 1) * size_t(sentences) + 3) / 4 * 4;
  }
  static size_t bytes(int rows, int sentences, bool controls = false) {
    return controls ? controls_offset(rows, sentences) + (sizeof(int) + sizeof(float)) * size_t(sentences)
                    : 8 * sizeof(int) * size_t(rows) + (sizeof(int) + 1) * size_t(sentences);
  }
};

// An encode's sources are padded to a multiple of this many tokens (within the engine's
// limits): fewer distinct encode graphs, padding masked by the lengths as before.
constexpr int kEncodeLengthStep = 8;

// The packed upload of an encode of n sentences of `rows` tokens in all (each padded to the
// same length), in the order of the device buffer: ids [rows], positions [rows], lengths [n],
// then (8-byte aligned) the cross K/V GEMM's pointer arrays weight [n], input [n], output [n]
// (each sentence's slot's K/V); then, copied to the slot table instead, the slot table [slots]
// (the CUDA engine's: every slot's source length, then its first source token).
struct EncodeUpload {
  int *ids, *positions, *lengths;
  const void **weights, **inputs;
  void** outputs;
  int* slot_table;
  EncodeUpload(void* base, int n, int rows) {
    ids = static_cast<int*>(base);
    positions = ids + rows;
    lengths = positions + rows;
    weights = reinterpret_cast<const void**>(static_cast<char*>(base) + ints_bytes(n, rows));
    inputs = weights + n;
    outputs = const_cast<void**>(inputs + n);  // the same pointer size: a layout, not a cast of data
    slot_table = reinterpret_cast<int*>(outputs + n);
  }
  static size_t ints_bytes(int n, int rows) { return (sizeof(int) * (2 * size_t(rows) + n) + 7) / 8 * 8; }
  static size_t device_bytes(int n, int rows) { return ints_bytes(n, rows) + 3 * sizeof(void*) * size_t(n); }
  static size_t bytes(int n, int rows, int slots) { return device_bytes(n, rows) + sizeof(int) * size_t(slots); }
};

}  // namespace nmt::cuda
