// The bound on what POST /translate_file's uploads hold together (server/documents/
// upload_budget.h): what an upload is charged, and that a second upload over the bound is
// refused while the first holds its share, then taken once the first gives it back.
#include "server/documents/upload_budget.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace nmt::server {
namespace {

TEST(UploadCharge, TextFormatsAreTheirBytesArchivesWhatTheyMayInflateTo) {
  DocumentLimits limits;
  limits.max_compression_ratio = 100;
  limits.max_decompressed_bytes = 64u << 20;
  EXPECT_EQ(upload_charge("notes.txt", 1000, limits), 1000u);
  EXPECT_EQ(upload_charge("page.HTML", 5000, limits), 5000u);
  EXPECT_EQ(upload_charge("film.srt", 0, limits), 0u);
  // An archive: its bytes and its entries inflated by the ratio, the ratio's 64 KiB floor...
  EXPECT_EQ(upload_charge("a.docx", 100, limits), 100u + 65536u);
  EXPECT_EQ(upload_charge("a.ODT", 10000, limits), 10000u + 1000000u);
  // ...and max_decompressed_bytes at most.
  EXPECT_EQ(upload_charge("a.pptx", 4u << 20, limits), (4u << 20) + (64u << 20));
  EXPECT_EQ(upload_charge("docx", 10, limits), 10u);  // no extension: read_document refuses it
}

TEST(UploadBudget, ASecondUploadOverTheBoundIsRefusedWhileTheFirstHoldsItsShare) {
  UploadBudget budget(100);
  ASSERT_TRUE(budget.take(60));  // the first upload
  EXPECT_EQ(budget.in_use(), 60u);
  EXPECT_FALSE(budget.take(50));  // the second: 110 > 100, refused, nothing taken
  EXPECT_EQ(budget.in_use(), 60u);
  EXPECT_TRUE(budget.take(40));  // a smaller one fits beside the first: exactly the bound
  EXPECT_FALSE(budget.take(1));
  budget.give_back(60);  // the first answered
  EXPECT_TRUE(budget.take(50));
  EXPECT_EQ(budget.in_use(), 90u);
  budget.give_back(50);
  budget.give_back(40);
  EXPECT_EQ(budget.in_use(), 0u);
  EXPECT_THROW(budget.give_back(1), std::logic_error);
}

TEST(UploadBudget, OneLargerThanTheWholeBudgetNeverFits) {
  UploadBudget budget(100);
  EXPECT_FALSE(budget.never_fits(100));
  EXPECT_TRUE(budget.never_fits(101));
  EXPECT_FALSE(budget.take(101));
  EXPECT_TRUE(budget.take(100));
}

}  // namespace
}  // namespace nmt::server
