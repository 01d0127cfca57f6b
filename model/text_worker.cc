#include "model/text_worker.h"

#include <utility>

namespace nmt {

TextWorker::~TextWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void TextWorker::add(Translation* t) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(t);
  }
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  wake_.notify_one();
}

void TextWorker::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  drained_.wait(lock, [this] { return queue_.empty() && !busy_; });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

// Takes what is queued in one go, so that the lock is held once per batch of sentences.
void TextWorker::run() {
  std::deque<Translation*> batch;
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and nothing left
    batch.swap(queue_);
    busy_ = true;
    lock.unlock();
    std::exception_ptr error;
    for (Translation* t : batch) {
      try {
        for (Hypothesis& h : t->hypotheses) h.text = tokenizer_.decode(h.ids);
      } catch (...) {
        if (!error) error = std::current_exception();
      }
    }
    batch.clear();
    lock.lock();
    busy_ = false;
    if (error && !error_) error_ = error;
    if (queue_.empty()) drained_.notify_all();
  }
}

}  // namespace nmt
