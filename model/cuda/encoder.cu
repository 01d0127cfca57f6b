// The CUDA engine's encode: the packed upload, the encoder stack over the persistent encoder
// buffers (one graph per (sentences, padded length)), and each sentence's cross-attention K/V
// of every decoder layer written straight into its slot.
#include <cublas_v2.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "model/cuda/cuda_engine_class.h"
#include "model/error.h"

namespace nmt::cuda {
// kInvalidArgument for bad sources (as the CPU engine), kInternal for bad slots.
template <typename T>
void CudaEngine<T>::check_sources(const std::vector<EncodeItem>& items) const {
  std::vector<char> taken(size_t(cap_.sentences), 0);
  for (const EncodeItem& item : items) {
    if (!item.ids || item.ids->empty()) throw Error(ErrorCode::kInvalidArgument, "empty source sentence");
    const std::vector<int>& s = *item.ids;
    if (int64_t(s.size()) > c_.max_positions)
      throw Error(ErrorCode::kInvalidArgument, "source sentence has " + std::to_string(s.size()) +
                                                   " tokens, more than the model's " +
                                                   std::to_string(c_.max_positions) + " positions");
    if (int64_t(s.size()) > cap_.source_tokens)
      throw Error(ErrorCode::kInvalidArgument, "source sentence has " + std::to_string(s.size()) +
                                                   " tokens, more than the " + std::to_string(cap_.source_tokens) +
                                                   " the CUDA engine reserved");
    for (int id : s)
      if (id < 0 || id >= c_.vocab_size)
        throw Error(ErrorCode::kInvalidArgument, "token id " + std::to_string(id) + " is outside the vocabulary");
    if (item.slot < 0 || item.slot >= cap_.sentences || taken[size_t(item.slot)]++)
      throw Error(ErrorCode::kInternal,
                  "CUDA engine encode: slot " + std::to_string(item.slot) + " is out of range or given twice");
  }
}

template <typename T>
void CudaEngine<T>::join_encode() {
  if (!encode_pending_) return;
  check_cuda(cudaStreamWaitEvent(q_.stream, encoded_, 0), "encode join");
  encode_pending_ = false;
}

template <typename T>
void CudaEngine<T>::enqueue_encode(const std::vector<EncodeItem>& items) {
  check_sources(items);
  enc_lengths_.clear();
  const int n = int(items.size());
  if (n == 0) return;
  int S = 0;
  for (const EncodeItem& item : items) {
    enc_lengths_.push_back(int(item.ids->size()));
    S = std::max(S, enc_lengths_.back());
  }
  // check_sources keeps S within both limits, and so does the padding
  S = std::min((S + kEncodeLengthStep - 1) / kEncodeLengthStep * kEncodeLengthStep,
               std::min(cap_.source_tokens, c_.max_positions));
  const int rows = n * S;
  reserve_encode(n, rows);

  // The pinned buffer may still feed the previous encode's upload (an encode inside a step
  // must not wait for the step itself: an event, not a stream synchronize).
  check_cuda(cudaEventSynchronize(enc_uploaded_), "encode upload");
  const EncodeUpload host(enc_in_.get(), n, rows), dev(enc_.in.get(), n, rows);
  // M2M-100's <pad> rule: a <pad> token (and the padding) takes the zero row of the position
  // table and no position of its own, as fairseq counts positions over the other tokens.
  const int zero_row = w_.zero_position_row;
  for (int b = 0; b < n; ++b) {
    const std::vector<int>& src = *items[size_t(b)].ids;
    const int length = enc_lengths_[size_t(b)];
    int position = 0;
    for (int t = 0; t < S; ++t) {
      const int id = t < length ? src[size_t(t)] : c_.pad_id;
      host.ids[b * S + t] = id;
      if (zero_row < 0) host.positions[b * S + t] = t;
      else host.positions[b * S + t] = t < length && id != c_.pad_id ? position++ : zero_row;
    }
    host.lengths[b] = length;
    host.weights[b] = w_.cross_kv;
    host.inputs[b] = enc_.x[0].get() + int64_t(b) * S * d_;
    // the cross K/V GEMM writes all S rows of each sentence
    host.outputs[b] = take_source_tokens(items[size_t(b)].slot, S);
    slot_table_[size_t(items[size_t(b)].slot)] = length;
  }
  // The whole table goes up, beside the step in flight: it changes only the newcomers'
  // entries, which that step reads for no row it keeps.
  std::copy(slot_table_.begin(), slot_table_.end(), host.slot_table);
  check_cuda(cudaStreamWaitEvent(encode_q_.stream, before_encode_, 0), "encode");
  // The encoder's code enqueues on q_: it points at the encode's own stream and cuBLAS handle
  // while the encode is enqueued (and captured: the graph then holds the encode handle's
  // workspace).
  struct EncodeSide {
    DeviceQueue& q;
    const DeviceQueue shared;
    EncodeSide(DeviceQueue& queue, const DeviceQueue& encode) : q(queue), shared(queue) { q = encode; }
    ~EncodeSide() { q = shared; }
  };
  {
    EncodeSide side(q_, encode_q_);
    launch(encode_graphs_, {n, S}, use_graphs_, q_, capture_stream_, [&] { enqueue_encoder(host, dev, n, S); });
  }
  check_cuda(cudaEventRecord(enc_uploaded_, encode_q_.stream), "encode upload");
  check_cuda(cudaEventRecord(encoded_, encode_q_.stream), "encode");
  encode_pending_ = true;
  enc_len_ = S;
}

// The encode of n sentences padded to S tokens whose upload `host` holds: the upload, the
// encoder, and each sentence's cross-attention K/V of every decoder layer straight into its
// slot (one batched GEMM through the uploaded pointer arrays).
template <typename T>
void CudaEngine<T>::enqueue_encoder(const EncodeUpload& host, const EncodeUpload& dev, int n, int S) {
  const int d = d_, rows = n * S;
  const Architecture& arch = c_.arch;
  cudaStream_t stream = q_.stream;
  check_cuda(cudaMemcpyAsync(dev.ids, host.ids, EncodeUpload::device_bytes(n, rows), cudaMemcpyHostToDevice, stream),
             "encode upload");
  check_cuda(cudaMemcpyAsync(state_.slot_table.get(), host.slot_table, slot_table_.size() * sizeof(int),
                             cudaMemcpyHostToDevice, stream),
             "encode upload");
  Residual<T> x{{enc_.x[0].get(), enc_.x[1].get()}};
  // host.inputs and encoder_output() read x[0]: every LayerNorm moves the stream to the other
  // buffer of the pair, two a layer, so the output lands there; mBART's embedding LayerNorm
  // is one more, so its embeddings start in x[1].
  if (arch.embedding_norm) x.current = x.buffers[1];
  kernels::embed_positions_cuda<T>(dev.ids, w_.encoder_embeddings, w_.encoder_positions, dev.positions, x.current,
                                   rows, d, embed_scale_, stream, nullptr, w_.encoder_embeddings_q,
                                   w_.encoder_embeddings_scale);
  if (arch.embedding_norm) layers_.normalize(x, w_.encoder_embedding_norm, rows);
  const int hd = d / c_.encoder_heads;
  for (const EncoderLayer<T>& L : w_.encoder) {
    layers_.sublayer_input(x, L.qkv, enc_.qkv.get(), rows, L.attn_norm, enc_.ctx.get());
    kernels::AttentionArgs<T> a;
    a.q = enc_.qkv.get(); a.q_bias = L.qkv.b;
    a.k = enc_.qkv.get() + d; a.v = enc_.qkv.get() + 2 * d; a.v_bias = L.qkv.b + 2 * d;
    a.q_batch_stride = a.kv_batch_stride = int64_t(S) * 3 * d;
    a.q_row_stride = a.kv_row_stride = 3 * d;
    a.key_lengths = dev.lengths;
    a.out = enc_.ctx.get(); a.out_batch_stride = int64_t(S) * d; a.out_row_stride = d;
    a.batch = n; a.q_len = a.kv_len = S; a.heads = c_.encoder_heads; a.head_dim = hd;
    a.scale = 1.f / std::sqrt(float(hd));
    kernels::attention_cuda(a, stream);
    layers_.linear(enc_.ctx.get(), L.out, enc_.tmp.get(), rows);
    layers_.sublayer_output(x, enc_.tmp.get(), L.out.b, L.attn_norm);
    layers_.feed_forward(x, L.fc1, L.fc2, L.ffn_norm, enc_.hidden.get(), enc_.tmp.get(), enc_.ctx.get(), rows);
  }
  if (arch.final_encoder_norm) layers_.final_norm(x, w_.encoder_final_norm, rows);
  layers_.settle(x, rows);
  if (x.current != enc_.x[0].get())
    throw Error(ErrorCode::kInternal, "CUDA engine encode: the encoder's output is not where its readers look");
  const float alpha = 1.f, beta = 0.f;
  const int cols = kv_cols();
  check_cublas(cublasGemmBatchedEx(q_.cublas, CUBLAS_OP_T, CUBLAS_OP_N, cols, S, d, &alpha, dev.weights,
                                   cuda_type<T>(), d, dev.inputs, cuda_type<T>(), d, &beta, dev.outputs,
                                   cuda_type<T>(), cols, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmBatchedEx");
}

#define NMT_ENCODER(T)                                                                              \
  template void CudaEngine<T>::check_sources(const std::vector<EncodeItem>&) const;                 \
  template void CudaEngine<T>::join_encode();                                                       \
  template void CudaEngine<T>::enqueue_encode(const std::vector<EncodeItem>&);                      \
  template void CudaEngine<T>::enqueue_encoder(const EncodeUpload&, const EncodeUpload&, int, int);
NMT_ENCODER(float)
NMT_ENCODER(__half)
#undef NMT_ENCODER

}  // namespace nmt::cuda
