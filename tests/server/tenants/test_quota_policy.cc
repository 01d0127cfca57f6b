// API keys' quotas (server/tenants/quota_policy.h) as tables of requests at given times, and
// the token file's fields (api_keys.h). Time is passed in: no sleeps.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "server/tenants/api_keys.h"
#include "server/tenants/quota_policy.h"
#include "server/tenants/quotas.h"

using namespace nmt::server;

namespace {

struct Call {
  double at;           // seconds
  int64_t characters;
  bool allowed;        // expected
  std::string quota;   // expected when refused
  double retry_after;  // expected when refused (inf: never)
};

struct Row {
  std::string name;
  QuotaLimits limits;
  std::vector<Call> calls;
};

TEST(QuotaPolicy, TokenBucketsPerMinute) {
  const double never = INFINITY;
  const std::vector<Row> rows = {
      {"no quota: everything passes", {0, 0}, {{0, 1000000, true, "", 0}, {0, 1000000, true, "", 0}}},
      {"2 requests a minute: a burst of 2, then one each 30 s",
       {2, 0},
       {{0, 5, true, "", 0},
        {0, 5, true, "", 0},
        {0, 5, false, "requests_per_minute", 30},
        {10, 5, false, "requests_per_minute", 20},
        {30, 5, true, "", 0},
        {30, 5, false, "requests_per_minute", 30}}},
      {"100 characters a minute",
       {0, 100},
       {{0, 60, true, "", 0},
        {0, 60, false, "characters_per_minute", 12},  // 40 left, 20 short at 100/60 a second
        {12, 60, true, "", 0},
        {12, 1, false, "characters_per_minute", 0.6}}},
      {"a request over the whole allowance can never pass", {0, 100}, {{0, 101, false, "characters_per_minute", never}}},
      {"the bucket holds at most a minute's worth", {0, 100}, {{0, 100, true, "", 0}, {600, 100, true, "", 0}, {600, 1, false, "characters_per_minute", 0.6}}},
      {"refused by characters: the request is not charged either",
       {2, 10},
       {{0, 20, false, "characters_per_minute", never}, {0, 5, true, "", 0}, {0, 5, true, "", 0}, {0, 1, false, "requests_per_minute", 30}}},
  };
  for (const Row& row : rows) {
    QuotaState state;
    for (size_t i = 0; i < row.calls.size(); ++i) {
      const Call& c = row.calls[i];
      const QuotaVerdict v = charge_quota(state, row.limits, c.characters, c.at);
      const std::string where = row.name + ", call " + std::to_string(i);
      EXPECT_EQ(v.allowed, c.allowed) << where;
      if (c.allowed) continue;
      EXPECT_EQ(v.quota, c.quota) << where;
      if (std::isinf(c.retry_after)) {
        EXPECT_TRUE(std::isinf(v.retry_after)) << where;
        EXPECT_NE(v.message.find("can never fit"), std::string::npos) << v.message;
      } else {
        EXPECT_NEAR(v.retry_after, c.retry_after, 1e-9) << where;
        EXPECT_NE(v.message.find("retry after " + std::to_string(int64_t(std::ceil(c.retry_after - 1e-6))) + " s"),
                  std::string::npos)
            << v.message;
      }
      EXPECT_NE(v.message.find(c.quota), std::string::npos) << "the message names the quota: " << v.message;
    }
  }
}

TEST(QuotaPolicy, ALoweredLimitTakesEffectAtOnce) {
  QuotaState state;
  EXPECT_TRUE(charge_quota(state, {100, 0}, 1, 0).allowed);  // 99 left
  EXPECT_TRUE(charge_quota(state, {1, 0}, 1, 0).allowed);    // clamped to 1, then used
  EXPECT_FALSE(charge_quota(state, {1, 0}, 1, 0).allowed);
}

TEST(ApiKeys, ParsesTheFieldsAfterEachToken) {
  const std::vector<ApiKey> keys = parse_api_keys(
      "plain-token\n\n  named  name=team-a weight=3 requests_per_minute=60 characters_per_minute=5000 \nb name=team-a\n",
      "keys.txt");
  ASSERT_EQ(keys.size(), 3u);
  EXPECT_EQ(keys[0].token, "plain-token");
  EXPECT_EQ(keys[0].label(), "other");
  EXPECT_EQ(keys[0].weight, 1);
  EXPECT_EQ(keys[0].tenant, "line:1");
  EXPECT_EQ(keys[1].token, "named");
  EXPECT_EQ(keys[1].label(), "team-a");
  EXPECT_EQ(keys[1].weight, 3);
  EXPECT_EQ(keys[1].requests_per_minute, 60);
  EXPECT_EQ(keys[1].characters_per_minute, 5000);
  EXPECT_EQ(keys[1].tenant, keys[2].tenant) << "keys of one name are one tenant";
}

TEST(ApiKeys, MalformedFieldsNameTheLineAndTheField) {
  struct Row {
    std::string text, expected;
  };
  const std::vector<Row> rows = {
      {"t weight=0", "keys.txt line 1 weight: expected an integer from 1 to 1000, got '0'"},
      {"ok\nt requests_per_minute=ten", "line 2 requests_per_minute: expected an integer"},
      {"t colour=red", "line 1: unknown field 'colour'"},
      {"t name=a/b", "line 1 name: 1-64 letters"},
      {"t extra", "line 1: expected NAME=VALUE after the token, got 'extra'"},
      {"\n  \n", "holds no token"},
  };
  for (const Row& r : rows) {
    try {
      parse_api_keys(r.text, "keys.txt");
      ADD_FAILURE() << "accepted: " << r.text;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(r.expected), std::string::npos) << e.what();
    }
  }
}

TEST(Quotas, KeysOfOneNameShareTheirBucketsAndLabelsNeverShowATokens) {
  prometheus::Registry registry;
  Quotas quotas(registry);
  const std::vector<ApiKey> keys =
      parse_api_keys("secret-1 name=team requests_per_minute=2\nsecret-2 name=team requests_per_minute=2\nsecret-3\n", "k");
  EXPECT_TRUE(quotas.charge(&keys[0], 10, 0).allowed);
  EXPECT_TRUE(quotas.charge(&keys[1], 10, 0).allowed);
  const QuotaVerdict third = quotas.charge(&keys[0], 10, 0);
  EXPECT_FALSE(third.allowed) << "the rotation's two tokens share one quota";
  EXPECT_TRUE(quotas.charge(&keys[2], 10, 0).allowed) << "no quota";
  EXPECT_TRUE(quotas.charge(nullptr, 10, 0).allowed) << "no authentication";
  bool refusal_seen = false;
  for (const auto& family : registry.Collect()) {
    for (const auto& m : family.metric) {
      for (const auto& label : m.label) {
        EXPECT_EQ(label.value.find("secret"), std::string::npos) << family.name;
        if (family.name == "nmt_quota_refusals_total" && label.value == "requests_per_minute") refusal_seen = true;
      }
    }
  }
  EXPECT_TRUE(refusal_seen);
}

}  // namespace
