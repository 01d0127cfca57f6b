// The model repository's folder listing: which subfolders are models, the fingerprint that
// tells a replaced file, and the language pair of a folder name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "server/repository/model_folder.h"

using namespace nmt::server;
namespace fs = std::filesystem;

namespace {

void write(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

void write_model(const fs::path& dir) {
  fs::create_directories(dir);
  for (const std::string& file : model_files(dir.string())) write(dir / file, "x");
}

struct TempDir {
  fs::path path = fs::temp_directory_path() /
                  ("nmt-model-folder-" + std::to_string(::getpid()) + "-" +
                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
};

}  // namespace

TEST(ModelFolder, ListsFoldersWithAConfig) {
  TempDir repo;
  write_model(repo.path / "opus-mt-en-de");
  fs::create_directories(repo.path / "incomplete");
  write(repo.path / "incomplete" / "config.json", "{}");
  fs::create_directories(repo.path / "docs");  // no config.json: not a model
  write_model(repo.path / ".staging");         // hidden: a copy being written
  write(repo.path / "README", "not a folder");
  const auto folders = scan_model_folders(repo.path.string());
  ASSERT_EQ(folders.size(), 2u);
  EXPECT_EQ(folders.at("opus-mt-en-de").missing, "");
  EXPECT_FALSE(folders.at("opus-mt-en-de").fingerprint.empty());
  EXPECT_EQ(folders.at("incomplete").missing, "model.safetensors, source.spm, target.spm, vocab.json");
  EXPECT_EQ(folders.at("incomplete").fingerprint, "");
  EXPECT_THROW(scan_model_folders((repo.path / "absent").string()), std::runtime_error);
}

TEST(ModelFolder, FingerprintChangesWhenAFileIsReplaced) {
  TempDir repo;
  const fs::path model = repo.path / "m";
  write_model(model);
  const std::string before = model_fingerprint(model.string());
  EXPECT_EQ(model_fingerprint(model.string()), before);  // stable while nothing changes
  write(model / "model.safetensors", "yy");  // another size
  const std::string resized = model_fingerprint(model.string());
  EXPECT_NE(resized, before);
  // The same size, written later: the modification time tells.
  fs::last_write_time(model / "model.safetensors",
                      fs::last_write_time(model / "model.safetensors") + std::chrono::seconds(2));
  EXPECT_NE(model_fingerprint(model.string()), resized);
}

TEST(ModelFolder, AMultilingualFolderNeedsItsTokenizersFiles) {
  TempDir repo;
  const fs::path nllb = repo.path / "nllb";
  fs::create_directories(nllb);
  write(nllb / "config.json", "{}");
  write(nllb / "tokenizer_config.json", R"({"tokenizer_class": "NllbTokenizerFast"})");
  EXPECT_EQ(scan_model_folders(repo.path.string()).at("nllb").missing,
            "model.safetensors, sentencepiece.bpe.model");
  write(nllb / "model.safetensors", "x");
  write(nllb / "sentencepiece.bpe.model", "x");
  const ModelFolder complete = scan_model_folders(repo.path.string()).at("nllb");
  EXPECT_EQ(complete.missing, "");
  ASSERT_FALSE(complete.fingerprint.empty());
  // A file read where it exists changes the print when it comes (or goes).
  write(nllb / "tokenizer.json", "{}");
  EXPECT_NE(model_fingerprint(nllb.string()), complete.fingerprint);

  const fs::path m2m = repo.path / "m2m";
  fs::create_directories(m2m);
  write(m2m / "config.json", "{}");
  write(m2m / "tokenizer_config.json", R"({"tokenizer_class": "M2M100Tokenizer"})");
  EXPECT_EQ(scan_model_folders(repo.path.string()).at("m2m").missing,
            "model.safetensors, sentencepiece.bpe.model, vocab.json");
}
