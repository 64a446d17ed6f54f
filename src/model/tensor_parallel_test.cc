#include "model/tensor_parallel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <vector>

#include "dist/communicator.h"
#include "model/gemma_model.h"
#include "model/toy_models_test_util.h"
#include "model/weights.h"

namespace gk {
namespace {

TEST(TensorParallel, ShardsHeadsWidthsAndReplicatesKvHeads) {
  ModelConfig c = *PresetConfig("31b");  // 32 query heads; 16 KV heads sliding, 4 on full layers
  auto s = ShardModelConfig(c, 8);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(s->num_heads, 4);
  EXPECT_EQ(s->num_kv_heads, 2);
  EXPECT_EQ(s->num_global_kv_heads, 1);  // 4 KV heads on 8 ranks: each replicated twice
  EXPECT_EQ(s->intermediate_size, c.intermediate_size / 8);
  EXPECT_EQ(s->vocab_size, c.vocab_size);  // the logits stay whole rows
  EXPECT_EQ(FirstKvHead(4, 8, 5), 2);      // ranks 4 and 5 hold KV head 2
  EXPECT_EQ(FirstKvHead(16, 8, 5), 10);
  EXPECT_EQ(LocalKvHeads(16, 8), 2);

  auto bad = ShardModelConfig(c, 3);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("32 query heads"), std::string::npos) << bad.message();
  ModelConfig odd = c;
  odd.num_heads = 24;
  odd.num_kv_heads = 6;  // 24 / 4 heads fine, but 6 KV heads neither split over 4 ranks nor replicate
  bad = ShardModelConfig(odd, 4);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("6 KV heads"), std::string::npos) << bad.message();
  ModelConfig moe = *PresetConfig("tiny-moe");
  moe.moe_intermediate_size = 66;
  bad = ShardModelConfig(moe, 4);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("experts' width 66"), std::string::npos) << bad.message();
  EXPECT_FALSE(ShardModelConfig(c, 0).ok());
}

TEST(TensorParallel, VocabularyShardsCoverEveryRowOnce) {
  for (int64_t V : {10, 300, 301, 262144}) {
    for (int tp : {1, 2, 3, 4, 8}) {
      int64_t next = 0;
      for (int r = 0; r < tp; ++r) {
        const VocabRange v = VocabShard(V, tp, r);
        EXPECT_EQ(v.begin, std::min(next, V));
        EXPECT_LE(v.rows, v.per_rank);
        next = v.begin + v.rows;
      }
      EXPECT_EQ(next, V) << V << " " << tp;
    }
  }
}

// Row r, columns [c0, c0 + n) of a matrix as f32.
std::vector<float> Cells(const MatrixView& m, int64_t r, int64_t c0, int64_t n) {
  std::vector<float> row(size_t(m.cols));
  m.RowToF32(r, row.data());
  return std::vector<float>(row.begin() + c0, row.begin() + c0 + n);
}

// Every rank's share, read from the file, equals the same cells of the whole model's matrices.
void CheckShares(const ModelConfig& c, const std::string& dir) {
  auto whole = LoadWeights(dir, c);
  ASSERT_TRUE(whole.ok()) << whole.message();
  for (int tp : {2, 4}) {
    for (int rank = 0; rank < tp; ++rank) {
      SCOPED_TRACE(testing::Message() << "tp " << tp << " rank " << rank);
      auto part = LoadWeights(dir, c, WeightLoadMode::kCopy, TensorParallel{nullptr, rank, tp});
      ASSERT_TRUE(part.ok()) << part.message();
      const VocabRange v = VocabShard(c.vocab_size, tp, rank);
      ASSERT_EQ(part->embed.rows, v.rows);
      EXPECT_EQ(Cells(part->embed, v.rows - 1, 0, c.hidden_size), Cells(whole->embed, v.begin + v.rows - 1, 0, c.hidden_size));
      if (!whole->ple_embed.empty()) {
        const VocabRange pv = VocabShard(c.vocab_size_per_layer_input, tp, rank);
        ASSERT_EQ(part->ple_embed.rows, pv.rows);
        EXPECT_EQ(Cells(part->ple_embed, 0, 0, 8), Cells(whole->ple_embed, pv.begin, 0, 8));
      }
      for (int l = 0; l < c.num_layers; ++l) {
        const LayerWeights &p = part->layers[size_t(l)], &w = whole->layers[size_t(l)];
        const int64_t H = c.HeadDim(l), Nl = c.num_heads / tp, Fl = c.MlpWidth(l) / tp;
        ASSERT_EQ(p.q.rows, Nl * H);
        EXPECT_EQ(Cells(p.q, Nl * H - 1, 0, c.hidden_size), Cells(w.q, (rank + 1) * Nl * H - 1, 0, c.hidden_size));
        if (!w.k.empty()) {
          const int K = c.KvHeads(l);
          ASSERT_EQ(p.k.rows, LocalKvHeads(K, tp) * H);
          EXPECT_EQ(Cells(p.k, 1, 0, c.hidden_size), Cells(w.k, FirstKvHead(K, tp, rank) * H + 1, 0, c.hidden_size));
        }
        ASSERT_EQ(p.o.cols, Nl * H);
        EXPECT_EQ(Cells(p.o, 3, 0, Nl * H), Cells(w.o, 3, rank * Nl * H, Nl * H));
        ASSERT_EQ(p.up.rows, Fl);
        EXPECT_EQ(Cells(p.up, 0, 0, c.hidden_size), Cells(w.up, rank * Fl, 0, c.hidden_size));
        ASSERT_EQ(p.down.cols, Fl);
        EXPECT_EQ(Cells(p.down, c.hidden_size - 1, 0, Fl), Cells(w.down, c.hidden_size - 1, rank * Fl, Fl));
        EXPECT_EQ(p.router.rows, w.router.rows);  // routing is replicated
        for (size_t e = 0; e < w.expert_gate_up.size(); ++e) {
          const int64_t Fe = c.moe_intermediate_size, Fel = Fe / tp;
          const MatrixView &pg = p.expert_gate_up[e], &wg = w.expert_gate_up[e];
          ASSERT_EQ(pg.rows, 2 * Fel);
          EXPECT_EQ(Cells(pg, 0, 0, c.hidden_size), Cells(wg, rank * Fel, 0, c.hidden_size));            // gate half
          EXPECT_EQ(Cells(pg, Fel, 0, c.hidden_size), Cells(wg, Fe + rank * Fel, 0, c.hidden_size));   // up half
          EXPECT_EQ(Cells(p.expert_down[e], 2, 0, Fel), Cells(w.expert_down[e], 2, rank * Fel, Fel));
        }
      }
    }
  }
}

TEST(TensorParallel, EachRankReadsItsShareOfEveryMatrix) {
  for (const char* preset : {"tiny", "tiny-e2b", "tiny-moe"}) {
    SCOPED_TRACE(preset);
    ModelConfig c = ToyConfig(preset, 8);
    c.vocab_size = c.vocab_size_per_layer_input = 301;  // uneven vocabulary shards
    for (DType dt : {DType::kF32, DType::kBF16}) {
      const std::string dir = WriteToyModel(c, std::string("tp_share_") + preset, dt, 7);
      CheckShares(c, dir);
      std::filesystem::remove_all(dir);
    }
  }
}

// Run as `mpirun -np N gemmakit_tests --gtest_filter=...:MpiTensorParallelTest.*` (ctest
// mpi_communicator_np2/np4); skipped in a single process. Every rank loads the whole model and
// its share, runs the same batch through both and compares the logits.
TEST(MpiTensorParallelTest, ShardedLogitsEqualTheWholeModel) {
  if (!dist::LaunchedByMpi()) GTEST_SKIP() << "not started by mpirun";
  auto world = dist::World();
  ASSERT_TRUE(world.ok()) << world.message();
  dist::Communicator* comm = *world;
  if (comm->size() < 2) GTEST_SKIP() << "one rank";
  for (const char* preset : {"gemma3-270m", "tiny-e2b", "tiny-moe"}) {
    SCOPED_TRACE(preset);
    ModelConfig c = ToyConfig(preset, 4);
    c.vocab_size = c.vocab_size_per_layer_input = 301;
    // Each rank writes its own copy: the same seed gives the same bytes.
    const std::string dir = WriteToyModel(c, std::string("tp_mpi_") + preset, DType::kF32, 11);
    ThreadPool pool(1);
    ModelLoadOptions lo;
    lo.max_chunk = 32;
    auto whole = GemmaModel::Load(dir, &pool, lo);
    ASSERT_TRUE(whole.ok()) << whole.message();
    lo.tp = TensorParallel{comm, comm->rank(), comm->size()};
    auto part = GemmaModel::Load(dir, &pool, lo);
    ASSERT_TRUE(part.ok()) << part.message();
    EXPECT_EQ((*part)->config().num_heads, c.num_heads / comm->size());
    const int64_t V = c.vocab_size;
    auto run = [&](GemmaModel& m) {
      KvCache a = m.NewKvCache(16), b = m.NewKvCache(16);
      const std::vector<int32_t> ta = {2, 17, 300, 99, 5, 150, 8}, tb = {2, 151, 0, 12, 299};
      std::vector<float> out(size_t(8 * V)), step(size_t(2 * V));
      const BatchItem items[] = {{ta, &a, LogitsMode::kAll}, {tb, &b, LogitsMode::kLast}};
      EXPECT_TRUE(m.ForwardBatch(items, out.data()).ok());
      const std::vector<int32_t> na = {44}, nb = {45};  // one decode step each, past the window
      const BatchItem next[] = {{na, &a, LogitsMode::kLast}, {nb, &b, LogitsMode::kLast}};
      EXPECT_TRUE(m.ForwardBatch(next, step.data()).ok());
      out.insert(out.end(), step.begin(), step.end());
      return out;
    };
    const std::vector<float> want = run(**whole), got = run(**part);
    ASSERT_EQ(want.size(), got.size());
    double err = 0, scale = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      err = std::max(err, double(std::fabs(want[i] - got[i])));
      scale = std::max(scale, double(std::fabs(want[i])));
    }
    EXPECT_LE(err, 1e-5 * scale) << "max |difference| " << err << " of " << scale;
    EXPECT_GT(scale, 0.0);
    std::filesystem::remove_all(dir);
  }
}

}  // namespace
}  // namespace gk
