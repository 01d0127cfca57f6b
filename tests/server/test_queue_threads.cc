// QueueThreads (server/queue_threads.h): one thread takes a completion queue's events while
// they are few; helpers join while they come fast and leave once they slow down. Events are
// grpc::Alarms set to fire at once, on the queue of a server with no service.
#include "server/queue_threads.h"

#include <grpcpp/alarm.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "server/queue_event.h"

namespace nmt::server {
namespace {

using namespace std::chrono_literals;

TEST(HelperDemand, JoinsAtTheOnRateAndLeavesBelowTheOffRate) {
  HelperDemand demand(1000, 500);
  EXPECT_FALSE(demand.update(99, 0.1));   // 990 a second
  EXPECT_TRUE(demand.update(100, 0.1));   // 1000
  EXPECT_TRUE(demand.update(60, 0.1));    // 600: between the two, still wanted
  EXPECT_TRUE(demand.update(50, 0.1));    // 500
  EXPECT_FALSE(demand.update(49, 0.1));   // 490: no longer
  EXPECT_FALSE(demand.update(60, 0.1));   // 600: between the two, still not
  EXPECT_FALSE(demand.wanted());
}

class QueueThreadsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    queue_ = builder.AddCompletionQueue();
    server_ = builder.BuildAndStart();
    ASSERT_TRUE(server_);
  }
  void TearDown() override {
    server_->Shutdown();
    threads_.reset();  // stops: drains the queue
    EXPECT_EQ(fired_.load(), posted_) << "every event is taken once";
  }

  // An alarm that fires at once: one event on the queue.
  void post() {
    alarms_.push_back(std::make_unique<grpc::Alarm>());
    alarms_.back()->Set(queue_.get(), gpr_now(GPR_CLOCK_MONOTONIC), &event_);
    ++posted_;
  }
  // Events at about `per_second` for `seconds`, or until `until` holds.
  template <class Until>
  void post_for(double per_second, double seconds, Until until) {
    const auto start = std::chrono::steady_clock::now();
    const auto gap = std::chrono::duration<double>(1.0 / per_second);
    int64_t n = 0;
    while (std::chrono::steady_clock::now() - start < std::chrono::duration<double>(seconds) &&
           !until()) {
      post();
      ++n;
      std::this_thread::sleep_until(start + std::chrono::duration_cast<std::chrono::nanoseconds>(gap * n));
    }
  }
  // Waits up to `seconds` for `taking` threads; true when it came.
  bool await_taking(int taking, double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      if (threads_->taking() == taking) return true;
      std::this_thread::sleep_for(1ms);
    }
    return threads_->taking() == taking;
  }

  void on_event(bool) { fired_.fetch_add(1); }

  std::unique_ptr<grpc::ServerCompletionQueue> queue_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<QueueThreads> threads_;
  std::vector<std::unique_ptr<grpc::Alarm>> alarms_;
  QueueEvent event_ = queue_event<QueueThreadsTest, &QueueThreadsTest::on_event>(this);
  std::atomic<int64_t> fired_{0};
  int64_t posted_ = 0;
};

TEST_F(QueueThreadsTest, OneThreadTakesFewEventsAlone) {
  threads_ = std::make_unique<QueueThreads>(*queue_, 4, 2000, 1000);
  threads_->start();
  post_for(200, 0.5, [] { return false; });  // a tenth of the on rate
  EXPECT_EQ(threads_->taking(), 1);
}

TEST_F(QueueThreadsTest, HelpersJoinWhileEventsComeFastAndLeaveWhenTheyStop) {
  threads_ = std::make_unique<QueueThreads>(*queue_, 4, 2000, 1000);
  threads_->start();
  EXPECT_EQ(threads_->taking(), 1);
  // Ten times the on rate, until the three helpers have joined (a few windows).
  post_for(20000, 5, [this] { return threads_->taking() == 4; });
  EXPECT_EQ(threads_->taking(), 4) << "the helpers joined";
  EXPECT_TRUE(await_taking(1, 5)) << "the helpers left once the events stopped; taking "
                                  << threads_->taking();
}

TEST_F(QueueThreadsTest, OneThreadInAllHasNoHelpers) {
  threads_ = std::make_unique<QueueThreads>(*queue_, 1, 2000, 1000);
  threads_->start();
  post_for(20000, 0.3, [] { return false; });
  EXPECT_EQ(threads_->taking(), 1);
}

}  // namespace
}  // namespace nmt::server
