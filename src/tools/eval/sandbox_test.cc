#include "tools/eval/sandbox.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "util/atomic_file.h"
#include "util/test_temp_dir.h"

namespace gk::eval {
namespace {

class SandboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (LandlockAbi() == 0) GTEST_SKIP() << "this kernel has no Landlock; the sandbox cannot be tested here";
    root_ = TestTempDir("sandbox");
    work_ = root_ + "/work";
    std::filesystem::create_directories(work_);
    sh_ = *FindProgram("sh");
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  SandboxSpec Shell(const std::string& script) const {
    SandboxSpec s;
    s.argv = {sh_, "-c", script};
    s.cwd = work_;
    s.writable_dir = work_;
    s.wall_s = 10;
    return s;
  }
  std::string root_, work_, sh_;
};

TEST_F(SandboxTest, WritesOnlyInsideTheWorkingDirectory) {
  auto r = RunSandboxed(Shell("echo in > inside.txt; echo out > ../outside.txt; echo done"));
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_TRUE(std::filesystem::exists(work_ + "/inside.txt"));
  EXPECT_FALSE(std::filesystem::exists(root_ + "/outside.txt"));
  EXPECT_NE(r->err.find("Permission denied"), std::string::npos) << r->err;
  EXPECT_EQ(r->out, "done\n");
}

TEST_F(SandboxTest, CannotRemoveOrRenameOutside) {
  ASSERT_TRUE(WriteFileAtomic(root_ + "/keep.txt", "x").ok());
  auto r = RunSandboxed(Shell("rm -f ../keep.txt; mv ../keep.txt moved.txt; true"));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(std::filesystem::exists(root_ + "/keep.txt"));
  EXPECT_FALSE(std::filesystem::exists(work_ + "/moved.txt"));
}

TEST_F(SandboxTest, ExecutesOnlyTheAllowedPrograms) {
  SandboxSpec s = Shell("echo before; /bin/echo ran-a-program; echo after");
  s.allowed_executables = {sh_};
  auto r = RunSandboxed(s);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->out, "before\nafter\n");  // /bin/echo was refused
  EXPECT_NE(r->err.find("Permission denied"), std::string::npos) << r->err;
}

TEST_F(SandboxTest, ReadsOnlyTheGivenPaths) {
  ASSERT_TRUE(WriteFileAtomic(root_ + "/secret.txt", "secret").ok());
  ASSERT_TRUE(WriteFileAtomic(work_ + "/own.txt", "own").ok());
  SandboxSpec s = Shell("cat own.txt; cat ../secret.txt; ls .. >/dev/null && echo listed; cat /etc/hostname >/dev/null && echo etc");
  s.readable_paths = {"/usr", "/lib", "/lib64", "/bin", "/etc/ld.so.cache"};
  auto r = RunSandboxed(s);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->out, "own") << r->err;  // not the secret, no listing of the parent, nothing in /etc
  EXPECT_NE(r->err.find("Permission denied"), std::string::npos) << r->err;
  s.readable_paths.push_back(root_ + "/secret.txt");  // a file rule grants that one file
  r = RunSandboxed(s);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->out, "ownsecret") << r->err;
}

TEST_F(SandboxTest, WallClockLimitKillsTheWholeGroup) {
  SandboxSpec s = Shell("sleep 30 & sleep 30; echo never");
  s.wall_s = 0.3;
  auto r = RunSandboxed(s);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->timed_out);
  EXPECT_EQ(r->signal, SIGKILL);
  EXPECT_LT(r->seconds, 5);
  EXPECT_EQ(r->out, "");
}

TEST_F(SandboxTest, FileSizeLimit) {
  SandboxSpec s = Shell("head -c 2000000 /dev/zero > big.bin; echo rc=$?");
  s.max_file_bytes = 100000;
  auto r = RunSandboxed(s);
  ASSERT_TRUE(r.ok());
  EXPECT_LE(std::filesystem::file_size(work_ + "/big.bin"), 100000u);
}

TEST_F(SandboxTest, ExitCodesAndStdin) {
  auto r = RunSandboxed(Shell("cat; exit 3"));  // stdin is /dev/null: cat ends at once
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_FALSE(r->timed_out);
}

TEST(SandboxArgsTest, Errors) {
  SandboxSpec s;
  s.argv = {"relative"};
  EXPECT_FALSE(RunSandboxed(s).ok());
  EXPECT_FALSE(FindProgram("no-such-program-gk").ok());
  EXPECT_TRUE(FindProgram("sh").ok());
}

}  // namespace
}  // namespace gk::eval
