#include "dist/communicator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

namespace gk::dist {
namespace {

TEST(SingleProcessCommunicatorTest, CollectivesAreTheIdentity) {
  auto c = SingleProcessCommunicator();
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->size(), 1);
  std::vector<float> x = {1.5f, -2.f};
  ASSERT_TRUE(c->AllReduceSum(std::span<float>(x)).ok());
  EXPECT_EQ(x, (std::vector<float>{1.5f, -2.f}));
  std::vector<float> out(2);
  ASSERT_TRUE(c->AllGather(x, out).ok());
  EXPECT_EQ(out, x);
  EXPECT_FALSE(c->AllGather(x, std::span<float>(out.data(), 1)).ok());
  ASSERT_TRUE(c->Gather(x, out, 0).ok());
  EXPECT_FALSE(c->Gather(x, out, 1).ok());
  std::string s = "hello";
  ASSERT_TRUE(BroadcastString(*c, &s, 0).ok());
  EXPECT_EQ(s, "hello");
  EXPECT_FALSE(c->Broadcast({}, 1).ok());
  auto part = c->Split(3, 0);
  ASSERT_TRUE(part.ok());
  EXPECT_EQ((*part)->size(), 1);
}

TEST(SingleProcessCommunicatorTest, WorldIsSingleProcessWithoutALauncher) {
  if (LaunchedByMpi()) GTEST_SKIP() << "running under mpirun";
  auto w = World();
  ASSERT_TRUE(w.ok()) << w.message();
  EXPECT_EQ((*w)->size(), 1);
  EXPECT_EQ((*w)->backend(), "single process");
}

// Run as `mpirun -np N gemmakit_tests --gtest_filter=MpiCommunicatorTest.*` (ctest
// mpi_communicator_np2/np4); skipped in a single process. Each rank checks the results
// against values it computes from the rank numbers alone.
class MpiCommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!LaunchedByMpi()) GTEST_SKIP() << "not started by mpirun";
    auto w = World();
    ASSERT_TRUE(w.ok()) << w.message();
    comm = *w;
    ASSERT_GT(comm->size(), 1);
    ASSERT_NE(comm->backend().find("MPI"), std::string::npos);
  }
  Communicator* comm = nullptr;
};

TEST_F(MpiCommunicatorTest, AllReduceSumAndMax) {
  const int r = comm->rank(), n = comm->size();
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(r + 1) * float(i);
  ASSERT_TRUE(comm->AllReduceSum(std::span<float>(x)).ok());
  const float ranks_sum = float(n * (n + 1) / 2);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], ranks_sum * float(i)) << i;
  std::vector<double> d = {double(r), 0.5};
  ASSERT_TRUE(comm->AllReduceSum(std::span<double>(d)).ok());
  EXPECT_EQ(d[0], double(n * (n - 1) / 2));
  EXPECT_EQ(d[1], 0.5 * n);
  std::vector<int64_t> m = {r == 1 ? 7 : 0, -r};
  ASSERT_TRUE(comm->AllReduceMax(std::span<int64_t>(m)).ok());
  EXPECT_EQ(m[0], 7);
  EXPECT_EQ(m[1], 0);
  EXPECT_GT(comm->bytes_communicated(), 0);
}

TEST_F(MpiCommunicatorTest, AllGatherAndReduceScatter) {
  const int r = comm->rank(), n = comm->size();
  std::vector<float> in = {float(r), float(10 * r)};
  std::vector<float> out(2 * size_t(n));
  ASSERT_TRUE(comm->AllGather(in, out).ok());
  for (int k = 0; k < n; ++k) {
    EXPECT_EQ(out[2 * size_t(k)], float(k));
    EXPECT_EQ(out[2 * size_t(k) + 1], float(10 * k));
  }
  // Gather to the last rank: only it receives.
  std::vector<float> at_root(r == n - 1 ? 2 * size_t(n) : 0);
  ASSERT_TRUE(comm->Gather(in, at_root, n - 1).ok());
  if (r == n - 1) {
    EXPECT_EQ(at_root, out);
  }
  // Block k of rank r holds r + k; rank r receives Σ_r (r + k) for its own block k = r.
  std::vector<float> blocks(3 * size_t(n));
  for (int k = 0; k < n; ++k) {
    for (int i = 0; i < 3; ++i) blocks[3 * size_t(k) + size_t(i)] = float(r + k + i);
  }
  std::vector<float> mine(3);
  ASSERT_TRUE(comm->ReduceScatterSum(blocks, mine).ok());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(mine[size_t(i)], float(n * (n - 1) / 2 + n * (r + i)));
  EXPECT_FALSE(comm->ReduceScatterSum(blocks, std::span<float>(mine.data(), 2)).ok());
}

TEST_F(MpiCommunicatorTest, AllReduceSumAllSplitsTheSumsBackIntoEachBuffer) {
  const int r = comm->rank(), n = comm->size();
  std::vector<float> a = {float(r), 1.f}, b = {float(2 * r)};
  std::vector<float> scratch;
  const std::span<float> buffers[] = {a, b};
  ASSERT_TRUE(AllReduceSumAll(*comm, buffers, &scratch).ok());
  EXPECT_EQ(a, (std::vector<float>{float(n * (n - 1) / 2), float(n)}));
  EXPECT_EQ(b, (std::vector<float>{float(n * (n - 1))}));
}

// Even and odd ranks form two groups (the tensor-parallel groups of a tp x dp grid are made so).
TEST_F(MpiCommunicatorTest, SplitMakesGroupsOfOneColor) {
  const int r = comm->rank(), n = comm->size();
  auto part = comm->Split(r % 2, r);
  ASSERT_TRUE(part.ok()) << part.message();
  Communicator& g = **part;
  EXPECT_EQ(g.size(), (n + 1 - r % 2) / 2);
  EXPECT_EQ(g.rank(), r / 2);
  std::vector<float> x = {float(r)};
  ASSERT_TRUE(g.AllReduceSum(std::span<float>(x)).ok());
  float want = 0;
  for (int k = r % 2; k < n; k += 2) want += float(k);
  EXPECT_EQ(x[0], want);
  std::string s = g.rank() == 0 ? StrCat("group ", r % 2) : "";
  ASSERT_TRUE(BroadcastString(g, &s, 0).ok());
  EXPECT_EQ(s, StrCat("group ", r % 2));
}

TEST_F(MpiCommunicatorTest, BroadcastAndBarrier) {
  std::string s = comm->rank() == 1 ? std::string(100000, 'x') + "end" : "";
  ASSERT_TRUE(BroadcastString(*comm, &s, 1).ok());
  EXPECT_EQ(s.size(), 100003u);
  EXPECT_EQ(s.substr(s.size() - 3), "end");
  EXPECT_TRUE(comm->Barrier().ok());
  EXPECT_FALSE(comm->Broadcast({}, comm->size()).ok());
}

}  // namespace
}  // namespace gk::dist
