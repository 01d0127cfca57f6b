// W3C traceparent validation (server/observability/trace_context.h): the examples of the
// specification, each malformed shape it names, and fresh ones for the rest.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "server/observability/trace_context.h"

using namespace nmt::server;

namespace {
const std::string kValid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
}

TEST(TraceContext, AcceptsTheSpecificationsShapes) {
  EXPECT_TRUE(valid_traceparent(kValid));
  EXPECT_TRUE(valid_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"));
  // A later version may append fields after the flags, '-' first.
  EXPECT_TRUE(valid_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
  EXPECT_TRUE(valid_traceparent("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what"));
  EXPECT_EQ(accept_traceparent(kValid), kValid);
}

TEST(TraceContext, RefusesEachMalformedShape) {
  EXPECT_FALSE(valid_traceparent(""));
  EXPECT_FALSE(valid_traceparent("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));  // version ff
  EXPECT_FALSE(valid_traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01"));  // zero trace
  EXPECT_FALSE(valid_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"));  // zero parent
  EXPECT_FALSE(valid_traceparent("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"));  // uppercase
  EXPECT_FALSE(valid_traceparent("00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01"));   // short trace
  EXPECT_FALSE(valid_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g"));  // flags not hex
  EXPECT_FALSE(valid_traceparent("00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));  // separator
  EXPECT_FALSE(valid_traceparent(kValid + "-extra"));  // version 00 has nothing after the flags
  EXPECT_FALSE(valid_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x"));
}

TEST(TraceContext, AnInvalidOneIsReplacedByAFreshValidOne) {
  std::set<std::string> fresh;
  for (const std::string& bad : {std::string(), std::string("garbage"), kValid + "-extra"}) {
    const std::string made = accept_traceparent(bad);
    EXPECT_TRUE(valid_traceparent(made)) << made;
    EXPECT_EQ(made.size(), 55u);
    EXPECT_EQ(made.substr(0, 3), "00-");
    EXPECT_EQ(made.substr(53), "00");  // not sampled: the server samples nothing itself
    fresh.insert(made);
  }
  EXPECT_EQ(fresh.size(), 3u) << "each fresh one is its own trace";
}
