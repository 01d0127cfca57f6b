// Bearer-token checks of BearerAuth (server.auth_token_file): the header forms that pass and
// those that do not, and the token file's format.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "server/auth.h"

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
