// The store of translated files as a policy of the time passed in: a file is there until
// documents.store_seconds after it was written, the bytes held never pass
// documents.store_bytes (a file that does not fit is refused with the seconds until room
// comes back, one larger than the store always), names are unguessable and checked.
#include <gtest/gtest.h>

#include "server/documents/file_store.h"

namespace nmt::server {
namespace {

using Clock = FileStore::Clock;
using std::chrono::seconds;

TEST(FileStore, KeptUntilExpiry) {
  FileStore store(60, 1000);
  const Clock::time_point t0{};
  const FileStore::Stored s = store.put("dir/report.docx", "bytes", t0);
  ASSERT_FALSE(s.name.empty());
  EXPECT_TRUE(FileStore::valid_name(s.name)) << s.name;
  EXPECT_EQ(s.name.substr(33), "report.docx");
  ASSERT_TRUE(store.get(s.name, t0 + seconds(59)).has_value());
  EXPECT_EQ(store.get(s.name, t0 + seconds(59))->bytes, "bytes");
  EXPECT_FALSE(store.get(s.name, t0 + seconds(60)).has_value());
  EXPECT_EQ(store.bytes_held(), 0u);
}

TEST(FileStore, BytesBoundedAndRetryAfter) {
  FileStore store(100, 10);
  const Clock::time_point t0{};
  ASSERT_FALSE(store.put("a.txt", "123456", t0).name.empty());
  const FileStore::Stored full = store.put("b.txt", "12345", t0 + seconds(30));
  EXPECT_TRUE(full.name.empty());
  EXPECT_FALSE(full.never_fits);
  EXPECT_DOUBLE_EQ(full.retry_after, 70);
  EXPECT_EQ(store.bytes_held(), 6u);
  // Once the first expires there is room.
  EXPECT_FALSE(store.put("b.txt", "12345", t0 + seconds(100)).name.empty());
  EXPECT_EQ(store.bytes_held(), 5u);
  const FileStore::Stored huge = store.put("c.txt", std::string(11, 'x'), t0 + seconds(100));
  EXPECT_TRUE(huge.name.empty());
  EXPECT_TRUE(huge.never_fits);
}

TEST(FileStore, NamesAreUnguessableAndChecked) {
  FileStore store(100, 1000);
  const std::string a = store.put("x y/../é.txt", "1", Clock::time_point{}).name;
  const std::string b = store.put("x y/../é.txt", "1", Clock::time_point{}).name;
  EXPECT_NE(a, b);
  EXPECT_EQ(a.substr(32), ".__.txt") << a;  // the last component, only URL-safe characters
  EXPECT_FALSE(FileStore::valid_name(".."));
  EXPECT_FALSE(FileStore::valid_name("0123456789abcdef0123456789abcdef./etc/passwd"));
  EXPECT_FALSE(FileStore::valid_name("0123456789abcdef0123456789abcdeg.a.txt"));
  EXPECT_TRUE(FileStore::valid_name("0123456789abcdef0123456789abcdef.a.txt"));
  EXPECT_FALSE(store.get("0123456789abcdef0123456789abcdef.a.txt", Clock::time_point{}).has_value());
}

}  // namespace
}  // namespace nmt::server
