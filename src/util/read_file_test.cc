#include "util/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

namespace gk {
namespace {

std::string TestDir(const char* name) {
  const std::string dir = ::testing::TempDir() + name + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(ReadFileTest, ReadsBackWhatWasWritten) {
  const std::string dir = TestDir("gk_atomic_file");
  std::string big(300000, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  ASSERT_TRUE(WriteFileAtomic(dir + "/big.bin", big).ok());
  auto back = ReadFile(dir + "/big.bin");
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(*back, big);
  ASSERT_TRUE(WriteFileAtomic(dir + "/empty", "").ok());
  EXPECT_EQ(*ReadFile(dir + "/empty"), "");
  EXPECT_FALSE(std::filesystem::exists(dir + "/big.bin.tmp." + std::to_string(::getpid())));
}

// A checkpoint from the internet may hold a symlink to a device, read until memory runs out.
TEST(ReadFileTest, RefusesDevicesAndDirectories) {
  const std::string dir = TestDir("gk_read_file_kinds");
  std::filesystem::create_symlink("/dev/zero", dir + "/config.json");
  EXPECT_EQ(ReadFile(dir + "/config.json").message(),
            "cannot read " + dir + "/config.json: it is a device, not a file");
  EXPECT_EQ(ReadFile("/dev/urandom").message(), "cannot read /dev/urandom: it is a device, not a file");
  EXPECT_EQ(ReadFile(dir).message(), "cannot read " + dir + ": it is a directory");
  EXPECT_EQ(ReadFile(dir + "/absent").message(), "cannot open " + dir + "/absent: No such file or directory");
  EXPECT_TRUE(CheckReadableFile(dir + "/absent").message().find("No such file") != std::string::npos);
}

TEST(ReadFileTest, ReadsAPipeToItsEnd) {  // `--config <(...)`
  const std::string dir = TestDir("gk_read_file_fifo");
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::thread writer([&] {
    std::ofstream out(fifo, std::ios::binary);
    for (int i = 0; i < 1000; ++i) out << "line " << i << "\n";
  });
  auto text = ReadFile(fifo);
  writer.join();
  ASSERT_TRUE(text.ok()) << text.message();
  EXPECT_EQ(text->substr(0, 14), "line 0\nline 1\n");
  EXPECT_EQ(text->size(), 8890u);
}

}  // namespace
}  // namespace gk
