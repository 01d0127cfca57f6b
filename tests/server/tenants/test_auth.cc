// Bearer-token checks of BearerAuth (server.auth_token_file): the header forms that pass and
// those that do not, the token file's format, and reloading it.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "server/tenants/auth.h"

using nmt::server::BearerAuth;

TEST(Auth, DisabledAllowsEverything) {
  const BearerAuth auth;
  EXPECT_FALSE(auth.enabled());
  EXPECT_TRUE(auth.allows_header(""));
  EXPECT_TRUE(auth.allows({}));
}

TEST(Auth, OnlyAcceptedBearerTokensPass) {
  const BearerAuth auth({"s3cret-token", "next-token"});
  EXPECT_TRUE(auth.allows_header("Bearer s3cret-token"));
  EXPECT_TRUE(auth.allows_header("Bearer next-token"));
  EXPECT_FALSE(auth.allows_header(""));
  EXPECT_FALSE(auth.allows_header("Bearer "));
  EXPECT_FALSE(auth.allows_header("Bearer s3cret"));          // a prefix
  EXPECT_FALSE(auth.allows_header("Bearer s3cret-token-x"));  // longer
  EXPECT_FALSE(auth.allows_header("Bearer s3cret-tokem"));
  EXPECT_FALSE(auth.allows_header("Basic s3cret-token"));
  EXPECT_FALSE(auth.allows_header("s3cret-token"));
  EXPECT_FALSE(auth.allows({}));
}

TEST(Auth, TokenFileOneTokenPerLine) {
  const std::string path = testing::TempDir() + "/tokens.txt";
  {
    std::ofstream f(path);
    f << "  first \n\n\tsecond\r\n";
  }
  const BearerAuth auth = BearerAuth::from_file(path);
  EXPECT_TRUE(auth.allows_header("Bearer first"));
  EXPECT_TRUE(auth.allows_header("Bearer second"));
  EXPECT_TRUE(auth.allows_header("Bearer  first "));  // whitespace around the token is not part of it
  {
    std::ofstream f(path);
    f << "\n \n";
  }
  EXPECT_THROW(BearerAuth::from_file(path), std::runtime_error);
  std::remove(path.c_str());
  EXPECT_THROW(BearerAuth::from_file(path), std::runtime_error);
}

TEST(Auth, ReloadReadsTheFileAgainAndKeepsTheTokensWhenItCannot) {
  const std::string path = testing::TempDir() + "/tokens-reload.txt";
  std::ofstream(path) << "old-token\n";
  BearerAuth auth = BearerAuth::from_file(path);
  EXPECT_TRUE(auth.allows_header("Bearer old-token"));
  std::ofstream(path) << "old-token\nnew-token\n";  // rotation: both for a while
  EXPECT_EQ(auth.reload(), 2u);
  EXPECT_TRUE(auth.allows_header("Bearer old-token"));
  EXPECT_TRUE(auth.allows_header("Bearer new-token"));
  std::ofstream(path) << "new-token\n";
  EXPECT_EQ(auth.reload(), 1u);
  EXPECT_FALSE(auth.allows_header("Bearer old-token"));
  EXPECT_TRUE(auth.allows_header("Bearer new-token"));
  // A file emptied or removed by mistake leaves the tokens as they were: it neither opens
  // the service to everyone nor locks everyone out.
  std::ofstream(path) << "\n";
  EXPECT_THROW(auth.reload(), std::runtime_error);
  std::remove(path.c_str());
  EXPECT_THROW(auth.reload(), std::runtime_error);
  EXPECT_TRUE(auth.enabled());
  EXPECT_TRUE(auth.allows_header("Bearer new-token"));
  EXPECT_FALSE(auth.allows_header("Bearer old-token"));
  EXPECT_FALSE(auth.allows_header(""));
}

TEST(Auth, NothingToReloadWithoutAFile) {
  BearerAuth auth({"t"});
  EXPECT_EQ(auth.reload(), 0u);
  EXPECT_TRUE(auth.allows_header("Bearer t"));
}

// Which key a call carries (server/tenants/api_keys.h): its fields, held across a reload.
TEST(Auth, IdentifiesTheKeyAndKeepsItAcrossAReload) {
  const std::string path = testing::TempDir() + "/tokens-identify.txt";
  std::ofstream(path) << "alpha name=team-a weight=2 requests_per_minute=10\nbeta\n";
  BearerAuth auth = BearerAuth::from_file(path);
  std::shared_ptr<const nmt::server::ApiKey> a = auth.identify_header("Bearer alpha");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->name, "team-a");
  EXPECT_EQ(a->weight, 2);
  EXPECT_EQ(a->requests_per_minute, 10);
  ASSERT_TRUE(auth.identify_header("Bearer beta"));
  EXPECT_EQ(auth.identify_header("Bearer beta")->label(), "other");
  EXPECT_FALSE(auth.identify_header("Bearer gamma"));
  EXPECT_FALSE(auth.identify_header("Bearer alpha name=team-a")) << "the fields are not part of the token";
  std::ofstream(path) << "gamma name=team-c\n";
  EXPECT_EQ(auth.reload(), 1u);
  EXPECT_EQ(a->name, "team-a") << "a key held by a call in flight outlives the reload";
  EXPECT_FALSE(auth.identify_header("Bearer alpha"));
  EXPECT_EQ(auth.identify_header("Bearer gamma")->name, "team-c");
  std::ofstream(path) << "delta weight=0\n";
  EXPECT_THROW(auth.reload(), std::runtime_error) << "a malformed line changes nothing";
  EXPECT_TRUE(auth.identify_header("Bearer gamma"));
  std::remove(path.c_str());
  EXPECT_FALSE(BearerAuth().identify_header("Bearer x")) << "authentication off: no key";
}
