#pragma once
// Makes the texts of finished translations on a thread of its own, so that the thread driving
// a decode loop goes back to the device at once. Detokenizing a step's finished sentences
// (SentencePiece, ~10 us a sentence on the GPU machines' hosts) took longer than a demo-model
// step on an H100 at 512 sentences, and the device waited for it (bench/history/engine-cuda.md, end-to-end
// run 33). The server's scheduler does the same on its responder thread.
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "model/tokenizer/tokenizer.h"
#include "model/translator.h"

namespace nmt {

class TextWorker {
 public:
  explicit TextWorker(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  ~TextWorker();  // finishes the queue (errors dropped: call wait() to see them)
  TextWorker(const TextWorker&) = delete;
  TextWorker& operator=(const TextWorker&) = delete;

  // Queues `t`'s texts; `t` stays where it is, untouched by the caller, until wait().
  // The thread starts with the first one.
  void add(Translation* t);
  // Until every queued translation has its texts; rethrows the first decode error.
  void wait();
  bool started() const { return thread_.joinable(); }

 private:
  void run();

  const Tokenizer& tokenizer_;
  std::mutex mutex_;
  std::condition_variable wake_, drained_;
  std::deque<Translation*> queue_;
  bool busy_ = false, stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace nmt
