// QueueThreads (server/grpc/queue_threads.h): one thread takes a completion queue's events while
// they keep it little busy; helpers join while they keep the threads busy and leave once
// they stop. Events are grpc::Alarms set to fire at once, on the queue of a server with no
// service, each taking `work_us_` of CPU time when it is taken.
#include "server/grpc/queue_threads.h"

#include <grpcpp/alarm.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "server/grpc/queue_event.h"

namespace nmt::server {
namespace {

using namespace std::chrono_literals;

TEST(HelperDemand, JoinsAtTheOnLoadAndLeavesBelowTheOffLoad) {
  HelperDemand demand(0.5, 0.25);
  EXPECT_FALSE(demand.update(0.049, 0.1));  // 0.49 cores
  EXPECT_TRUE(demand.update(0.05, 0.1));    // 0.5
  EXPECT_TRUE(demand.update(0.03, 0.1));    // 0.3: between the two, still wanted
  EXPECT_TRUE(demand.update(0.025, 0.1));   // 0.25
  EXPECT_FALSE(demand.update(0.024, 0.1));  // 0.24: no longer
  EXPECT_FALSE(demand.update(0.03, 0.1));   // 0.3: between the two, still not
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

  void on_event(bool) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(work_us_.load());
    while (std::chrono::steady_clock::now() < end) {
    }
    fired_.fetch_add(1);
  }

  std::unique_ptr<grpc::ServerCompletionQueue> queue_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<QueueThreads> threads_;
  std::vector<std::unique_ptr<grpc::Alarm>> alarms_;
  QueueEvent event_ = queue_event<QueueThreadsTest, &QueueThreadsTest::on_event>(this);
  std::atomic<int64_t> fired_{0};
  std::atomic<int> work_us_{0};  // set by the test while the threads run
  int64_t posted_ = 0;
};

// Low thresholds (0.2 and 0.1 cores), so that a loaded test machine cannot starve the
// threads below them: the busy load asks for half a core.
TEST_F(QueueThreadsTest, OneThreadTakesALightLoadAlone) {
  threads_ = std::make_unique<QueueThreads>(*queue_, 4, 0.2, 0.1);
  threads_->start();
  work_us_ = 100;
  post_for(100, 0.5, [] { return false; });  // 0.01 cores
  EXPECT_EQ(threads_->taking(), 1);
}

TEST_F(QueueThreadsTest, HelpersJoinWhileTheThreadsAreBusyAndLeaveWhenTheLoadStops) {
  threads_ = std::make_unique<QueueThreads>(*queue_, 4, 0.2, 0.1);
  threads_->start();
  EXPECT_EQ(threads_->taking(), 1);
  work_us_ = 250;
  post_for(2000, 5, [this] { return threads_->taking() == 4; });  // 0.5 cores
  EXPECT_EQ(threads_->taking(), 4) << "the helpers joined";
  EXPECT_TRUE(await_taking(1, 5)) << "the helpers left once the load stopped; taking "
                                  << threads_->taking();
}

TEST_F(QueueThreadsTest, OneThreadInAllHasNoHelpers) {
  threads_ = std::make_unique<QueueThreads>(*queue_, 1, 0.2, 0.1);
  threads_->start();
  work_us_ = 250;
  post_for(2000, 0.3, [] { return false; });
  EXPECT_EQ(threads_->taking(), 1);
}

}  // namespace
}  // namespace nmt::server
